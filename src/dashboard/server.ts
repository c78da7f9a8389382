/**
 * The run dashboard's HTTP server: serves the single-page app and a read-only JSON API over a runs
 * folder (the files written by `pipeline/run-dir.ts`).
 *
 * It only reads, and only regular files inside the runs folder: run and file names are restricted to
 * plain names, nothing reached through a symbolic link is served (the file itself or any folder on its
 * path below the runs folder), FIFOs, sockets and devices are never opened, each opened file is checked
 * to be the one looked at and to lie inside the runs folder, and every read has a size cap. Error
 * messages name files, never their contents. It binds to 127.0.0.1 by default; beyond loopback it
 * refuses to start without a key unless told `insecure`. With a key, every /api request needs it
 * (`Authorization: Bearer KEY` or `?key=KEY`); the static app holds no run data and needs none.
 * It is not a general file server, and it does not write anything.
 *
 *   GET /                                   the app (index.html, app.js, style.css; no external assets)
 *   GET /api/runs                           [{name, status, suites, updatedAt, replayOf?}] (replayOf: the run
 *                                           whose checkpoint this one starts from, e.g. the demo's naive replay)
 *   GET /api/runs/:run/metrics?from=B&file=F {records, next, file, skipped, omittedBytes, reset}:
 *                                           metrics.jsonl's complete lines from byte B (a `next` this
 *                                           API gave for the file `file`), at most the last
 *                                           METRICS_WINDOW_BYTES / METRICS_WINDOW_RECORDS of them
 *   GET /api/runs/:run/eval                 eval.json ({} when absent)
 *   GET /api/runs/:run/config               config.json
 *   GET /api/runs/:run/status               status.json (null when absent)
 *   GET /api/runs/:run/checkpoints          {checkpoints: [{name, stage, step, bytes, files, modifiedAt, trainer}], latest}
 *   GET /api/runs/:run/metrics.csv          metrics.jsonl as CSV (one column per figure, dotted paths)
 *   GET /api/runs/:run/trajectories         [file names, newest last]
 *   GET /api/runs/:run/trajectories/:file   {records, skipped} (one step's trajectories)
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { constants as fsConstants, type Stats } from "node:fs";
import { lstat, open, readdir, readFile, readlink, realpath, type FileHandle } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { isIPv4, isIPv6 } from "node:net";
import { dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

export const STATIC_DIR = join(dirname(fileURLToPath(import.meta.url)), "static");
const STATIC_FILES: Record<string, string> = {
  "/": "index.html",
  "/index.html": "index.html",
  "/app.js": "app.js",
  "/charts.js": "charts.js",
  "/metrics.js": "metrics.js",
  "/runpage.js": "runpage.js",
  "/viewer.js": "viewer.js",
  "/style.css": "style.css",
};
const CONTENT_TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
};
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$/;
const MIB = 1024 * 1024;
/** Largest config.json, status.json or eval.json the dashboard reads. */
export const JSON_FILE_MAX_BYTES = 16 * MIB;
/** Largest trajectories file (one step's rollouts) the dashboard reads. */
export const TRAJECTORY_FILE_MAX_BYTES = 64 * MIB;
/** Most bytes of metrics.jsonl one response reads: a larger backlog is answered with its tail. */
export const METRICS_WINDOW_BYTES = 8 * MIB;
/** Largest metrics.jsonl the CSV export reads (413 past it). */
export const METRICS_CSV_MAX_BYTES = 64 * MIB;
/** Most entries of one checkpoint folder the dashboard stats to size it. */
const CHECKPOINT_FILES_MAX = 256;
/** Most metrics records one response carries: a longer backlog is answered with its last ones. */
export const METRICS_WINDOW_RECORDS = 20_000;
const NL = 0x0a;
// Never follow a link at the last step, and never wait on a FIFO's writer while opening.
const OPEN_FLAGS = fsConstants.O_RDONLY | (fsConstants.O_NOFOLLOW ?? 0) | (fsConstants.O_NONBLOCK ?? 0);

