/**
 * A sandboxed shell over one folder: `new Sandbox({tree, mountPoint})`, then `exec(command)` runs
 * `bash -c command` isolated from the host (see isolation.ts) with the folder as the only writable
 * place, and returns its output, exit status and which limit, if any, stopped it.
 *
 * Limits: wall time (the whole sandbox is killed), memory (address space), processes, size of any
 * file written, bytes of output (the sandbox is killed once exceeded), size of /tmp, disk used by the
 * tree (a quota: no file may grow past what is left of it, and a watcher kills the sandbox once the
 * tree holds more). Escape attempts end as a result with `limit` set or a failing exit status; they
 * never reach the host. There is no unsandboxed mode: without bwrap or unshare, creating a Sandbox
 * throws SandboxUnavailableError.
 *
 * Nothing outlives its owner: the sandbox's processes are SIGKILLed when the process that created
 * the Sandbox dies, however it dies (see isolation.ts), and the folders it leaves behind are removed
 * by the next Sandbox created on the machine (see owner.ts).
 *
 * The sandbox does not build or snapshot trees (see tree.ts); it is used by the bash and code suites.
 */
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, lchownSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import { detectIsolation, launchArgv, type IsolationKind } from "./isolation.js";
import { killStaleProcesses, removeStaleFolders } from "./owner.js";
import { makeTreeDir, treeDiskUsage } from "./tree.js";

export interface SandboxLimits {
  /** Wall-clock time of one command, in ms (default 10,000). */
  timeoutMs: number;
  /** Address space of each process, in bytes (default 1 GiB). */
  memoryBytes: number;
  /** Processes (and threads) at once (default 64). */
  maxProcesses: number;
  /** Bytes of stdout + stderr kept; more kills the command (default 64 KiB). */
  maxOutputBytes: number;
  /** Largest file a command may write, in bytes (default 64 MiB). */
  maxFileBytes: number;
  /** Size of the private /tmp, in bytes (default 64 MiB). */
  tmpBytes: number;
  /**
   * Disk quota of the tree, in bytes (default 64 MiB): what the tree may hold (see `treeDiskUsage`).
   * A command that makes it hold more is stopped, with `limit: "disk"`.
   */
  diskBytes: number;
}

export const DEFAULT_LIMITS: SandboxLimits = {
  timeoutMs: 10_000,
  memoryBytes: 1024 ** 3,
  maxProcesses: 64,
  maxOutputBytes: 64 * 1024,
  maxFileBytes: 64 * 1024 ** 2,
  tmpBytes: 64 * 1024 ** 2,
  diskBytes: 64 * 1024 ** 2,
};

/** How often the disk watcher looks at the tree at most (ms); slower for trees that take long to walk. */
const DISK_CHECK_MS = 20;

/** Checks limits given by a caller; each must be a positive number. */
function validLimits(limits: Partial<SandboxLimits> | undefined): SandboxLimits {
  const out = { ...DEFAULT_LIMITS, ...limits };
  for (const key of Object.keys(DEFAULT_LIMITS) as (keyof SandboxLimits)[]) {
    const v = out[key];
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
      throw new RangeError(`Sandbox: limits.${key} must be a positive number, got ${JSON.stringify(v)} (default ${DEFAULT_LIMITS[key]})`);
    }
  }
  return out;
}

function mib(bytes: number): string {
  const v = bytes / 1024 ** 2;
  return Number.isInteger(v) ? String(v) : v.toFixed(1);
}

export interface SandboxOptions {
  /** Host folder visible (read-write) inside at `mountPoint`; nothing else of the host is writable. */
  tree: string;
  /** Where the tree appears inside, e.g. "/testbed". */
  mountPoint: string;
  /** Working directory inside (default: the mount point). */
  cwd?: string;
  limits?: Partial<SandboxLimits>;
  /** "auto" (default): bwrap, else unshare. */
  isolation?: IsolationKind | "auto";
  /** Extra environment variables (PATH, HOME, LANG, TZ are set already). */
  env?: Record<string, string>;
  hostname?: string;
}

export type SandboxLimitKind = "timeout" | "output" | "processes" | "memory" | "disk";

export interface ExecResult {
  stdout: string;
  stderr: string;
  /**
   * Exit status, as a shell reports it (128 + n when signal n killed the command); null when the
   * sandbox killed the command (a timeout, output or disk limit).
   */
  exitCode: number | null;
  /**
   * Set when a limit stopped or crippled the command: "output" (too much output, killed), "processes"
   * (forks refused), "memory" (allocations refused), "timeout" (killed after the time limit), "disk"
   * (the tree held more than its quota: killed, and stderr ends with a line saying
   * "sandbox: disk quota of N MiB exceeded ...").
   */
  limit?: SandboxLimitKind;
  durationMs: number;
}

/**
 * Started by the shell inside before the command (which does not get fd 3): it waits on the lifeline,
 * a socket whose other end only the owner holds, and once that end closes (the owner died, however,
 * or killed the sandbox) SIGKILLs every process of the sandbox it can signal, until none is left.
 * The parent-death signals (isolation.ts) cannot cover the namespace's first process while bwrap or
 * unshare is still setting it up: it arms its signal only then, and an owner that died in between
 * would leave the command running for good. The watcher starts after that point and reads an end of
 * file at once if the owner is already gone.
 */
