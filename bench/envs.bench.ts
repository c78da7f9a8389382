/**
 * The env-pool load and fault benchmark: `npm run bench:envs -- [--json FILE] [--quick]`.
 *
 * It starts real `sinkflex envs serve` processes on 127.0.0.1 and drives them through an `EnvPool`
 * (src/gym/remote/pool.ts) with many episodes in flight:
 *  1. scaling: the same episodes (bench/latency-env.ts, a set step latency) on 1, 2 and 4 servers of 8
 *     sessions each: steps per second, p50/p99 step latency as the client sees it, peak sessions;
 *  2. faults: the latency env on 2 servers, one killed partway and restarted on its port: episodes
 *     requested / completed / retried / lost (lost must be 0), each episode checked against a local
 *     run of the same seed;
 *  3. a real suite (sinkflex/spider-sql-v0, generated tasks) on 2 servers, one killed and restarted:
 *     the same counts, with scripted tool calls (list_tables, then submit_sql).
 * It prints tables and, with --json, writes every number. It does not train or sample a model.
 */
import type { ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { EnvPool, make, type AgentTurn, type ChatObservation, type Env } from "../src/gym/index.js";
import { registerBundledEnvs } from "../src/envs/index.js";
import { SlowEnv, SLOW_ENV_ID } from "./latency-env.js";
import { spawnEnvServer } from "../test/gym/remote/env-server-process.js";

const args = process.argv.slice(2);
const jsonAt = args.indexOf("--json");
const jsonFile = jsonAt >= 0 ? args[jsonAt + 1] : undefined;
if (jsonAt >= 0 && !jsonFile) throw new Error("--json needs a file name: npm run bench:envs -- --json results.json");
const quick = args.includes("--quick");

const STEP_MS = 20;
const EPISODE_STEPS = 10;
const PER_SERVER = 8;
const children = new Set<ChildProcess>();
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));

interface Served {
  proc: ChildProcess;
  url: string;
  port: number;
}

async function startServer(envId: string, port = 0, imports: string[] = []): Promise<Served> {
  const served = await spawnEnvServer([...imports.flatMap((m) => ["--import", m]), "envs", "serve", envId, "--port", String(port), "--max-sessions", "64"], 90_000);
  children.add(served.proc);
  served.proc.once("exit", () => children.delete(served.proc));
  return served;
}

const latencyServer = (port = 0) => startServer(SLOW_ENV_ID, port, ["bench/latency-env.ts"]);

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** Runs `episodes` episodes with at most `inFlight` at once; `playOne` plays one and returns its record. */
async function drive<T>(episodes: number, inFlight: number, playOne: (i: number) => Promise<T>): Promise<(T | Error)[]> {
  const out: (T | Error)[] = new Array(episodes);
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (let i = next++; i < episodes; i = next++) out[i] = await playOne(i).catch((err: Error) => err);
    }),
  );
  return out;
}

/** One latency-env episode on `env`; its observations and the client-side latency of each step. */
async function latencyEpisode(env: Env<string, number>, seed: number, latencies?: number[]): Promise<string[]> {
  const seen: string[] = [];
  try {
    const [obs] = await env.reset({ seed });
    seen.push(obs);
    for (let k = 0; ; k++) {
      const t0 = performance.now();
      const [o, r, term, trunc] = await env.step((seed + k) % 1000);
      latencies?.push(performance.now() - t0);
      seen.push(`${o} ${r}`);
      if (term || trunc) return seen;
    }
  } finally {
    await env.close();
  }
}

async function scaling(servers: Served[]) {
  const rows = [];
  const episodes = quick ? 48 : 128;
  for (const n of [1, 2, 4]) {
    const pool = await EnvPool.open({ urls: servers.slice(0, n).map((s) => s.url), sessionsPerServer: PER_SERVER, options: { stepMs: STEP_MS, episodeSteps: EPISODE_STEPS } });
    const latencies: number[] = [];
    const t0 = performance.now();
    const results = await drive(episodes, 32, (i) => latencyEpisode(pool.make<string, number>(), i, latencies));
    const seconds = (performance.now() - t0) / 1000;
    const stats = pool.stats();
    pool.close();
    const failed = results.filter((r) => r instanceof Error).length;
    rows.push({ servers: n, sessionSlots: n * PER_SERVER, episodes, failed, steps: latencies.length, seconds: round(seconds, 2), stepsPerSec: round(latencies.length / seconds, 1), p50Ms: round(percentile(latencies, 50), 1), p99Ms: round(percentile(latencies, 99), 1), peakSessions: stats.peakSessions });
  }
  return rows;
}

