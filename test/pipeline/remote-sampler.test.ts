/**
 * GRPO sampled by policy servers while the engine trains (config `sampler`): two real
 * `sinkflex serve --allow-reload` replicas on loopback, kept in step through vLLM's weight-update routes
 * (full weights, and a LoRA adapter), a replica that is gone, and the torch engine as the trainer
 * (skipped with a printed reason where Python lacks torch). The servers are started on the SFT
 * checkpoint; every step they must serve the trainer's weights, which shows as a log-prob gap of ~0
 * between what they sampled and what the trainer computes, and as each server's log-probs equal to the
 * final checkpoint's.
 */
import { createServer } from "node:net";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openServer } from "../../src/cli/commands/serve.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { loadPolicy } from "../../src/pipeline/policy.js";
import { train } from "../../src/pipeline/train.js";
import { torchUnavailable } from "../engine/torch-helpers.js";
import { PARITY_ENV_ID, registerParityEnv } from "./parity-env.js";

registerParityEnv();
const noTorch = torchUnavailable();
const scratch = mkdtempSync(join(tmpdir(), "remote-sampler-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const MODEL = { init: { hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64, maxPositions: 1024 } };
const GRPO = { steps: 2, batchTasks: 2, groupSize: 4, lr: 1e-2, epochs: 2, klCoef: 0, maxTurns: 2, maxTokensPerTurn: 16, maxContextTokens: 512, concurrency: 8 };
/** Partial credit by the answer's length (the env's progress): a group's rewards differ, so every step learns. */
const SUITES = [{ env: PARITY_ENV_ID, reward: { verifier: 1, progress: 1 } }];
let sftCheckpoint: string;

type Served = Awaited<ReturnType<typeof openServer>>;
const servers: Served[] = [];
async function replica(opts: { apiKey?: string } = {}): Promise<Served> {
  const s = await openServer(sftCheckpoint, { modelName: "policy", allowReload: true, maxTokens: 64, maxContextTokens: 1024, ...opts });
  servers.push(s);
  return s;
}
afterAll(async () => {
  for (const s of servers) await s.close();
});

const records = (path: string) =>
  readFileSync(path, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, any>);

/** Scores `ids` teacher-forced on a server (`echo: true, max_tokens: 0`), as the trainer's `logprobs` does. */
async function served(url: string, model: string, ids: number[], apiKey?: string): Promise<number[]> {
  const res = await fetch(`${url}/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
    body: JSON.stringify({ model, prompt: ids, max_tokens: 0, echo: true, logprobs: 0 }),
  });
  expect(res.status).toBe(200);
  const j = (await res.json()) as { choices: { logprobs: { token_logprobs: (number | null)[] } }[] };
  return j.choices[0]!.logprobs.token_logprobs.slice(1) as number[];
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

beforeAll(async () => {
  // The policy entering RL: a short SFT run's final checkpoint.
  const sft = await train(
    validateConfig({
      name: "sft",
      runsDir: join(scratch, "runs"),
      seed: 3,
      suites: [{ env: PARITY_ENV_ID }],
      model: MODEL,
      // Enough to end some answers within the turn's tokens, not all: rewards differ within a group.
      sft: { expertEpisodes: 16, epochs: 1, batchSize: 4, lr: 1e-2 },
      grpo: { enabled: false },
    }),
    { quiet: true, skipEval: true },
  );
  sftCheckpoint = join(sft.runDir, "final");
}, 300_000);

describe("GRPO with policy servers as the sampler", () => {
  it("two replicas sample every step with the trainer's new weights (full-weight reload), and record the versions", async () => {
    process.env.TEST_SAMPLER_KEY = "sampler-key";
    const a = await replica({ apiKey: "sampler-key" });
    const b = await replica({ apiKey: "sampler-key" });
    const result = await train(
      validateConfig({
        name: "reload",
        runsDir: join(scratch, "runs"),
        seed: 5,
        suites: SUITES,
        model: { checkpoint: sftCheckpoint },
        sft: { enabled: false },
        grpo: GRPO,
        sampler: { kind: "openai", urls: [a.url, b.url], model: "policy", sync: "reload", apiKeyEnv: "TEST_SAMPLER_KEY" },
      }),
      { quiet: true, skipEval: true },
    );
    const steps = records(join(result.runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo");
    expect(steps.map((r) => r.step)).toEqual([1, 2]);
    const start = JSON.parse(readFileSync(join(sftCheckpoint, "sinkflex.json"), "utf8")).policyVersion as number;
    for (const r of steps) {
      // The servers sampled with the weights the trainer scores with: the gap is rounding only. Had a
      // replica kept the old weights, step 2's tokens would be the old policy's (lr 1e-2, 2 epochs).
      expect(r.logprobGap.absMean).toBeLessThan(1e-3);
      expect(r.sampler.replicas).toBe(2);
      // Both replicas served the step's rollouts.
      expect(Object.values(r.sampler.requests as Record<string, number>).every((n) => n > 0)).toBe(true);
      expect(r.gradNorm).toBeGreaterThan(0);
    }
    // Each step's tokens carry the version that sampled them: the entering policy's, then after 2 epochs.
    const versions = (step: number) => new Set(records(join(result.runDir, "trajectories", `grpo-0000${step}.jsonl`)).map((t) => t.policyVersion));
    expect([...versions(1)]).toEqual([start]);
    expect([...versions(2)]).toEqual([start + 2]);
    expect(steps.map((r) => r.policyVersion)).toEqual([start + 2, start + 4]);
    // After the last update both servers serve the final weights, as version start + 4.
    const final = loadPolicy(join(result.runDir, "final"));
    try {
      const ids = records(join(result.runDir, "trajectories", "grpo-00002.jsonl")).find((t) => t.tokens)!.tokens as number[];
      const [mine] = await final.engine.logprobs([ids]);
      for (const s of [a, b]) {
        const info = await fetch(s.url.replace(/\/v1$/, "/weight_info"), { headers: { authorization: "Bearer sampler-key" } }).then((r) => r.json());
        expect(info).toEqual({ weight_version: String(start + 4) });
        const theirs = await served(s.url, "policy", ids, "sampler-key");
        theirs.forEach((x, i) => expect(x).toBeCloseTo(mine![i]!, 4));
      }
    } finally {
      final.engine.dispose();
    }
    // Only the folder of the version being served is kept.
    expect(readdirSync(join(result.runDir, "sampler-weights"))).toEqual([`v${String(start + 4).padStart(8, "0")}`]);
  }, 600_000);

  it("trains a LoRA adapter that every replica loads under a versioned name", async () => {
    const a = await replica();
    const b = await replica();
    const result = await train(
      validateConfig({
        name: "lora",
        runsDir: join(scratch, "runs"),
        seed: 5,
        suites: SUITES,
        model: { checkpoint: sftCheckpoint, lora: { rank: 4, alpha: 8, targets: ["q", "v", "o"] } },
        sft: { enabled: false },
        grpo: { ...GRPO, lr: 5e-2 },
        sampler: { kind: "openai", urls: [a.url, b.url], model: "policy", sync: "lora" },
      }),
      { quiet: true, skipEval: true },
    );
    const steps = records(join(result.runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo");
    expect(steps.map((r) => r.step)).toEqual([1, 2]);
    for (const r of steps) expect(r.logprobGap.absMean).toBeLessThan(1e-3);
    const last = steps[1]!.policyVersion as number;
    for (const s of [a, b]) {
      const models = (await fetch(`${s.url}/models`).then((r) => r.json())) as { data: { id: string }[] };
      // The base and the latest adapter only: the one before was replaced and unloaded.
      expect(models.data.map((m) => m.id)).toEqual(["policy", `policy-v${last}`]);
    }
    // The adapter moved the servers' policy: their log-probs are the trained adapter's, not the base's.
    const ids = records(join(result.runDir, "trajectories", "grpo-00002.jsonl")).find((t) => t.tokens)!.tokens as number[];
    const base = loadPolicy(sftCheckpoint);
    const adapted = loadPolicy(sftCheckpoint);
    try {
      await adapted.engine.load(join(result.runDir, "final"));
      const [before] = await base.engine.logprobs([ids]);
      const [after] = await adapted.engine.logprobs([ids]);
      const theirs = await served(a.url, `policy-v${last}`, ids);
      theirs.forEach((x, i) => expect(x).toBeCloseTo(after![i]!, 4));
      expect(Math.max(...theirs.map((x, i) => Math.abs(x - before![i]!)))).toBeGreaterThan(1e-3);
    } finally {
      base.engine.dispose();
      adapted.engine.dispose();
    }
  }, 600_000);

  it("goes on with the replicas left when one is gone, and says which; with none left the run fails naming each", async () => {
    const a = await replica();
    const dead = `http://127.0.0.1:${await closedPort()}/v1`;
    const logged: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    const config = (name: string, urls: string[]) =>
      validateConfig({
        name,
        runsDir: join(scratch, "runs"),
        seed: 5,
        suites: SUITES,
        model: { checkpoint: sftCheckpoint },
        sft: { enabled: false },
        grpo: { ...GRPO, steps: 1 },
        sampler: { kind: "openai", urls, model: "policy", sync: "reload" },
      });
    process.stderr.write = ((chunk: string | Uint8Array) => {
      logged.push(String(chunk));
      return true;
    }) as typeof process.stderr.write;
    let result;
    try {
      result = await train(config("failover", [dead, a.url]), { skipEval: true });
    } finally {
      process.stderr.write = write;
    }
    const [step] = records(join(result.runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo");
    expect(step!.sampler.replicas).toBe(1);
    expect(step!.sampler.dropped).toEqual([{ url: dead, reason: expect.stringMatching(/cannot reach .*init_weight_transfer_engine/) }]);
    expect(step!.sampler.requests[a.url]).toBeGreaterThan(0);
    expect(step!.logprobGap.absMean).toBeLessThan(1e-3);
    expect(logged.join("")).toContain(`policy server ${dead} left the pool`);
    expect(existsSync(join(result.runDir, "final"))).toBe(true);

    await expect(train(config("all-dead", [dead]), { quiet: true, skipEval: true })).rejects.toThrow(
      new RegExp(`no policy server took the weights of version \\d+ .*${dead.replace(/[/.]/g, "\\$&")}: its update to version \\d+ failed: cannot reach`),
    );
  }, 600_000);

  (noTorch ? it.skip : it)(`the torch engine trains while the replicas sample: they load the folders its worker writes${noTorch ? ` (${noTorch})` : ""}`, async () => {
    const a = await replica();
    const b = await replica();
    const result = await train(
      validateConfig({
        name: "torch",
        runsDir: join(scratch, "runs"),
        seed: 5,
        suites: SUITES,
        model: { checkpoint: sftCheckpoint },
        engine: { backend: "torch", threads: 1 },
        sft: { enabled: false },
        grpo: { ...GRPO, packPrefixes: false },
        sampler: { kind: "openai", urls: [a.url, b.url], model: "policy", sync: "reload" },
      }),
      { quiet: true, skipEval: true },
    );
    const steps = records(join(result.runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo");
    expect(steps.map((r) => r.step)).toEqual([1, 2]);
    // Two engines in fp32 on the same weights (the worker's torch, the servers' embedded engine): rounding
    // apart, while the weights move every step.
    for (const r of steps) {
      expect(r.logprobGap.absMean).toBeLessThan(1e-3);
      expect(r.gradNorm).toBeGreaterThan(0);
    }
    const last = steps[1]!.policyVersion as number;
    for (const s of [a, b]) expect(await fetch(s.url.replace(/\/v1$/, "/weight_info")).then((r) => r.json())).toEqual({ weight_version: String(last) });
  }, 600_000);
});