export interface DashboardOptions {
  runsDir: string;
  port?: number;
  host?: string;
  /** When set, every /api request needs it: `Authorization: Bearer <key>` or `?key=<key>`. */
  key?: string;
  /** Serve beyond loopback without a key (the caller warns). */
  insecure?: boolean;
}

/** A reply that is not JSON (the CSV export). */
export class RawReply {
  constructor(
    readonly type: string,
    readonly body: string,
    readonly filename?: string,
  ) {}
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** True for 127.0.0.0/8, ::1 (and its IPv4-mapped 127.x form) and "localhost". */
export function isLoopbackHost(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, "$1");
  if (h === "localhost") return true;
  if (isIPv4(h)) return h.split(".")[0] === "127";
  if (!isIPv6(h)) return false;
  const canonical = new URL(`http://[${h}]/`).hostname.slice(1, -1); // "::1", "::ffff:7f00:1", ...
  return canonical === "::1" || /^::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}$/.test(canonical);
}

/** Why serving on `host` must not start (beyond loopback with no key and no `insecure`), or undefined. */
export function exposureRefusal(host: string, key: string | undefined, insecure: boolean | undefined): string | undefined {
  if (isLoopbackHost(host) || key || insecure) return undefined;
  return (
    `refusing to serve the dashboard on ${host} (beyond loopback) without a key: anyone who can reach it could read every run. ` +
    "Set a key with --key KEY or SINKFLEX_DASHBOARD_KEY (then open the page with ?key=KEY), bind to 127.0.0.1, " +
    "or pass --insecure to serve it unauthenticated anyway"
  );
}

function checkName(p: string): void {
  if (!NAME.test(p)) throw new HttpError(400, `invalid name "${p.slice(0, 80)}": use letters, digits, "_", "-" and "." (not starting with "." or "-")`);
}

function errnoOf(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err ? String((err as { code: unknown }).code) : undefined;
}

async function lstatOrNull(path: string): Promise<Stats | null> {
  try {
    return await lstat(path);
  } catch (err) {
    if (errnoOf(err) === "ENOENT" || errnoOf(err) === "ENOTDIR") return null;
    throw err;
  }
}

/**
 * Walks `parts` below the runs folder `root` (a real path) without following links: each step must be
 * a real folder, the last a real folder (`kind` "dir") or a regular file ("file"). Null when absent.
 */
async function lookInside(root: string, parts: string[], kind: "file" | "dir"): Promise<{ path: string; stats: Stats } | null> {
  let path = root;
  let stats: Stats | null = null;
  for (const [i, part] of parts.entries()) {
    checkName(part);
    path = join(path, part);
    stats = await lstatOrNull(path);
    if (!stats) return null;
    const shown = parts.slice(0, i + 1).join("/");
    if (stats.isSymbolicLink()) {
      throw new HttpError(403, `${shown} is a symbolic link: the dashboard serves only regular files and folders inside the runs folder, never what a link points to`);
    }
    if (i < parts.length - 1 || kind === "dir") {
      if (!stats.isDirectory()) throw new HttpError(404, `${shown} is not a folder`);
    } else if (!stats.isFile()) {
      throw new HttpError(403, `${shown} is not a regular file (a FIFO, socket, device or folder): the dashboard reads only regular files`);
    }
  }
  return { path, stats: stats! };
}

function inside(root: string, real: string): boolean {
  return real === root || real.startsWith(root + sep);
}

/**
 * Opens the regular file at `parts` below `root` for reading, or null when it is absent. Refuses
 * links, non-regular files, a file swapped between the look and the open, one whose real path leaves
 * the runs folder, and one larger than `maxBytes`.
 */
