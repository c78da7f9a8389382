/**
 * One bash episode's machinery: a fresh tree of a file system in its own sandbox, commands run there,
 * their results as the agent reads them, and the reference run (the gold command on another fresh,
 * identical tree) that the reward compares with.
 *
 * Reward rule: the agent's final (submitted) command, run in the episode's tree as the agent left it,
 * must print exactly what the gold command prints on a fresh tree (stdout), and the two trees must then
 * be equal (paths, kinds, modes, contents, link targets; times and owners are not compared). The fresh
 * tree is built with the episode's own build time, so file times (shown by `ls -l`, stored by `tar`)
 * are the same in both. Owners need no care: every sandbox sees itself and its tree's files as root
 * (see src/sandbox/isolation.ts), so `ls -l`, `stat` and `tar` print the same owners in both runs.
 */
import { buildTree, DEFAULT_LIMITS, diffSnapshots, makeTreeDir, removeTree, Sandbox, snapshotTree, type ExecResult, type IsolationKind, type SandboxLimits, type SnapshotEntry } from "../../sandbox/index.js";
import { fileSystem, type FileSystemName } from "./fixtures.js";

/** The bash suite's sandbox limits (short: the tasks are quick commands). */
export const BASH_LIMITS: Partial<SandboxLimits> = { timeoutMs: 5_000, maxOutputBytes: 32 * 1024, maxProcesses: 64, memoryBytes: 1024 ** 3 };

export interface TreeSessionOptions {
  limits?: Partial<SandboxLimits>;
  /** The build time (seconds since the epoch); default now. */
  now?: number;
  /** The sandbox backend (default "auto": bwrap, else unshare). */
  isolation?: IsolationKind | "auto";
}

/** A tree of `fs` in a fresh host folder with its sandbox. */
export class TreeSession {
  readonly dir: string;
  readonly sandbox: Sandbox;
  readonly mountPoint: string;
  /** The build time (seconds since the epoch) the files' ages are counted from. */
  readonly builtAt: number;

  constructor(readonly fs: FileSystemName, options: TreeSessionOptions = {}) {
    const limits = options.limits ?? BASH_LIMITS;
    this.builtAt = options.now ?? Math.floor(Date.now() / 1000);
    const spec = fileSystem(fs);
    this.mountPoint = spec.mountPoint;
    this.dir = makeTreeDir("sinkflex-bash-");
    try {
      buildTree(this.dir, spec.nodes, this.builtAt);
      this.sandbox = new Sandbox({ tree: this.dir, mountPoint: spec.mountPoint, limits, isolation: options.isolation ?? "auto" });
    } catch (err) {
      removeTree(this.dir);
      throw err;
    }
  }

  run(command: string): Promise<ExecResult> {
    return this.sandbox.exec(command);
  }

  snapshot(): SnapshotEntry[] {
    return snapshotTree(this.dir);
  }

  dispose(): void {
    this.sandbox.close();
    removeTree(this.dir);
  }
}

export interface CommandOutcome {
  command: string;
  stdout: string;
  exitCode: number | null;
  limit?: string;
  tree: SnapshotEntry[];
}

/** Runs `command` on a fresh tree of `fs` (built as of `now`) and returns what it printed and the tree it left. */
export async function runOnFreshTree(fs: FileSystemName, command: string, options: TreeSessionOptions = {}): Promise<CommandOutcome> {
  const session = new TreeSession(fs, options);
  try {
    const r = await session.run(command);
    return { command, stdout: r.stdout, exitCode: r.exitCode, ...(r.limit ? { limit: r.limit } : {}), tree: session.snapshot() };
  } finally {
    session.dispose();
  }
}

/** Compares an agent's outcome with the reference; `equal` when output and tree match. */
export function compareOutcomes(reference: CommandOutcome, agent: CommandOutcome): { equal: boolean; outputEqual: boolean; treeDiff: string[] } {
  const outputEqual = reference.stdout === agent.stdout;
  const treeDiff = diffSnapshots(reference.tree, agent.tree);
  return { equal: outputEqual && treeDiff.length === 0, outputEqual, treeDiff };
}

const MAX_SHOWN = 8_000;

/** How a command's result reads to the agent: stdout, stderr, the exit status, and any limit hit. */
export function formatResult(r: ExecResult, limits: Partial<SandboxLimits> = BASH_LIMITS): string {
  const parts: string[] = [];
  const clip = (s: string) => (s.length > MAX_SHOWN ? `${s.slice(0, MAX_SHOWN)}\n[... ${s.length - MAX_SHOWN} more characters not shown]` : s);
  if (r.stdout) parts.push(clip(r.stdout.replace(/\n$/, "")));
  if (r.stderr) parts.push(clip(r.stderr.replace(/\n$/, "")));
  switch (r.limit) {
    case "timeout":
      parts.push(`Error: the command did not finish within ${(limits.timeoutMs ?? 5_000) / 1000} s and was stopped.`);
      break;
    case "output":
      parts.push(`Error: the command printed more than ${limits.maxOutputBytes ?? 32_768} bytes; it was stopped and its output cut.`);
      break;
    case "processes":
      parts.push(`Error: the command hit the limit of ${limits.maxProcesses ?? 64} processes; new processes were refused.`);
      break;
    case "memory":
      parts.push("Error: the command ran out of memory (the sandbox limits memory).");
      break;
    case "disk":
      // The sandbox's own line at the end of stderr says so; repeated here only when that was cut off.
      if (!parts.some((p) => p.includes("disk quota"))) {
        parts.push(`Error: sandbox: disk quota of ${(limits.diskBytes ?? DEFAULT_LIMITS.diskBytes) / 1024 ** 2} MiB exceeded; delete files to make room.`);
      }
      break;
    default:
      if (r.exitCode !== 0) parts.push(`[exit status ${r.exitCode}]`);
  }
  return parts.length > 0 ? parts.join("\n") : "(no output)";
}
