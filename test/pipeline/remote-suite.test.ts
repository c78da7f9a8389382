/**
 * A training run with one suite on remote env servers (`suites[].remote`): two real `sinkflex envs serve`
 * child processes on loopback, one SIGKILLed while GRPO episodes are open on it and restarted on the same
 * port. The run completes, its metrics and log count the episodes moved to the other server, no
 * infrastructure failure is scored as the policy's, and its GRPO rewards and trained tokens equal a local
 * run's with the same seed. Not a test of the pool alone (test/gym/remote/pool.test.ts).
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { train } from "../../src/pipeline/train.js";
import { spawnEnvServer, type EnvServerProcess } from "../gym/remote/env-server-process.js";

registerBundledEnvs();

const ARITH = "sinkflex/arith-v0";
const scratch = mkdtempSync(join(tmpdir(), "remote-suite-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

/** A real `sinkflex envs serve sinkflex/arith-v0` process; resolves once it prints its URL. */
async function startServer(port = 0): Promise<EnvServerProcess> {
  const server = await spawnEnvServer(["envs", "serve", ARITH, "--port", String(port), "--max-sessions", "8"]);
  cleanups.push(() => {
    if (server.proc.exitCode === null && server.proc.signalCode === null) server.proc.kill("SIGKILL");
  });
  return server;
}

async function health(url: string): Promise<{ sessions: number; steps: number } | undefined> {
  try {
    const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) });
    return (await res.json()) as { sessions: number; steps: number };
  } catch {
    return undefined;
  }
}

/** A tiny model and three GRPO steps of arith; `remote` puts the suite on env servers. */
function arithConfig(runsDir: string, name: string, remote?: { urls: string[] }) {
  return validateConfig({
    name,
    runsDir,
    seed: 5,
    // A format weight: a briefly trained policy writes some malformed tool calls, so groups have mixed
    // rewards and GRPO trains on them.
    suites: [{ env: ARITH, options: { count: 40 }, reward: { verifier: 1, progress: 0, format: 0.5 }, ...(remote ? { remote: { ...remote, sessionsPerServer: 4, stepTimeoutMs: 20_000 } } : {}) }],
    model: { init: { hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64, maxPositions: 1024 } },
    sft: { expertEpisodes: 8, epochs: 2, batchSize: 4, lr: 3e-3 },
    grpo: { steps: 3, batchTasks: 2, groupSize: 4, lr: 1e-2, epochs: 1, klCoef: 0.04, maxTurns: 2, maxTokensPerTurn: 48, maxContextTokens: 768, concurrency: 8 },
    eval: { tasksPerSuite: 2 },
    checkpointEvery: 3,
  });
}

const records = (path: string) =>
  readFileSync(path, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));

describe("a suite on remote env servers", () => {
  it("completes through a server killed and restarted mid-GRPO, counts the moved episodes, and trains as a local run does", async () => {
    const a = await startServer();
    const b = await startServer();

    // While the run goes, kill server A as soon as it holds episodes (the pool's one-session probe at
    // open excluded), then restart it on its port.
    let killed = false;
    let restarted: Promise<unknown> | undefined;
    let watching = true;
    const watcher = (async () => {
      while (watching && !killed) {
        const h = await health(a.url);
        if (h && h.sessions >= 2) {
          a.proc.kill("SIGKILL");
          killed = true;
          restarted = new Promise((r) => a.proc.once("exit", r)).then(() => startServer(a.port));
          return;
        }
        await new Promise((r) => setTimeout(r, 10));
      }
    })();

    // The run's log goes to stderr (not quiet): kept here for the checks below.
    let log = "";
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string | Uint8Array) => {
      log += chunk.toString();
      return true;
    }) as typeof process.stderr.write;
    const remoteRun = await train(arithConfig(mkdtempSync(join(scratch, "runs-")), "remote", { urls: [a.url, b.url] }), { quiet: false, skipEval: true }).finally(() => {
      process.stderr.write = write;
    });
    watching = false;
    await watcher;
    expect(killed).toBe(true);
    await restarted;
    const localRun = await train(arithConfig(mkdtempSync(join(scratch, "runs-")), "local"), { quiet: true, skipEval: true });

    expect(remoteRun.stopped).toBe(false);
    const grpoOf = (runDir: string) => records(join(runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo");
    const remote = grpoOf(remoteRun.runDir);
    const local = grpoOf(localRun.runDir);
    expect(remote.map((r) => r.step)).toEqual([1, 2, 3]);

    // The moved episodes are counted in the step's envPool metrics and said in the log.
    const retried = remote.reduce((n, r) => n + r.envPool.retried, 0);
    const lost = remote.reduce((n, r) => n + r.envPool.infraFailures, 0);
    expect(retried).toBeGreaterThan(0);
    expect(remote.reduce((n, r) => n + r.envPool.episodes, 0)).toBe(3 * 2 * 4);
    expect(local.every((r) => r.envPool === undefined)).toBe(true);
    expect(log).toMatch(/remote envs: \d+ of \d+ episodes retried on another server/);
    expect(log).toMatch(/env server http:\/\/127\.0\.0\.1:\d+ is down/);

    // No infrastructure failure in the trajectories is scored as the policy's: each such episode has
    // no advantage and the step's reward leaves it out.
    for (const r of remote) {
      const trajectories = records(join(remoteRun.runDir, "trajectories", `grpo-${String(r.step).padStart(5, "0")}.jsonl`));
      const infra = trajectories.filter((t) => typeof t.error === "string" && t.error.startsWith("env infrastructure failure:"));
      expect(infra).toHaveLength(r.envPool.infraFailures);
      for (const t of infra) expect(t.advantage).toBeUndefined();
    }

    // With none lost (the other server had room for every moved episode), the run is the local run:
    // the same rewards, successes and trained tokens at every step.
    expect(lost).toBe(0);
    const learning = (rs: Record<string, unknown>[]) => rs.map((r) => ({ step: r.step, reward: r.reward, success: r.success, rewardMean: r.rewardMean, trained: (r.tokens as { trained: number }).trained, sampled: (r.tokens as { sampled: number }).sampled, loss: r.loss }));
    expect(learning(remote)).toEqual(learning(local));
    // Episode by episode: the same tasks, messages, end reasons and rewards as the local run's.
    const episodes = (runDir: string, step: number) =>
      records(join(runDir, "trajectories", `grpo-${String(step).padStart(5, "0")}.jsonl`)).map((t) => ({ taskIndex: t.taskIndex, index: t.index, messages: t.messages, endReason: t.endReason, reward: t.reward, advantage: t.advantage }));
    for (const step of [1, 2, 3]) expect(episodes(remoteRun.runDir, step)).toEqual(episodes(localRun.runDir, step));
    // The killed server was restarted on its port and answers there.
    expect((await health(`http://127.0.0.1:${a.port}`))?.sessions).toBe(0);
  }, 240_000);
});
