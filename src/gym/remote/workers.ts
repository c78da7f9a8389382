/**
 * `serveEnvWorkers`: one env served by N worker processes behind one port (node:cluster; the primary
 * hands each new connection to a worker in turn). Each worker runs its own `serveEnv` (server.ts), so a
 * session lives in one worker: WebSocket sessions (one connection each) work as with one process; an
 * HTTP session's requests must reach the worker that made it, so with workers clients should use
 * WebSocket sessions (the env pool does by default). Session ids carry their worker (`w2.<uuid>`).
 *
 * GET /health (answered by any worker) reports the whole cluster: sessions, steps per second and errors
 * summed over the workers, and each worker's own. A worker that dies is started again. `drain()` asks
 * every worker to stop taking sessions, finish (or, after the grace period, fail) its steps in flight
 * and exit. This file is the process management only; the protocol is server.ts's.
 */
import cluster, { type Worker } from "node:cluster";
import { serveEnv, type EnvServerStats, type ServeEnvOptions } from "./server.js";

export interface WorkersHandle {
  url: string;
  wsUrl: string;
  port: number;
  workers: number;
  /** Stops every worker gracefully (new sessions refused, steps in flight finished within graceMs) and waits for them to exit. */
  drain(graceMs?: number): Promise<void>;
}

type WorkerMessage = { type: "listening"; url: string; port: number } | { type: "stats"; stats: EnvServerStats };
type PrimaryMessage = { type: "cluster"; totals: Record<string, unknown> } | { type: "drain"; graceMs: number };

/** True in a worker process started by `serveEnvWorkers`. */
export function isEnvWorker(): boolean {
  return cluster.isWorker && process.env.SINKFLEX_ENV_WORKER !== undefined;
}

/**
 * In the primary: starts `workers` processes (each re-running this program, which must call
 * `serveEnvWorkers` again with the same arguments) and resolves once all listen. In a worker: serves
 * and never resolves (the worker exits after a drain).
 */
export async function serveEnvWorkers(target: string, options: ServeEnvOptions, workers: number): Promise<WorkersHandle> {
  if (!Number.isInteger(workers) || workers < 1) throw new RangeError(`serveEnvWorkers: workers must be a positive integer, got ${workers}`);
  if (isEnvWorker()) return runWorker(target, options, workers);
  const stats = new Map<number, EnvServerStats>();
  const byIndex = new Map<number, Worker>();
  let draining = false;
  let resolveListening: (v: { url: string; port: number }) => void;
  const listening = new Promise<{ url: string; port: number }>((r) => (resolveListening = r));
  const listeningWorkers = new Set<number>();

  const fork = (index: number) => {
    const w = cluster.fork({ SINKFLEX_ENV_WORKER: String(index) });
    byIndex.set(index, w);
    w.on("message", (m: WorkerMessage) => {
      if (m.type === "stats") stats.set(index, m.stats);
      else if (m.type === "listening") {
        listeningWorkers.add(index);
        if (listeningWorkers.size === workers) resolveListening({ url: m.url, port: m.port });
      }
    });
    w.on("exit", (code, signal) => {
      stats.delete(index);
      if (draining || byIndex.get(index) !== w) return;
      console.error(`env worker ${index} exited (${signal ?? `code ${code}`}); starting it again`);
      fork(index);
    });
  };
  for (let k = 0; k < workers; k++) fork(k);

  const broadcast = setInterval(() => {
    const all = [...stats.entries()].sort(([a], [b]) => a - b);
    const sum = (key: "sessions" | "steps" | "stepsPerSec" | "errors" | "inFlight" | "maxSessions") => Math.round(all.reduce((a, [, s]) => a + s[key], 0) * 10) / 10;
    const totals = {
      workers,
      workersUp: all.length,
      sessions: sum("sessions"),
      maxSessions: sum("maxSessions"),
      steps: sum("steps"),
      stepsPerSec: sum("stepsPerSec"),
      errors: sum("errors"),
      inFlight: sum("inFlight"),
      perWorker: all.map(([k, s]) => ({ worker: k, sessions: s.sessions, steps: s.steps, stepsPerSec: s.stepsPerSec, errors: s.errors })),
    };
    for (const w of byIndex.values()) if (w.isConnected()) w.send({ type: "cluster", totals } satisfies PrimaryMessage);
  }, 250);
  broadcast.unref();

  const { url, port } = await listening;
  return {
    url,
    wsUrl: `${url.replace(/^http/, "ws")}/ws`,
    port,
    workers,
    async drain(graceMs = 10_000) {
      draining = true;
      clearInterval(broadcast);
      const exits = [...byIndex.values()].map(
        (w) =>
          new Promise<void>((resolve) => {
            if (w.isDead()) return resolve();
            w.once("exit", () => resolve());
            // A worker that does not exit after its grace period (and a margin) is killed.
            const timer = setTimeout(() => w.process.kill("SIGKILL"), graceMs + 5_000);
            timer.unref();
            if (w.isConnected()) w.send({ type: "drain", graceMs } satisfies PrimaryMessage);
          }),
      );
      await Promise.all(exits);
    },
  };
}

async function runWorker(target: string, options: ServeEnvOptions, workers: number): Promise<never> {
  const index = Number(process.env.SINKFLEX_ENV_WORKER);
  let totals: Record<string, unknown> = {};
  const server = await serveEnv(target, {
    ...options,
    // --max-sessions is the whole server's: each worker takes its share.
    maxSessions: Math.max(1, Math.ceil((options.maxSessions ?? 64) / workers)),
    sessionIdPrefix: `w${index}.`,
    healthExtra: () => ({ worker: index, ...totals }),
  });
  // The primary decides when to stop: a terminal's Ctrl-C reaches every process of the group.
  process.on("SIGINT", () => undefined);
  process.on("SIGTERM", () => undefined);
  process.on("message", (m: PrimaryMessage) => {
    if (m.type === "cluster") totals = m.totals;
    else if (m.type === "drain") void server.drain(m.graceMs).finally(() => process.exit(0));
  });
  const report = setInterval(() => process.send?.({ type: "stats", stats: server.stats() } satisfies WorkerMessage), 250);
  report.unref();
  process.send?.({ type: "listening", url: server.url, port: server.port } satisfies WorkerMessage);
  return new Promise<never>(() => undefined);
}
