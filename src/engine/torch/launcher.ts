/**
 * Starts a torch worker as a child process (`<python> -m sinkflex_worker --socket <tmp>/worker.sock
 * --exit-with-stdin`), waits for its ready line and connects. The worker exits when this process does:
 * its stdin is a pipe from here (it exits at end of file), and it is killed on this process's exit.
 * A worker that dies is reported with its exit status and its last stderr lines.
 *
 * This file does not know the engine's ops (engine.ts); it only starts, watches and stops the process.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";
import { TorchWorkerError } from "./client.js";

export interface LaunchOptions {
  /** The Python that has sinkflex_worker installed. Default: $SINKFLEX_TORCH_PYTHON, else "python3". */
  python?: string;
  /** torch device: "cpu", "cuda", "cuda:1". Default "cpu". */
  device?: string;
  /** bf16 autocast; default: on for CUDA, off for CPU. */
  autocast?: "off" | "bf16";
  /** Attention kernel: "flex" (FlexAttention, CUDA), "eager" (an explicit mask, any device); default "auto" (flex on CUDA, else eager). */
  attentionKernel?: "auto" | "eager" | "flex";
  /** torch CPU threads (0 = torch's default). */
  threads?: number;
  /** How long the worker may take to import torch and listen. Default 120 s. */
  startTimeoutMs?: number;
  /** Extra environment for the worker. */
  env?: Record<string, string>;
}

export interface LaunchedWorker {
  address: string;
  child: ChildProcess;
  /** Why the worker is gone, once it is (exit status and last stderr lines); undefined while it runs. */
  exitReason(): string | undefined;
  /** Waits up to `ms` for the process to end, then describes it. */
  waitExit(ms: number): Promise<string | undefined>;
  /** Stops the worker (SIGTERM, then SIGKILL after a grace period) and removes its socket folder. */
  stop(): void;
}

const STDERR_TAIL = 4000;
const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function killAllOnExit(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const c of live) c.kill("SIGKILL");
  });
}

/** The process ids of the workers this process started and that still run, oldest first. */
export function runningWorkerPids(): number[] {
  return [...live].flatMap((c) => (c.pid === undefined ? [] : [c.pid]));
}

/** The repository's python/ folder: on the worker's PYTHONPATH, so a checkout runs without `pip install ./python`. */
export const WORKER_PACKAGE_DIR = fileURLToPath(new URL("../../../python", import.meta.url));

export function defaultPython(): string {
  return process.env.SINKFLEX_TORCH_PYTHON || "python3";
}

export async function launchWorker(opts: LaunchOptions = {}): Promise<LaunchedWorker> {
  const python = opts.python ?? defaultPython();
  const dir = mkdtempSync(join(tmpdir(), "sinkflex-torch-"));
  const sock = join(dir, "worker.sock");
  const args = ["-m", "sinkflex_worker", "--socket", sock, "--exit-with-stdin", "--device", opts.device ?? "cpu"];
  if (opts.autocast) args.push("--autocast", opts.autocast);
  if (opts.attentionKernel) args.push("--attention-kernel", opts.attentionKernel);
  if (opts.threads) args.push("--threads", String(opts.threads));
  const pythonPath = [WORKER_PACKAGE_DIR, process.env.PYTHONPATH].filter(Boolean).join(delimiter);
  const child = spawn(python, args, { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, PYTHONPATH: pythonPath, ...opts.env } });
  live.add(child);
  killAllOnExit();
  let stderr = "";
  let reason: string | undefined;
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (d: string) => {
    stderr = (stderr + d).slice(-STDERR_TAIL);
  });
  const exited = new Promise<void>((resolve) => {
    child.on("exit", (code, signal) => {
      live.delete(child);
      const status = signal ? `killed by ${signal}` : `exit code ${code}`;
      const tail = stderr.trim().split("\n").slice(-8).join("\n");
      reason = `the torch worker (${python}, pid ${child.pid}) ended (${status})${tail ? `; its last stderr lines:\n${tail}` : ""}`;
      resolve();
    });
    child.on("error", (e) => {
      live.delete(child);
      reason = `the torch worker could not start: ${e.message}; set SINKFLEX_TORCH_PYTHON (or engine.python) to a Python with sinkflex_worker installed (pip install ./python)`;
      resolve();
    });
  });
  const stop = () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.stdin?.end();
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 3000);
      t.unref();
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const ready = new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (d: string) => {
      out += d;
      const m = /SINKFLEX_WORKER_READY (\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    void exited.then(() => reject(new TorchWorkerError(`${reason}${/No module named/.test(stderr) ? "\ninstall the worker: pip install ./python (with torch and transformers)" : ""}`, "connection")));
  });
  const timeoutMs = opts.startTimeoutMs ?? 120_000;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TorchWorkerError(`the torch worker did not become ready within ${timeoutMs} ms; its stderr:\n${stderr.trim().slice(-1000)}`, "connection")), timeoutMs);
  });
  let address: string;
  try {
    address = await Promise.race([ready, timeout]);
  } catch (e) {
    stop();
    throw e;
  } finally {
    clearTimeout(timer);
  }
  return {
    address, child, stop,
    exitReason: () => reason,
    waitExit: async (ms) => {
      await Promise.race([exited, new Promise((r) => setTimeout(r, ms).unref())]);
      return reason;
    },
  };
}