async function openInside(root: string, parts: string[], maxBytes: number): Promise<{ handle: FileHandle; stats: Stats } | null> {
  const found = await lookInside(root, parts, "file");
  if (!found) return null;
  const shown = parts.join("/");
  let handle: FileHandle;
  try {
    handle = await open(found.path, OPEN_FLAGS);
  } catch (err) {
    if (errnoOf(err) === "ENOENT") return null;
    if (errnoOf(err) === "ELOOP") throw new HttpError(403, `${shown} is a symbolic link: the dashboard never follows links`);
    throw err;
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile() || stats.ino !== found.stats.ino || stats.dev !== found.stats.dev) {
      throw new HttpError(409, `${shown} changed while being opened; try again`);
    }
    // Where the opened file really is (Linux names it under /proc; elsewhere resolve the path again).
    const real = await readlink(`/proc/self/fd/${handle.fd}`).catch(() => realpath(found.path));
    if (!inside(root, real)) throw new HttpError(403, `${shown} lies outside the runs folder`);
    if (stats.size > maxBytes) {
      throw new HttpError(413, `${shown} is ${(stats.size / MIB).toFixed(1)} MiB, over the ${(maxBytes / MIB).toFixed(0)} MiB the dashboard reads`);
    }
    return { handle, stats };
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/** Reads `length` bytes from `position` (fewer if the file is shorter). */
async function readRange(handle: FileHandle, position: number, length: number): Promise<Buffer> {
  const buf = Buffer.alloc(length);
  let got = 0;
  while (got < length) {
    const { bytesRead } = await handle.read(buf, got, length - got, position + got);
    if (bytesRead === 0) break;
    got += bytesRead;
  }
  return buf.subarray(0, got);
}

/** A JSON file's value, or undefined when the file is absent. */
async function readJsonFile(root: string, parts: string[]): Promise<unknown> {
  const file = await openInside(root, parts, JSON_FILE_MAX_BYTES);
  if (!file) return undefined;
  let text: string;
  try {
    text = (await readRange(file.handle, 0, file.stats.size)).toString("utf8");
  } finally {
    await file.handle.close();
  }
  try {
    return JSON.parse(text);
  } catch {
    // JSON.parse's message quotes the text: never show it.
    throw new HttpError(422, `${parts.join("/")} is not valid JSON (perhaps still being written): fix or remove it`);
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The JSON objects among `text`'s lines; other lines (corrupt, or not an object) are counted in `skipped`. */
function parseRecords(text: string): { records: Record<string, unknown>[]; skipped: number } {
  const records: Record<string, unknown>[] = [];
  let skipped = 0;
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      skipped++;
      continue;
    }
    if (isRecord(value)) records.push(value);
    else skipped++;
  }
  return { records, skipped };
}

export interface MetricsPage {
  records: Record<string, unknown>[];
  /** Byte offset just past the last complete line read: the next request's `from`. */
  next: number;
  /** The file's identity; a request whose `file` differs (the file was rewritten) starts over. */
  file: string | null;
  /** Lines in this page that were not a JSON object (corrupt or e.g. `null`). */
  skipped: number;
  /** Bytes between `from` and the first line sent, left out to keep the page within the window. */
  omittedBytes: number;
  /** True when `from`/`file` did not match the file and the page starts over: drop earlier records. */
  reset: boolean;
}

/**
 * metrics.jsonl's complete lines from byte `from`: reads only bytes not read before, and at most the
 * last METRICS_WINDOW_BYTES and METRICS_WINDOW_RECORDS of them, so a large file answers as fast as a
 * small one, in bounded memory. A trailing line without its newline (being written) waits.
 */
export async function readMetrics(root: string, run: string, from: number, fileId: string | null): Promise<MetricsPage> {
  const opened = await openInside(root, [run, "metrics.jsonl"], Number.MAX_SAFE_INTEGER);
  if (!opened) return { records: [], next: 0, file: null, skipped: 0, omittedBytes: 0, reset: from > 0 };
  const { handle, stats } = opened;
  try {
    const id = `${stats.dev}-${stats.ino}`;
    const size = stats.size;
    const reset = (fileId !== null && fileId !== id) || from > size;
    if (reset) from = 0;
    const readStart = Math.max(from, size - METRICS_WINDOW_BYTES);
    const lead = readStart > from ? 1 : 0; // one byte before the window tells whether it starts a line
    const base = readStart - lead;
    const buf = await readRange(handle, base, size - base);
    let start = lead;
    if (lead && buf[0] !== NL) {
      const nl = buf.indexOf(NL, 1);
      if (nl < 0) return { records: [], next: from, file: id, skipped: 0, omittedBytes: 0, reset };
      start = nl + 1;
    }
    const lastNl = buf.lastIndexOf(NL);
    const end = lastNl + 1 > start ? lastNl + 1 : start;
    // Keep the last METRICS_WINDOW_RECORDS lines at most.
    let p = end - 1;
    for (let k = 0; k < METRICS_WINDOW_RECORDS && p >= start; k++) p = p > 0 ? buf.lastIndexOf(NL, p - 1) : -1;
    if (p >= start) start = p + 1;
    const { records, skipped } = parseRecords(buf.toString("utf8", start, end));
    return { records, next: base + end, file: id, skipped, omittedBytes: base + start - from, reset };
  } finally {
    await handle.close();
  }
}

async function readJsonLinesFile(root: string, parts: string[]): Promise<{ records: Record<string, unknown>[]; skipped: number } | null> {
  const file = await openInside(root, parts, TRAJECTORY_FILE_MAX_BYTES);
  if (!file) return null;
  try {
    return parseRecords((await readRange(file.handle, 0, file.stats.size)).toString("utf8"));
  } finally {
    await file.handle.close();
  }
}

async function listRuns(root: string): Promise<unknown[]> {
  const runs: { name: string; status: unknown; suites: unknown[]; updatedAt: string; replayOf?: string }[] = [];
  for (const entry of await readdir(root, { withFileTypes: true })) {
    // Real folders only (a link to a folder elsewhere is not a run of this folder).
    if (!entry.isDirectory() || !NAME.test(entry.name)) continue;
    const name = entry.name;
    try {
      if (!(await lookInside(root, [name, "config.json"], "file"))) continue;
    } catch {
      continue; // config.json is a link or not a regular file
    }
    let status: unknown = null;
    let config: unknown = {};
    try {
      status = (await readJsonFile(root, [name, "status.json"])) ?? null;
    } catch {}
    try {
      config = await readJsonFile(root, [name, "config.json"]);
    } catch {}
    const suites = isRecord(config) && Array.isArray(config.suites) ? config.suites.map((s: unknown) => (isRecord(s) ? s.env : undefined)) : [];
    const dirStats = await lstatOrNull(join(root, name));
    if (!dirStats) continue;
    const replayOf = replaySource(config, name);
    runs.push({ name, status: isRecord(status) ? status : null, suites, updatedAt: dirStats.mtime.toISOString(), ...(replayOf ? { replayOf } : {}) });
  }
  // A replay names a run of this folder only when that run is listed.
  for (const r of runs) if (r.replayOf && !runs.some((o) => o.name === r.replayOf)) delete r.replayOf;
  return runs.sort((a, b) => (a.updatedAt < b.updatedAt ? 1 : -1));
}

/** The run a config starts from when its model is another run's checkpoint (`<runs>/<run>/checkpoints/...`). */
function replaySource(config: unknown, self: string): string | undefined {
  const model = isRecord(config) && isRecord(config.model) ? config.model : undefined;
  if (!model || typeof model.checkpoint !== "string") return undefined;
  const parts = model.checkpoint.split(/[\\/]+/);
  const i = parts.lastIndexOf("checkpoints");
  const run = i > 0 ? parts[i - 1] : undefined;
  return run && run !== self && NAME.test(run) ? run : undefined;
}

/** A checkpoint name's stage and step ("grpo-00010" -> grpo, 10); "reference" and "final" have none. */
function checkpointPlace(name: string): { stage: string | null; step: number | null } {
  const m = /^(sft|grpo)-(\d+)$/.exec(name);
  return m ? { stage: m[1]!, step: Number(m[2]) } : { stage: null, step: null };
}

/** The size of a checkpoint folder's regular files (links and others are not counted), at most CHECKPOINT_FILES_MAX of them. */
async function folderSize(path: string): Promise<{ bytes: number; files: number; modifiedAt: string | null }> {
  let bytes = 0;
  let files = 0;
  let newest = 0;
  const entries = (await readdir(path, { withFileTypes: true })).slice(0, CHECKPOINT_FILES_MAX);
  for (const e of entries) {
    if (!e.isFile()) continue;
    const st = await lstatOrNull(join(path, e.name));
    if (!st?.isFile()) continue;
    bytes += st.size;
    files++;
    newest = Math.max(newest, st.mtimeMs);
  }
  return { bytes, files, modifiedAt: newest ? new Date(newest).toISOString() : null };
}

export interface CheckpointInfo {
  name: string;
  /** "checkpoints/<name>" or "final" (the run's final policy). */
  where: string;
  stage: string | null;
  step: number | null;
  bytes: number;
  files: number;
  modifiedAt: string | null;
  /** trainer.json (stage, step, sftSteps, ...), null when absent or unreadable. */
  trainer: unknown;
}

/** The run's checkpoint folders (real folders only, never half-written `.partial` ones), oldest first, and the `latest` pointer. */
async function listCheckpoints(root: string, run: string): Promise<{ checkpoints: CheckpointInfo[]; latest: string | null }> {
  const out: CheckpointInfo[] = [];
  const dir = await lookInside(root, [run, "checkpoints"], "dir");
  const names = dir ? (await readdir(dir.path, { withFileTypes: true })).filter((e) => e.isDirectory() && NAME.test(e.name)).map((e) => e.name) : [];
  const order = (n: string) => {
    const p = checkpointPlace(n);
    return n === "reference" ? [1, 1e12] : p.stage ? [p.stage === "sft" ? 0 : 2, p.step!] : [3, 0];
  };
  names.sort((a, b) => order(a)[0]! - order(b)[0]! || order(a)[1]! - order(b)[1]! || (a < b ? -1 : 1));
  const describe = async (parts: string[], name: string, where: string) => {
    const found = await lookInside(root, parts, "dir");
    if (!found) return;
    let trainer: unknown = null;
    try {
      trainer = (await readJsonFile(root, [...parts, "trainer.json"])) ?? null;
    } catch {}
    out.push({ name, where, ...checkpointPlace(name), ...(await folderSize(found.path)), trainer });
  };
  for (const n of names) await describe([run, "checkpoints", n], n, `checkpoints/${n}`);
  await describe([run, "final"], "final", "final");
  let latest: string | null = null;
  try {
    const file = await openInside(root, [run, "checkpoints", "latest"], 4096);
    if (file) {
      try {
        latest = (await readRange(file.handle, 0, file.stats.size)).toString("utf8").trim() || null;
      } finally {
        await file.handle.close();
      }
    }
  } catch {}
  return { checkpoints: out, latest: latest && NAME.test(latest) ? latest : null };
}

/** One CSV cell: quoted when needed; text that a spreadsheet would run as a formula is prefixed with '. */
function csvCell(v: unknown): string {
  if (v === undefined || v === null) return "";
  let s = typeof v === "object" ? JSON.stringify(v) : String(v);
  if (typeof v === "string" && /^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** A record's figures as dotted paths ({reward: {a: 1}} -> {"reward.a": 1}); arrays stay whole. */
export function flattenRecord(record: Record<string, unknown>, prefix = "", out: Record<string, unknown> = {}): Record<string, unknown> {
  for (const [k, v] of Object.entries(record)) {
    if (isRecord(v)) flattenRecord(v, `${prefix}${k}.`, out);
    else out[`${prefix}${k}`] = v;
  }
  return out;
}

/**
 * Every complete record of a run's metrics.jsonl (at most METRICS_CSV_MAX_BYTES of it, 413 past that)
 * and the run's start (status.json's startedAt, in ms) when known: what the CSV and TensorBoard exports read.
 */
export async function readAllMetrics(root: string, run: string): Promise<{ records: Record<string, unknown>[]; startedAt?: number }> {
  if (!(await lookInside(root, [run], "dir")) || !(await lookInside(root, [run, "config.json"], "file"))) {
    throw new HttpError(404, `no run named "${run}"`);
  }
  let startedAt: number | undefined;
  try {
    const status = await readJsonFile(root, [run, "status.json"]);
    const t = isRecord(status) && typeof status.startedAt === "string" ? Date.parse(status.startedAt) : NaN;
    if (Number.isFinite(t)) startedAt = t;
  } catch {}
  const file = await openInside(root, [run, "metrics.jsonl"], METRICS_CSV_MAX_BYTES);
  if (!file) return { records: [], startedAt };
  let text: string;
  try {
    text = (await readRange(file.handle, 0, file.stats.size)).toString("utf8");
  } finally {
    await file.handle.close();
  }
  // A trailing line without its newline is still being written.
  return { records: parseRecords(text.slice(0, text.lastIndexOf("\n") + 1)).records, startedAt };
}

/** metrics.jsonl as CSV: stage, step, time first, then every other figure in order of first appearance. */
export async function metricsCsv(root: string, run: string): Promise<string> {
  const rows = (await readAllMetrics(root, run)).records.map((r) => flattenRecord(r));
  const columns = ["stage", "step", "time"];
  const seen = new Set(columns);
  for (const r of rows) {
    for (const k of Object.keys(r)) {
      if (!seen.has(k)) {
        seen.add(k);
        columns.push(k);
      }
    }
  }
  return [columns.map(csvCell).join(","), ...rows.map((r) => columns.map((c) => csvCell(r[c])).join(","))].join("\n") + "\n";
}

function decodePart(p: string): string {
  try {
    return decodeURIComponent(p);
  } catch {
    throw new HttpError(400, `malformed percent-encoding in "${p.slice(0, 80)}"`);
  }
}

function cursorParam(search: URLSearchParams): number {
  const raw = search.get("from");
  if (raw === null || raw === "") return 0;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) throw new HttpError(400, `from must be a byte offset (a non-negative integer) that this API returned as "next", got "${raw.slice(0, 40)}"`);
  return n;
}

/** Answers one /api path; `runsDir` must exist. */
export async function handleApi(runsDir: string, pathname: string, search: URLSearchParams): Promise<unknown> {
  const root = await realpath(runsDir);
  const parts = pathname.split("/").filter(Boolean).map(decodePart); // ["api", "runs", ...]
  if (parts.length === 2 && parts[1] === "runs") return listRuns(root);
  if (parts[1] !== "runs" || parts.length < 4) throw new HttpError(404, `unknown API path ${pathname.slice(0, 200)}`);
  const run = parts[2]!;
  if (!(await lookInside(root, [run], "dir")) || !(await lookInside(root, [run, "config.json"], "file"))) {
    throw new HttpError(404, `no run named "${run}"`);
  }
  const what = parts[3];
  if (what === "metrics" && parts.length === 4) return readMetrics(root, run, cursorParam(search), search.get("file"));
  if (what === "eval" && parts.length === 4) return (await readJsonFile(root, [run, "eval.json"])) ?? {};
  if (what === "config" && parts.length === 4) return readJsonFile(root, [run, "config.json"]);
  if (what === "status" && parts.length === 4) return (await readJsonFile(root, [run, "status.json"])) ?? null;
  if (what === "checkpoints" && parts.length === 4) return listCheckpoints(root, run);
  if (what === "metrics.csv" && parts.length === 4) return new RawReply("text/csv; charset=utf-8", await metricsCsv(root, run), `${run}-metrics.csv`);
  if (what === "trajectories" && parts.length === 4) {
    const dir = await lookInside(root, [run, "trajectories"], "dir");
    if (!dir) return [];
    // Regular files only (a directory entry's type is the link's, not its target's).
    return (await readdir(dir.path, { withFileTypes: true }))
      .filter((e) => e.isFile() && NAME.test(e.name) && e.name.endsWith(".jsonl"))
      .map((e) => e.name)
      .sort();
  }
  if (what === "trajectories" && parts.length === 5) {
    const name = parts[4]!;
    checkName(name);
    const file = name.endsWith(".jsonl") ? await readJsonLinesFile(root, [run, "trajectories", name]) : null;
    if (!file) throw new HttpError(404, `no trajectory file "${name}"`);
    return file;
  }
  throw new HttpError(404, `unknown API path ${pathname.slice(0, 200)}`);
}

function send(res: ServerResponse, status: number, body: string | Buffer, type: string, extra: Record<string, string> = {}): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { "content-type": type, "cache-control": "no-store", "x-content-type-options": "nosniff", ...extra });
  res.end(body);
}