const LIFELINE_WATCHER = "if { true <&3; } 2>/dev/null; then { read -r -u 3 _; while kill -KILL -1; do :; done; } </dev/null >/dev/null 2>&1 & fi";

let uidCounter = 0;

/** A dedicated uid per sandbox (when the host runs as root), so process limits are the sandbox's own. */
function allocateUid(): number {
  uidCounter = (uidCounter + 1) % 1024;
  return 200_000 + (process.pid % 1024) * 1024 + uidCounter;
}

const ETC_FILES: Record<string, string> = {
  passwd: "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
  group: "root:x:0:\nnogroup:x:65534:\n",
  hostname: "sandbox\n",
  hosts: "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n",
  networks: "default\t\t0.0.0.0\nloopback\t127.0.0.0\nlink-local\t169.254.0.0\n",
  "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\nnetworks: files\n",
};

export class Sandbox {
  readonly isolation: IsolationKind;
  readonly limits: SandboxLimits;
  readonly uid: number | undefined;
  private readonly support: string;
  private readonly running = new Set<number>();
  private closed = false;

  constructor(readonly options: SandboxOptions) {
    if (!options.mountPoint.startsWith("/") || options.mountPoint === "/") {
      throw new Error(`Sandbox: mountPoint must be an absolute path other than "/", got "${options.mountPoint}"`);
    }
    if (!existsSync(options.tree) || !lstatSync(options.tree).isDirectory()) throw new Error(`Sandbox: the tree ${options.tree} is not a folder`);
    this.limits = validLimits(options.limits);
    this.isolation = detectIsolation(options.isolation ?? "auto");
    const root = process.getuid?.() === 0;
    this.uid = root && (this.isolation === "unshare" || hasSetpriv()) ? allocateUid() : undefined;
    killStaleProcesses(); // launchers of owners that died while bwrap or unshare was starting
    removeStaleFolders(); // trees and support folders of processes that died without cleaning up
    this.support = makeTreeDir("sinkflex-sandbox-");
    chmodSync(this.support, 0o755); // readable by the sandbox's uid; it holds only the generated /etc
    mkdirSync(join(this.support, "etc", "alternatives"), { recursive: true });
    mkdirSync(join(this.support, "root"));
    for (const [name, text] of Object.entries(ETC_FILES)) writeFileSync(join(this.support, "etc", name), text);
    this.adoptTree();
  }

  /** Gives the tree to the sandbox's uid (call again after the host writes new files into it). */
  adoptTree(): void {
    if (this.uid === undefined) return;
    chownTree(this.options.tree, this.uid);
  }

