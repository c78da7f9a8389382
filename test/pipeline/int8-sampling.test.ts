// A run with `engine.samplingWeights: int8`: GRPO's rollouts sample from int8 copies of the policy, the
// trainer scores with its weights, and each step's logprobGap metric shows the difference (a run sampling
// from the weights themselves shows none); the config refuses int8 without truncated IS and on the torch
// worker, naming the field.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { validateConfig } from "../../src/pipeline/config.js";
import { train } from "../../src/pipeline/train.js";
import { parityConfig, registerParityEnv } from "./parity-env.js";

registerParityEnv();
const scratch = mkdtempSync(join(tmpdir(), "int8-sampling-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/**
 * The mean |trainer - sampler| log-prob of each GRPO step that trained (a step whose groups all tie has no
 * loss and logs 0) in a 3-step run sampling from `samplingWeights`.
 */
async function gapsOf(samplingWeights: "same" | "int8"): Promise<number[]> {
  const base = parityConfig(join(scratch, "runs"), `int8-${samplingWeights}`);
  const cfg = validateConfig({ ...base, grpo: { ...base.grpo, steps: 3 }, eval: { tasksPerSuite: 1 }, engine: { samplingWeights } });
  const run = await train(cfg, { quiet: true });
  return readFileSync(join(run.runDir, "metrics.jsonl"), "utf8").split("\n").filter(Boolean)
    .map((l) => JSON.parse(l) as { stage?: string; logprobGap?: { absMean: number }; tokens?: { trained: number } })
    .filter((m) => m.stage === "grpo" && m.logprobGap && m.tokens!.trained > 0)
    .map((m) => m.logprobGap!.absMean);
}

describe("engine.samplingWeights int8 in a run", () => {
  it("rollouts sample from int8 copies: every GRPO step that trains logs a sampler/trainer gap that sampling from the weights does not have", async () => {
    const int8 = await gapsOf("int8");
    const same = await gapsOf("same");
    expect(int8.length).toBeGreaterThan(0);
    expect(same.length).toBeGreaterThan(0);
    for (const g of int8) expect(g).toBeGreaterThan(1e-4);
    for (const g of int8) expect(g).toBeLessThan(0.1);
    for (const g of same) expect(g).toBeLessThan(1e-5);
  }, 300_000);

  it("needs truncated importance sampling, and the embedded engine", () => {
    const base = parityConfig(join(scratch, "runs"), "refused");
    expect(() => validateConfig({ ...base, engine: { samplingWeights: "int8" }, grpo: { ...base.grpo, tisCap: 0 } })).toThrow(/grpo\.tisCap.*samplingWeights "int8" samples with other weights/);
    expect(() => validateConfig({ ...base, engine: { backend: "torch", samplingWeights: "int8" } })).toThrow(/engine\.samplingWeights.*int8 sampling copies are the embedded engine's/);
    expect(() => validateConfig({ ...base, engine: { samplingWeights: "int4" } })).toThrow(/engine\.samplingWeights/);
  });
});