function digest(s: string): Buffer {
  return createHash("sha256").update(s).digest();
}

/** Whether the request carries `key`, as a Bearer header or `?key=` (compared in constant time). */
function hasKey(req: IncomingMessage, search: URLSearchParams, key: string): boolean {
  const header = req.headers.authorization ?? "";
  const given = header.startsWith("Bearer ") ? header.slice(7) : (search.get("key") ?? "");
  return timingSafeEqual(digest(given), digest(key));
}

/** An error as the client sees it: HttpErrors say what was wrong; others only their code, never a file's text. */
function errorReply(err: unknown): { status: number; message: string } {
  if (err instanceof HttpError) return { status: err.status, message: err.message };
  const code = errnoOf(err);
  if (code === "EACCES" || code === "EPERM") return { status: 403, message: "permission denied reading a file of the runs folder" };
  if (code === "ENOENT") return { status: 404, message: "not found (the file went away while being read)" };
  return { status: 500, message: `internal error${code ? ` (${code})` : ""} while reading the runs folder` };
}

export function createDashboardServer(options: DashboardOptions): Server {
  const runsDir = resolve(options.runsDir);
  const key = options.key || undefined;
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (req.method !== "GET" && req.method !== "HEAD") throw new HttpError(405, "the dashboard is read-only: only GET is allowed");
    const url = new URL(req.url ?? "/", "http://localhost");
    if (url.pathname.startsWith("/api/")) {
      if (key !== undefined && !hasKey(req, url.searchParams, key)) {
        return send(res, 401, JSON.stringify({ error: "this dashboard needs its key: open the page as /?key=KEY, or send Authorization: Bearer KEY" }), "application/json", {
          "www-authenticate": 'Bearer realm="sinkflex dashboard"',
        });
      }
      if (!(await lstatOrNull(runsDir))) throw new HttpError(404, `the runs folder ${runsDir} does not exist`);
      const reply = await handleApi(runsDir, url.pathname, url.searchParams);
      if (reply instanceof RawReply) {
        return send(res, 200, reply.body, reply.type, reply.filename ? { "content-disposition": `attachment; filename="${reply.filename}"` } : {});
      }
      return send(res, 200, JSON.stringify(reply), "application/json");
    }
    const file = STATIC_FILES[url.pathname];
    if (!file) throw new HttpError(404, `not found: ${url.pathname.slice(0, 200)}`);
    const ext = file.split(".").pop()!;
    return send(res, 200, await readFile(join(STATIC_DIR, file)), CONTENT_TYPES[ext]!);
  };
  return createServer((req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch((err: unknown) => {
      const { status, message } = errorReply(err);
      send(res, status, JSON.stringify({ error: message }), "application/json");
    });
  });
}

/** Starts the server; refuses a host beyond loopback without a key unless `insecure` (see exposureRefusal). */
export async function startDashboard(options: DashboardOptions): Promise<{ server: Server; url: string }> {
  const host = options.host ?? "127.0.0.1";
  const refusal = exposureRefusal(host, options.key, options.insecure);
  if (refusal) throw new Error(refusal);
  const server = createDashboardServer(options);
  await new Promise<void>((resolveListen, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => resolveListen());
  });
  const port = (server.address() as { port: number }).port;
  const shownHost = isIPv6(host.replace(/^\[(.*)\]$/, "$1")) ? `[${host.replace(/^\[(.*)\]$/, "$1")}]` : host;
  return { server, url: `http://${shownHost}:${port}/` };
}