async function faults(kind: "latency" | "sql") {
  const episodes = quick ? 48 : 128;
  const start = kind === "latency" ? latencyServer : (port = 0) => startServer("sinkflex/spider-sql-v0", port);
  const servers = [await start(), await start()];
  const options = kind === "latency" ? { stepMs: STEP_MS, episodeSteps: 20 } : { taskSource: "generated", levels: [1], count: 50 };
  const pool = await EnvPool.open({ urls: servers.map((s) => s.url), sessionsPerServer: 16, options, healthIntervalMs: 250, stepTimeoutMs: 10_000 });
  const events: string[] = [];
  const t0 = performance.now();
  const latencies: number[] = [];
  const expectedFor = async (i: number) => (kind === "latency" ? latencyEpisode(new SlowEnv(0, 20), i) : sqlEpisode((await make("sinkflex/spider-sql-v0", options)) as Env<ChatObservation, AgentTurn>, i));
  const running = drive(episodes, 32, (i) => (kind === "latency" ? latencyEpisode(pool.make<string, number>(), i, latencies) : sqlEpisode(pool.make<ChatObservation, AgentTurn>(), i, latencies)));
  // Kill the first server partway, restart it on its port a little later.
  const killAt = kind === "latency" ? 800 : 1_500;
  await new Promise((r) => setTimeout(r, killAt));
  servers[0]!.proc.kill("SIGKILL");
  events.push(`killed ${servers[0]!.url} at ${Math.round(performance.now() - t0)} ms`);
  const restart = (async () => {
    await new Promise((r) => setTimeout(r, 500));
    servers[0] = await start(servers[0]!.port);
    events.push(`restarted on port ${servers[0]!.port} at ${Math.round(performance.now() - t0)} ms`);
  })();
  const results = await running;
  await restart;
  const seconds = (performance.now() - t0) / 1000;
  const stats = pool.stats();
  pool.close();
  let mismatched = 0;
  for (let i = 0; i < episodes; i++) {
    const r = results[i];
    if (r instanceof Error) continue;
    if (JSON.stringify(r) !== JSON.stringify(await expectedFor(i))) mismatched++;
  }
  const lost = results.filter((r) => r instanceof Error).length;
  const lostReasons = [...new Set(results.filter((r): r is Error => r instanceof Error).map((e) => e.message.slice(0, 300)))];
  for (const s of servers) s.proc.kill("SIGTERM");
  return {
    env: kind === "latency" ? `${SLOW_ENV_ID} (${STEP_MS} ms/step)` : "sinkflex/spider-sql-v0 (generated, level 1)",
    servers: 2,
    requested: episodes,
    completed: episodes - lost,
    retried: stats.retried,
    moves: stats.moves,
    replayedSteps: stats.replayedSteps,
    lost,
    mismatchedWithLocal: mismatched,
    stepsPerSec: round(latencies.length / seconds, 1),
    p50Ms: round(percentile(latencies, 50), 1),
    p99Ms: round(percentile(latencies, 99), 1),
    peakSessions: stats.peakSessions,
    events,
    lostReasons,
  };
}

/** A scripted sql episode: list the tables, then submit a query; its observations and rewards. */
async function sqlEpisode(env: Env<ChatObservation, AgentTurn>, i: number, latencies?: number[]): Promise<unknown[]> {
  const seen: unknown[] = [];
  try {
    const [obs] = await env.reset({ seed: i, options: { taskIndex: i % 50 } });
    seen.push(obs);
    const turns: AgentTurn[] = [
      { content: "", toolCalls: [{ id: "a", name: "list_tables", arguments: "{}" }] },
      { content: "", toolCalls: [{ id: "b", name: "run_query", arguments: JSON.stringify({ sql: "SELECT 1" }) }] },
      { content: "", toolCalls: [{ id: "c", name: "submit_sql", arguments: JSON.stringify({ sql: "SELECT 1" }) }] },
    ];
    for (const turn of turns) {
      const t0 = performance.now();
      const [o, r, term, trunc] = await env.step(turn);
      latencies?.push(performance.now() - t0);
      seen.push([o, r, term, trunc]);
      if (term || trunc) break;
    }
    return seen;
  } finally {
    await env.close();
  }
}

function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

function table(rows: Record<string, unknown>[], keys: string[]): string {
  const cells = [keys, ...rows.map((r) => keys.map((k) => String(r[k])))];
  const widths = keys.map((_, c) => Math.max(...cells.map((row) => row[c]!.length)));
  return cells.map((row) => row.map((c, i) => c.padStart(widths[i]!)).join("  ")).join("\n");
}

async function main() {
  registerBundledEnvs();
  await import("./latency-env.js");
  const started = performance.now();
  const servers = await Promise.all([0, 1, 2, 3].map(() => latencyServer()));
  const scale = await scaling(servers);
  for (const s of servers) s.proc.kill("SIGTERM");
  console.log(`\nScaling: ${SLOW_ENV_ID}, ${STEP_MS} ms per step, ${EPISODE_STEPS} steps per episode, ${PER_SERVER} sessions per server, 32 episodes in flight`);
  console.log(table(scale, ["servers", "sessionSlots", "episodes", "failed", "steps", "seconds", "stepsPerSec", "p50Ms", "p99Ms", "peakSessions"]));
  const faultRows = [await faults("latency"), await faults("sql")];
  console.log("\nFaults: 2 servers, the first killed partway (SIGKILL) and restarted on its port; 32 episodes in flight");
  console.log(table(faultRows, ["env", "requested", "completed", "retried", "moves", "replayedSteps", "lost", "mismatchedWithLocal", "stepsPerSec", "p50Ms", "p99Ms", "peakSessions"]));
  for (const f of faultRows) console.log(`  ${f.env}: ${f.events.join("; ")}${f.lostReasons.length ? `; lost: ${f.lostReasons.join(" | ")}` : ""}`);
  const result = { node: process.version, quick, seconds: round((performance.now() - started) / 1000, 1), scaling: scale, faults: faultRows };
  if (jsonFile) {
    writeFileSync(jsonFile, JSON.stringify(result, null, 2));
    console.log(`\nwrote ${jsonFile}`);
  }
  const lost = faultRows.reduce((a, f) => a + f.lost + f.mismatchedWithLocal, 0);
  if (lost > 0) {
    console.error(`FAILED: ${lost} episodes lost or different from the local run`);
    process.exitCode = 1;
  }
  process.exit();
}

await main();
