/**
 * The run dashboard's HTTP server: serves the single-page app and a read-only JSON API over a runs
 * folder (the files written by `pipeline/run-dir.ts`).
 *
 * It only reads. Every path in a request is checked to stay inside the runs folder; run and file names
 * are restricted to plain names. It binds to 127.0.0.1 by default. It is not an authenticated service:
 * do not expose it beyond loopback.
 *
 *   GET /                                  the app (index.html, app.js, style.css; no external assets)
 *   GET /api/runs                          [{name, status, config summary, updatedAt}]
 *   GET /api/runs/:run/metrics?from=N      {records: [...], next: N'} (metrics.jsonl from line N)
 *   GET /api/runs/:run/eval                eval.json
 *   GET /api/runs/:run/trajectories        [file names, newest last]
 *   GET /api/runs/:run/trajectories/:file  {records: [...]} (one step's trajectories)
 */
import { existsSync, lstatSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const STATIC_DIR = join(dirname(fileURLToPath(import.meta.url)), "static");
const STATIC_FILES: Record<string, string> = {
  "/": "index.html",
  "/index.html": "index.html",
  "/app.js": "app.js",
  "/charts.js": "charts.js",
  "/viewer.js": "viewer.js",
  "/style.css": "style.css",
};
const CONTENT_TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
};
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$/;

export interface DashboardOptions {
  runsDir: string;
  port?: number;
  host?: string;
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Resolves `parts` under `root` and refuses anything that would leave it (.., symlinks out). */
export function safeJoin(root: string, ...parts: string[]): string {
  for (const p of parts) if (!NAME.test(p)) throw new HttpError(400, `invalid name "${p}": use letters, digits, "_", "-" and "."`);
  const rootReal = realpathSync(root);
  const target = resolve(rootReal, ...parts);
  if (target !== rootReal && !target.startsWith(rootReal + sep)) throw new HttpError(403, "path outside the runs folder");
  if (existsSync(target)) {
    const real = realpathSync(target);
    if (real !== rootReal && !real.startsWith(rootReal + sep)) throw new HttpError(403, "path outside the runs folder");
  }
  return target;
}

function readJsonFile(path: string): unknown {
  if (!existsSync(path)) throw new HttpError(404, `not found: ${path.split(sep).slice(-2).join("/")}`);
  return JSON.parse(readFileSync(path, "utf8"));
}

function readJsonLines(path: string): unknown[] {
  if (!existsSync(path)) return [];
  const out: unknown[] = [];
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (!line.trim()) continue;
    try {
      out.push(JSON.parse(line));
    } catch {
      break; // a line being written right now
    }
  }
  return out;
}

function listRuns(runsDir: string): unknown[] {
  if (!existsSync(runsDir)) return [];
  return readdirSync(runsDir)
    .filter((name) => NAME.test(name) && existsSync(join(runsDir, name, "config.json")))
    .map((name) => {
      const dir = join(runsDir, name);
      let status: unknown = null;
      let config: Record<string, unknown> = {};
      try {
        status = readJsonFile(join(dir, "status.json"));
      } catch {}
      try {
        config = readJsonFile(join(dir, "config.json")) as Record<string, unknown>;
      } catch {}
      const suites = Array.isArray(config.suites) ? (config.suites as { env?: string }[]).map((s) => s.env) : [];
      return { name, status, suites, updatedAt: statSync(dir).mtime.toISOString() };
    })
    .sort((a, b) => (a.updatedAt < b.updatedAt ? 1 : -1));
}

export function handleApi(runsDir: string, pathname: string, search: URLSearchParams): unknown {
  const parts = pathname.split("/").filter(Boolean).map(decodeURIComponent); // ["api", "runs", ...]
  if (parts.length === 2 && parts[1] === "runs") return listRuns(runsDir);
  if (parts[1] !== "runs" || parts.length < 4) throw new HttpError(404, `unknown API path ${pathname}`);
  const run = safeJoin(runsDir, parts[2]!);
  if (!existsSync(join(run, "config.json"))) throw new HttpError(404, `no run named "${parts[2]}"`);
  const what = parts[3];
  if (what === "metrics" && parts.length === 4) {
    const from = Math.max(0, Number(search.get("from") ?? 0) || 0);
    const all = readJsonLines(join(run, "metrics.jsonl"));
    return { records: all.slice(from), next: all.length };
  }
  if (what === "eval" && parts.length === 4) return existsSync(join(run, "eval.json")) ? readJsonFile(join(run, "eval.json")) : {};
  if (what === "config" && parts.length === 4) return readJsonFile(join(run, "config.json"));
  if (what === "status" && parts.length === 4) return existsSync(join(run, "status.json")) ? readJsonFile(join(run, "status.json")) : null;
  if (what === "trajectories" && parts.length === 4) {
    const dir = join(run, "trajectories");
    if (!existsSync(dir)) return [];
    // Plain files only: a symlink could point outside the runs folder.
    return readdirSync(dir)
      .filter((f) => NAME.test(f) && f.endsWith(".jsonl") && lstatSync(join(dir, f)).isFile())
      .sort();
  }
  if (what === "trajectories" && parts.length === 5) {
    const file = safeJoin(join(run, "trajectories"), parts[4]!);
    if (!file.endsWith(".jsonl") || !existsSync(file)) throw new HttpError(404, `no trajectory file "${parts[4]}"`);
    return { records: readJsonLines(file) };
  }
  throw new HttpError(404, `unknown API path ${pathname}`);
}

function send(res: ServerResponse, status: number, body: string | Buffer, type: string): void {
  res.writeHead(status, { "content-type": type, "cache-control": "no-store", "x-content-type-options": "nosniff" });
  res.end(body);
}

export function createDashboardServer(options: DashboardOptions): Server {
  const runsDir = resolve(options.runsDir);
  return createServer((req: IncomingMessage, res: ServerResponse) => {
    try {
      if (req.method !== "GET" && req.method !== "HEAD") throw new HttpError(405, "the dashboard is read-only: only GET is allowed");
      const url = new URL(req.url ?? "/", "http://localhost");
      if (url.pathname.startsWith("/api/")) {
        if (!existsSync(runsDir)) throw new HttpError(404, `the runs folder ${runsDir} does not exist`);
        return send(res, 200, JSON.stringify(handleApi(runsDir, url.pathname, url.searchParams)), "application/json");
      }
      const file = STATIC_FILES[url.pathname];
      if (!file) throw new HttpError(404, `not found: ${url.pathname}`);
      const ext = file.split(".").pop()!;
      return send(res, 200, readFileSync(join(STATIC_DIR, file)), CONTENT_TYPES[ext]!);
    } catch (err) {
      const status = err instanceof HttpError ? err.status : 500;
      send(res, status, JSON.stringify({ error: err instanceof Error ? err.message : String(err) }), "application/json");
    }
  });
}

export async function startDashboard(options: DashboardOptions): Promise<{ server: Server; url: string }> {
  const server = createDashboardServer(options);
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolveListen, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => resolveListen());
  });
  const port = (server.address() as { port: number }).port;
  return { server, url: `http://${host}:${port}/` };
}
