/**
 * The env pool (src/gym/remote/pool.ts) against real servers on 127.0.0.1: the same trajectories as
 * local envs for the same seed, waiting on a full server, and faults: `sinkflex envs serve` child
 * processes killed, restarted and stopped (hung) mid-episode, a WebSocket dropped by a proxy, and an
 * episode that cannot move recorded as an infrastructure failure.
 */
import { connect, createServer, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { EnvInfrastructureError, EnvPool, isInfrastructureFailure } from "../../../src/gym/remote/pool.js";
import { serveEnv, type EnvServer } from "../../../src/gym/remote/server.js";
import { make } from "../../../src/gym/registry.js";
import type { AgentTurn, ChatObservation } from "../../../src/core/index.js";
import type { Env, ResetArgs, ResetResult } from "../../../src/gym/env.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { Rollout, type GroupTask } from "../../../src/rollout/agent-loop.js";
import { RolloutScheduler } from "../../../src/rollout/scheduler.js";
import { tokenCodec, TrimmedVocab } from "../../../src/model/vocab.js";
import { template, tinyEngine, tokenizer } from "../../rollout/helpers.js";
import { SlowEnv, SLOW_ENV_ID } from "./slow-env.js";
import { spawnEnvServer, type EnvServerProcess } from "./env-server-process.js";

registerBundledEnvs();

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A real `sinkflex envs serve test/slow-v0` process; resolves once it prints its URL. */
async function startServer(port = 0, extra: string[] = []): Promise<EnvServerProcess> {
  const server = await spawnEnvServer(["--import", "test/gym/remote/slow-env.ts", "envs", "serve", SLOW_ENV_ID, "--port", String(port), ...extra]);
  cleanups.push(() => {
    if (server.proc.exitCode === null && server.proc.signalCode === null) server.proc.kill("SIGKILL");
  });
  return server;
}

async function openPool(options: Parameters<typeof EnvPool.open>[0]): Promise<EnvPool> {
  const pool = await EnvPool.open(options);
  cleanups.push(() => pool.close());
  return pool;
}

/**
 * Plays one slow-env episode (action k at step k) and returns its observations and rewards. After each
 * answered step it awaits `afterStep(steps so far)` when given (a test holds episodes there).
 */
async function play(env: Env<string, number>, seed: number, taskIndex = 0, afterStep?: (steps: number) => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  const [obs] = await env.reset({ seed, options: { taskIndex } });
  seen.push(obs);
  for (let k = 0; ; k++) {
    const [o, r, term, trunc] = await env.step((seed + k) % 1000);
    seen.push(`${o} ${r}`);
    if (term || trunc) break;
    await afterStep?.(k + 1);
  }
  return seen;
}

/**
 * Holds `count` episodes after their `steps`-th step: `reached` resolves once all of them are there
 * (every session open, every episode mid-episode with steps to replay), `release()` lets them go on.
 * A fault injected between the two hits every episode mid-episode however slow the machine is.
 */
function holdAfter(steps: number, count: number): { afterStep: (k: number) => Promise<void>; reached: Promise<void>; release: () => void } {
  let arrived = 0;
  let allThere!: () => void;
  let release!: () => void;
  const reached = new Promise<void>((r) => (allThere = r));
  const gate = new Promise<void>((r) => (release = r));
  const afterStep = async (k: number) => {
    if (k !== steps) return;
    if (++arrived === count) allThere();
    await gate;
  };
  return { afterStep, reached, release };
}

/**
 * A TCP proxy on 127.0.0.1 in front of `port` whose connections `cut()` drops (the server stays up);
 * while `refusing(true)`, it closes every new connection at once.
 */
async function cuttableProxy(port: number): Promise<{ url: string; cut: () => void; refusing: (on: boolean) => void }> {
  const sockets = new Set<Socket>();
  let refuse = false;
  const proxy = createServer((client) => {
    if (refuse) {
      client.destroy();
      return;
    }
    const upstream = connect(port, "127.0.0.1");
    client.pipe(upstream).pipe(client);
    sockets.add(client);
    const drop = () => {
      sockets.delete(client);
      client.destroy();
      upstream.destroy();
    };
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise<void>((r) => proxy.close(() => r())));
  return {
    url: `http://127.0.0.1:${(proxy.address() as { port: number }).port}`,
    cut: () => [...sockets].forEach((s) => s.destroy()),
    refusing: (on) => {
      refuse = on;
      if (on) [...sockets].forEach((s) => s.destroy());
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("EnvPool: same trajectories as local envs", () => {
  it("a rollout with the same seed gives identical token ids and rewards on local envs and on a pool of 2 loopback servers", async () => {
    const servers: EnvServer[] = [await serveEnv("sinkflex/arith-v0", { maxSessions: 8 }), await serveEnv("sinkflex/arith-v0", { maxSessions: 8 })];
    cleanups.push(() => Promise.all(servers.map((s) => s.close())).then(() => undefined));
    const pool = await openPool({ urls: servers.map((s) => s.url), sessionsPerServer: 4, envId: "sinkflex/arith-v0", options: { count: 40 } });
    // A vocabulary from the suite's own prompts.
    const probe = (await make("sinkflex/arith-v0", { count: 40 })) as Env<ChatObservation, AgentTurn>;
    const corpus: number[][] = [];
    for (let t = 0; t < 4; t++) {
      const [obs] = await probe.reset({ seed: t, options: { taskIndex: t } });
      corpus.push(tokenizer.encode(template.render(obs.messages, { tools: obs.tools, addGenerationPrompt: true })));
    }
    await probe.close();
    const codec = tokenCodec(tokenizer, TrimmedVocab.build(tokenizer, corpus));
    const tasks = (makeEnv: () => Promise<Env<ChatObservation, AgentTurn>>): GroupTask[] =>
      [3, 17, 25, 31].map((taskIndex, i) => ({ envId: "sinkflex/arith-v0", makeEnv, reset: { seed: 1000 + i, options: { taskIndex } }, groupSize: 3 }));
    const run = async (makeEnv: () => Promise<Env<ChatObservation, AgentTurn>>) => {
      const rollout = new Rollout(tinyEngine(codec), codec, template, { maxTokensPerTurn: 12, maxTurns: 3, turnLimit: "close", seed: 5, temperature: 1 });
      const groups = await new RolloutScheduler(rollout, { maxInFlight: 8 }).runAll(tasks(makeEnv));
      await rollout.close();
      return groups.flat();
    };
    const local = await run(async () => (await make("sinkflex/arith-v0", { count: 40 })) as Env<ChatObservation, AgentTurn>);
    const remote = await run(async () => pool.make<ChatObservation, AgentTurn>());
    expect(remote).toHaveLength(12);
    for (const [i, t] of remote.entries()) {
      const l = local[i]!;
      expect(t.error).toBeUndefined();
      expect(t.turns.length).toBeGreaterThan(0);
      expect(t.segments.map((s) => s.tokens)).toEqual(l.segments.map((s) => s.tokens));
      expect(t.segments.map((s) => [...s.lossMask])).toEqual(l.segments.map((s) => [...s.lossMask]));
      expect(t.rewards).toEqual(l.rewards);
      expect(t.endReason).toBe(l.endReason);
      expect([t.taskIndex, t.seed]).toEqual([l.taskIndex, l.seed]);
    }
    // Both servers ran episodes, and never more sessions than the pool allows.
    expect(servers.every((s) => s.stats().steps > 0)).toBe(true);
    expect(pool.stats().peakSessions).toBeLessThanOrEqual(8);
    expect(pool.stats().sessions).toBe(0);
  }, 180_000);

  it("a server at its session limit (429) is waited on, not failed", async () => {
    const server = await serveEnv(SLOW_ENV_ID, { maxSessions: 2 });
    cleanups.push(() => server.close());
    // The pool believes the server takes 6 sessions; it takes 2.
    const pool = await openPool({ urls: [server.url], sessionsPerServer: 6, options: { stepMs: 20, episodeSteps: 3 } });
    const results = await Promise.all(Array.from({ length: 6 }, async (_, i) => {
      const env = pool.make<string, number>();
      try {
        return await play(env, i);
      } finally {
        await env.close();
      }
    }));
    const expected = await Promise.all(Array.from({ length: 6 }, (_, i) => play(new SlowEnv(0, 3), i)));
    expect(results).toEqual(expected);
    const stats = pool.stats();
    expect(stats.sessionLimitWaits).toBeGreaterThan(0);
    expect(stats).toMatchObject({ episodes: 6, completed: 6, failed: 0, retried: 0 });
  }, 60_000);
});

describe("EnvPool: a fault while an episode resets", () => {
  it("a WebSocket dropped while a new env's first reset is in flight: the reset runs again on the other server, with nothing to replay", async () => {
    // The server's first reset waits for the test: the drop lands while it is in flight, every time.
    let resets = 0;
    let entered!: () => void;
    let letGo!: () => void;
    const inFlight = new Promise<void>((r) => (entered = r));
    const held = new Promise<void>((r) => (letGo = r));
    class HeldResetEnv extends SlowEnv {
      override async reset(args: ResetArgs = {}): Promise<ResetResult<string>> {
        if (++resets === 1) {
          entered();
          await held;
        }
        return super.reset(args);
      }
    }
    const server = await serveEnv(() => new HeldResetEnv(0, 3), { envId: SLOW_ENV_ID, maxSessions: 4, clientOptions: { reset: { taskIndex: { type: "integer", min: 0, max: 1000 } } } });
    cleanups.push(() => server.close());
    cleanups.push(() => letGo());
    const { url: proxyUrl, cut } = await cuttableProxy(server.port);
    // One session per server, the proxy listed first: the episode starts through the proxy.
    const pool = await openPool({ urls: [proxyUrl, server.url], sessionsPerServer: 1, healthIntervalMs: 600_000 });
    const env = pool.make<string, number>();
    cleanups.push(() => env.close());
    const episode = play(env, 4);
    await Promise.race([inFlight, episode]); // an episode that fails before its reset arrives shows its error
    cut();
    letGo();
    expect(await episode).toEqual(await play(new SlowEnv(0, 3), 4));
    expect(resets).toBe(2);
    expect(pool.stats()).toMatchObject({ episodes: 1, completed: 1, failed: 0, retried: 1, moves: 1, replayedSteps: 0 });
  }, 60_000);


  it("a server gone when the next episode of the same env opens its session: the reset runs on the other server (no replay of the last episode)", async () => {
    const a = await serveEnv(SLOW_ENV_ID, { maxSessions: 4 });
    const b = await serveEnv(SLOW_ENV_ID, { maxSessions: 4 });
    cleanups.push(() => Promise.all([a.close(), b.close()]).then(() => undefined));
    // No health check during the test: the pool learns of the dead server only from the failed connect.
    const pool = await openPool({ urls: [a.url, b.url], sessionsPerServer: 4, options: { episodeSteps: 3 }, healthIntervalMs: 600_000 });
    const env = pool.make<string, number>();
    cleanups.push(() => env.close());
    expect(await play(env, 1)).toEqual(await play(new SlowEnv(0, 3), 1));
    await a.close(); // the first (least-loaded, first listed) server is gone before the next episode
    expect(await play(env, 2)).toEqual(await play(new SlowEnv(0, 3), 2));
    expect(pool.stats()).toMatchObject({ episodes: 2, completed: 2, failed: 0, retried: 1, replayedSteps: 0 });
  }, 60_000);
});

describe("EnvPool under faults (real `sinkflex envs serve` processes)", () => {
  it("a server killed mid-episode and restarted: episodes move to the other server with the same seed, nothing is lost, the restarted one comes back", async () => {
    const a = await startServer();
    const b = await startServer();
    const events: string[] = [];
    const pool = await openPool({ urls: [a.url, b.url], sessionsPerServer: 8, options: { stepMs: 30, episodeSteps: 12 }, healthIntervalMs: 200, onEvent: (e) => events.push(e.kind) });
    const N = 12;
    const hold = holdAfter(2, N);
    const running = Array.from({ length: N }, async (_, i) => {
      const env = pool.make<string, number>();
      try {
        return await play(env, 50 + i, 0, hold.afterStep);
      } finally {
        await env.close();
      }
    });
    await hold.reached; // every episode is 2 steps in, half of them on `a`
    a.proc.kill("SIGKILL");
    hold.release();
    const results = await Promise.all(running);
    const expected = await Promise.all(Array.from({ length: N }, (_, i) => play(new SlowEnv(0, 12), 50 + i)));
    expect(results).toEqual(expected);
    const stats = pool.stats();
    expect(stats.retried).toBeGreaterThan(0);
    expect(stats.replayedSteps).toBeGreaterThan(0);
    expect(stats).toMatchObject({ episodes: N, completed: N, failed: 0 });
    expect(events).toContain("server_down");
    expect(pool.serverStates()[0]!.up).toBe(false);
    // Restarted on its port, the health check brings it back and it takes episodes again.
    await startServer(a.port);
    for (let i = 0; i < 100 && !pool.serverStates()[0]!.up; i++) await sleep(100);
    expect(pool.serverStates()[0]!.up).toBe(true);
    expect(events).toContain("server_up");
    const again = await Promise.all(Array.from({ length: 10 }, async (_, i) => {
      const env = pool.make<string, number>();
      try {
        return await play(env, 90 + i);
      } finally {
        await env.close();
      }
    }));
    expect(again).toEqual(await Promise.all(Array.from({ length: 10 }, (_, i) => play(new SlowEnv(0, 12), 90 + i))));
    const health = (await (await fetch(`${a.url}/health`)).json()) as { steps: number };
    expect(health.steps).toBeGreaterThan(0);
  }, 180_000);

  it("a hung server (SIGSTOP) is left after the step timeout and its episodes finish elsewhere", async () => {
    const a = await startServer();
    const b = await startServer();
    const pool = await openPool({ urls: [a.url, b.url], sessionsPerServer: 4, options: { stepMs: 20, episodeSteps: 8 }, stepTimeoutMs: 1_500, healthIntervalMs: 300 });
    const hold = holdAfter(2, 6);
    const running = Array.from({ length: 6 }, async (_, i) => {
      const env = pool.make<string, number>();
      try {
        return await play(env, 7 + i, 0, hold.afterStep);
      } finally {
        await env.close();
      }
    });
    await hold.reached;
    a.proc.kill("SIGSTOP");
    cleanups.push(() => void a.proc.kill("SIGCONT"));
    hold.release();
    const results = await Promise.all(running);
    expect(results).toEqual(await Promise.all(Array.from({ length: 6 }, (_, i) => play(new SlowEnv(0, 8), 7 + i))));
    expect(pool.stats().retried).toBeGreaterThan(0);
    expect(pool.stats().failed).toBe(0);
    expect(pool.serverStates()[0]!.up).toBe(false);
    a.proc.kill("SIGCONT");
  }, 180_000);

  it("a missed health check leaves a server in the rotation; healthFailures missed in a row take it out, naming the cause", async () => {
    const server = await serveEnv(SLOW_ENV_ID, { maxSessions: 4 });
    cleanups.push(() => server.close());
    const { url: proxyUrl, refusing } = await cuttableProxy(server.port);
    const events: { kind: string; reason?: string }[] = [];
    const pool = await openPool({ urls: [proxyUrl], healthIntervalMs: 100, healthFailures: 5, onEvent: (e) => events.push(e) });
    // One interval and a half of refused connections: at most two checks missed of the five it takes.
    refusing(true);
    await sleep(150);
    refusing(false);
    await sleep(600);
    expect(events.filter((e) => e.kind === "server_down")).toEqual([]);
    expect(pool.serverStates()[0]!.up).toBe(true);
    // Refused for good: out after five in a row, with fetch's cause in the reason.
    refusing(true);
    for (let i = 0; i < 200 && pool.serverStates()[0]!.up; i++) await sleep(50);
    const down = events.find((e) => e.kind === "server_down");
    expect(down?.reason).toMatch(/^GET \/health failed: fetch failed \(.+\) \(5 checks in a row\)$/);
    refusing(false);
    for (let i = 0; i < 200 && !pool.serverStates()[0]!.up; i++) await sleep(50);
    expect(pool.serverStates()[0]!.up).toBe(true);
  }, 60_000);

  it("a WebSocket dropped mid-episode (server still up) moves the episode; an episode with nowhere to go is an infrastructure failure, counted", async () => {
    const server = await serveEnv(SLOW_ENV_ID, { maxSessions: 16 });
    cleanups.push(() => server.close());
    const { url: proxyUrl, cut } = await cuttableProxy(server.port);
    const pool = await openPool({ urls: [proxyUrl, server.url], sessionsPerServer: 2, options: { stepMs: 30, episodeSteps: 6 }, healthIntervalMs: 200 });
    const hold = holdAfter(2, 4);
    const running = Array.from({ length: 4 }, async (_, i) => {
      const env = pool.make<string, number>();
      try {
        return await play(env, 300 + i, 0, hold.afterStep);
      } finally {
        await env.close();
      }
    });
    await hold.reached; // 2 episodes 2 steps in through the proxy, 2 on the server itself
    cut();
    hold.release();
    const results = await Promise.all(running);
    expect(results).toEqual(await Promise.all(Array.from({ length: 4 }, (_, i) => play(new SlowEnv(0, 6), 300 + i))));
    expect(pool.stats().retried).toBeGreaterThan(0);
    expect(pool.stats().failed).toBe(0);

    // One server, no retries allowed, killed mid-episode: every episode is an infrastructure failure.
    const only = await startServer();
    const strict = await openPool({ urls: [only.url], sessionsPerServer: 4, options: { stepMs: 30, episodeSteps: 20 }, maxRetries: 1, acquireTimeoutMs: 1_000 });
    const held = holdAfter(2, 3);
    const doomed = Array.from({ length: 3 }, async (_, i) => {
      const env = strict.make<string, number>();
      try {
        return await play(env, i, 0, held.afterStep);
      } catch (err) {
        return err as Error;
      } finally {
        await env.close();
      }
    });
    await held.reached;
    only.proc.kill("SIGKILL");
    held.release();
    const outcomes = await Promise.all(doomed);
    for (const o of outcomes) {
      expect(o).toBeInstanceOf(EnvInfrastructureError);
      expect(isInfrastructureFailure((o as Error).message)).toBe(true);
    }
    expect(strict.stats()).toMatchObject({ episodes: 3, failed: 3, completed: 0 });
  }, 180_000);
});