  /** Runs `bash -c command` in the sandbox. Never throws for what the command does. */
  async exec(command: string, options: { timeoutMs?: number; stdin?: string } = {}): Promise<ExecResult> {
    if (this.closed) throw new Error("Sandbox: exec after close");
    const l = this.limits;
    const timeoutMs = options.timeoutMs ?? l.timeoutMs;
    const tree = this.options.tree;
    // No single file may grow past what is left of the quota; many files are the watcher's job.
    const usedBefore = treeDiskUsage(tree);
    const diskAllowed = Math.max(l.diskBytes, usedBefore); // a tree already over may still be cleaned up
    const fileBytes = Math.min(l.maxFileBytes, Math.max(0, l.diskBytes - usedBefore));
    const limitsLine = [
      [`ulimit -v ${Math.floor(l.memoryBytes / 1024)}`, `ulimit -u ${l.maxProcesses}`, `ulimit -f ${Math.floor(fileBytes / 1024)}`, "ulimit -c 0"].join(" && ") + " || exit",
      LIFELINE_WATCHER,
      'exec /bin/bash -c "$1" 3<&-',
    ].join("\n");
    const argv = launchArgv({
      kind: this.isolation,
      tree: this.options.tree,
      mountPoint: this.options.mountPoint,
      cwd: this.options.cwd ?? this.options.mountPoint,
      support: this.support,
      uid: this.uid,
      hostname: this.options.hostname ?? "sandbox",
      env: {
        PATH: "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        HOME: this.options.mountPoint,
        LANG: "C.UTF-8",
        LC_ALL: "C.UTF-8",
        TZ: "UTC",
        USER: "root",
        ...this.options.env,
      },
      tmpBytes: l.tmpBytes,
      inner: ["/bin/bash", "-c", limitsLine, "sandbox-shell", command],
      ...(hasSetpriv() ? { owner: process.pid } : {}),
    });
    const started = Date.now();
    return new Promise<ExecResult>((resolve) => {
      // fd 3 is the lifeline: only this process holds its other end (see LIFELINE_WATCHER).
      const child = spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "pipe", "pipe", "pipe"], detached: true });
      const pid = child.pid;
      const lifeline = child.stdio[3] as Duplex | null;
      lifeline?.on("error", () => {});
      if (pid !== undefined) this.running.add(pid);
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      let bytes = 0;
      let limit: "timeout" | "output" | "disk" | undefined;
      let diskUsed = usedBefore;
      const kill = () => {
        lifeline?.destroy(); // the watcher inside kills whatever the signal below cannot reach
        if (pid === undefined) return;
        try {
          process.kill(-pid, "SIGKILL");
        } catch {}
      };
      const take = (chunks: Buffer[]) => (chunk: Buffer) => {
        const room = l.maxOutputBytes - bytes;
        if (room > 0) chunks.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
        bytes += chunk.length;
        if (bytes > l.maxOutputBytes && !limit) {
          limit = "output";
          kill();
        }
      };
      child.stdout.on("data", take(out));
      child.stderr.on("data", take(err));
      child.stdin.on("error", () => {});
      child.stdin.end(options.stdin ?? "");
      const timer = setTimeout(() => {
        if (!limit) limit = "timeout";
        kill();
      }, timeoutMs);
      let diskTimer: NodeJS.Timeout | undefined;
      const watchDisk = () => {
        const t0 = performance.now();
        diskUsed = treeDiskUsage(tree);
        if (diskUsed > diskAllowed) {
          if (!limit) limit = "disk";
          kill();
          return;
        }
        diskTimer = setTimeout(watchDisk, Math.min(1_000, Math.max(DISK_CHECK_MS, 20 * (performance.now() - t0))));
      };
      diskTimer = setTimeout(watchDisk, DISK_CHECK_MS);
      child.on("error", (e) => {
        err.push(Buffer.from(`sandbox: cannot start ${argv[0]}: ${e.message}\n`));
      });
      child.on("close", async (code) => {
        clearTimeout(timer);
        clearTimeout(diskTimer);
        kill(); // anything left in the process group
        // Nothing the command started may outlive it: with a dedicated uid, every process of that uid.
        if (this.uid !== undefined) await killUid(this.uid);
        if (pid !== undefined) this.running.delete(pid);
        const killed = limit !== undefined;
        // Written between the watcher's last look and the end.
        if (!limit && (diskUsed = treeDiskUsage(tree)) > diskAllowed) limit = "disk";
        let stderr = Buffer.concat(err).toString("utf8");
        // A file cut by what was left of the quota (not by maxFileBytes) is the quota's doing too.
        const cut = !limit && fileBytes < l.maxFileBytes && /File size limit exceeded/.test(stderr);
        if (limit === "disk" || cut) {
          const why = cut
            ? `no file may grow past the ${mib(fileBytes)} MiB left of it when the command started`
            : killed
              ? "the command was stopped"
              : "the command had ended";
          stderr += `${stderr === "" || stderr.endsWith("\n") ? "" : "\n"}sandbox: disk quota of ${mib(l.diskBytes)} MiB exceeded: ${why} (the tree holds ${mib(cut ? treeDiskUsage(tree) : diskUsed)} MiB). Delete files to make room.\n`;
          limit = "disk";
        }
        let kind: SandboxLimitKind | undefined = limit;
        if (kind !== "output" && kind !== "disk" && /fork: (retry: )?(Resource temporarily unavailable|Cannot allocate memory)/.test(stderr)) kind = "processes";
        else if (!kind && /Cannot allocate memory|MemoryError|memory exhausted|std::bad_alloc/.test(stderr)) kind = "memory";
        resolve({
          stdout: Buffer.concat(out).toString("utf8"),
          stderr,
          exitCode: killed ? null : code,
          ...(kind ? { limit: kind } : {}),
          durationMs: Date.now() - started,
        });
      });
    });
  }

  /** Kills anything still running and removes the sandbox's own files (not the tree). Safe to repeat. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const pid of this.running) {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {}
    }
    this.running.clear();
    if (this.uid !== undefined) void killUid(this.uid);
    rmSync(this.support, { recursive: true, force: true });
  }
}

/** SIGKILLs every process whose real uid is `uid` until none is left (at most ~2 s). */
export async function killUid(uid: number): Promise<void> {
  for (let round = 0; round < 200; round++) {
    let found = 0;
    for (const name of readdirSync("/proc")) {
      if (!/^\d+$/.test(name)) continue;
      let status: string;
      try {
        status = readFileSync(`/proc/${name}/status`, "utf8");
      } catch {
        continue; // gone already
      }
      const m = /^Uid:\s+(\d+)/m.exec(status);
      if (!m || Number(m[1]) !== uid) continue;
      if (/^State:\s+Z/m.test(status)) continue; // a zombie: its parent reaps it
      found++;
      try {
        process.kill(Number(name), "SIGKILL");
      } catch {}
    }
    if (found === 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

let setprivFound: boolean | undefined;
function hasSetpriv(): boolean {
  setprivFound ??= spawnSync("setpriv", ["--version"], { stdio: "ignore" }).status === 0;
  return setprivFound;
}

/** chown -R without following symlinks. */
export function chownTree(dir: string, uid: number): void {
  chownSync(dir, uid, uid);
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = lstatSync(p);
    if (st.isSymbolicLink()) lchownSync(p, uid, uid);
    else if (st.isDirectory()) chownTree(p, uid);
    else chownSync(p, uid, uid);
  }
}
