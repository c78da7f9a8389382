/**
 * One code episode's workspace: a fresh temporary folder holding the task's files, mounted read-write
 * at `/repo` in its own sandbox (src/sandbox: no network, read-only host, limits on time, memory,
 * processes, output and disk). Commands (tests, snippets) run only inside the sandbox; the host reads and
 * edits files itself, and only through `resolveInside`, which refuses any path that leaves the folder,
 * symlinks included. `dispose` kills what runs and removes the folder.
 *
 * This file knows no task or reward.
 */
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { Sandbox, type ExecResult, type SandboxLimits } from "../../sandbox/index.js";
import { makeTreeDir, removeTree } from "../../sandbox/index.js";

export const MOUNT_POINT = "/repo";

/** Limits for code runs: short, small output, room for node and python. */
export const CODE_LIMITS: Partial<SandboxLimits> = { timeoutMs: 10_000, maxOutputBytes: 32 * 1024, maxProcesses: 64, memoryBytes: 2 * 1024 ** 3 };

/** Folders that listings and searches skip. */
const SKIPPED = new Set(["__pycache__", "node_modules", ".git"]);

export class Workspace {
  readonly dir: string;
  readonly sandbox: Sandbox;
  private disposed = false;

  constructor(files: Record<string, string>, limits: Partial<SandboxLimits> = CODE_LIMITS) {
    this.dir = makeTreeDir("sinkflex-code-");
    try {
      for (const [path, content] of Object.entries(files)) this.writeRaw(path, content);
      this.sandbox = new Sandbox({ tree: this.dir, mountPoint: MOUNT_POINT, limits, env: { PYTHONDONTWRITEBYTECODE: "1", NODE_NO_WARNINGS: "1" } });
    } catch (err) {
      removeTree(this.dir);
      throw err;
    }
  }

  /** The host path of `path` (relative to the workspace root, or absolute under /repo), refusing anything outside. */
  resolveInside(path: string): string {
    const rel = path.startsWith(`${MOUNT_POINT}/`) || path === MOUNT_POINT ? path.slice(MOUNT_POINT.length + 1) : path;
    if (rel.startsWith("/")) throw new Error(`"${path}" is outside the repository; use a path relative to its root (e.g. src/main.py) or under ${MOUNT_POINT}/`);
    const abs = resolve(this.dir, rel || ".");
    const root = realpathSync(this.dir);
    if (abs !== this.dir && !abs.startsWith(this.dir + sep)) throw new Error(`"${path}" is outside the repository`);
    // Follow existing symlinks: the real target must stay inside too.
    let probe = abs;
    while (!existsSync(probe) && probe !== this.dir) probe = dirname(probe);
    const real = realpathSync(probe);
    if (real !== root && !real.startsWith(root + sep)) throw new Error(`"${path}" leads outside the repository`);
    return abs;
  }

  read(path: string): string {
    const abs = this.resolveInside(path);
    if (!existsSync(abs)) throw new Error(`no file "${path}"; list the files with list_files`);
    if (lstatSync(abs).isDirectory()) throw new Error(`"${path}" is a folder; list it with list_files`);
    return readFileSync(abs, "utf8");
  }

  write(path: string, content: string): void {
    const abs = this.resolveInside(path);
    mkdirSync(dirname(abs), { recursive: true });
    writeFileSync(abs, content);
    this.sandbox.adoptTree();
  }

  private writeRaw(path: string, content: string): void {
    const abs = join(this.dir, path);
    mkdirSync(dirname(abs), { recursive: true });
    writeFileSync(abs, content);
  }

  /** Files under `path` (relative, sorted), skipping caches; symlinks are listed, not followed. */
  list(path = "."): string[] {
    const start = this.resolveInside(path);
    if (!existsSync(start)) throw new Error(`no folder "${path}"`);
    const out: string[] = [];
    const walk = (abs: string) => {
      for (const name of readdirSync(abs).sort()) {
        if (SKIPPED.has(name)) continue;
        const p = join(abs, name);
        const st = lstatSync(p);
        if (st.isDirectory()) walk(p);
        else out.push(relative(this.dir, p).split(sep).join("/"));
      }
    };
    if (lstatSync(start).isDirectory()) walk(start);
    else out.push(relative(this.dir, start).split(sep).join("/"));
    return out;
  }

  /** Every regular file's content, by relative path (for scoring on a fresh copy). */
  files(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const path of this.list()) {
      const abs = join(this.dir, path);
      if (lstatSync(abs).isFile()) out[path] = readFileSync(abs, "utf8");
    }
    return out;
  }

  exec(command: string, options: { timeoutMs?: number; stdin?: string } = {}): Promise<ExecResult> {
    return this.sandbox.exec(command, options);
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.sandbox.close();
    removeTree(this.dir);
  }
}

/** A command's result as the agent reads it: output, exit status, and any limit that stopped it. */
export function describeRun(r: ExecResult, limits: SandboxLimits): string {
  const parts: string[] = [];
  const out = `${r.stdout}${r.stderr ? (r.stdout && !r.stdout.endsWith("\n") ? "\n" : "") + r.stderr : ""}`;
  parts.push(out.trim() === "" ? "(no output)" : out.replace(/\s+$/, ""));
  if (r.limit === "timeout") parts.push(`[stopped: no result within ${limits.timeoutMs} ms]`);
  else if (r.limit === "output") parts.push(`[stopped: more than ${limits.maxOutputBytes} bytes of output]`);
  else if (r.limit === "memory") parts.push("[the program ran out of memory]");
  else if (r.limit === "processes") parts.push("[the program started too many processes]");
  else if (r.limit === "disk") {
    // Killed (exit status none) when the files grew past the quota; otherwise one file was cut at it.
    const quota = `${Number((limits.diskBytes / 1024 ** 2).toFixed(1))} MiB`;
    parts.push(
      r.exitCode === null
        ? `[stopped: the files in ${MOUNT_POINT} went past their disk quota of ${quota}; delete files to make room]`
        : `[the file was cut: the files in ${MOUNT_POINT} may hold at most ${quota} (disk quota); delete files to make room]`,
    );
  }
  parts.push(`[exit status ${r.exitCode ?? "none"}]`);
  return parts.join("\n");
}
