// int8 sampling copies (samplingWeights "int8"): sessions sample from them while teacher-forced scoring
// (the trainer's log-probs) reads the weights; the copies follow the weights through an optimizer step;
// switching back samples from the weights. The products themselves are tested in
// test/kernels/gemm-q8.test.ts, batch independence in batch-independence.test.ts.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createRandomModel, type EmbeddedEngine, loadEngine } from "../../src/engine/embedded.js";
import { loadNativeKernels } from "../../src/kernels/index.js";
import { BF16_TEST_CONFIG } from "../model/bf16-compare.js";
import { meanCrossEntropy, randomTokens } from "./helpers.js";

const kernels = loadNativeKernels();
const V = BF16_TEST_CONFIG.vocabSize;
const prompt = randomTokens(3, 40, V);
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** A session samples 24 tokens at temperature 1; its log-probs and the teacher-forced ones of the same tokens. */
async function sampleAndScore(e: EmbeddedEngine): Promise<{ tokens: number[]; sampled: number[]; scored: number[] }> {
  const s = await e.session(prompt);
  const res = await s.sample({ temperature: 1, maxTokens: 24, seed: 9 });
  s.close();
  const [lp] = await e.logprobs([[...prompt, ...res.tokens]]);
  return { tokens: res.tokens, sampled: res.logprobs, scored: res.tokens.map((_, j) => lp![prompt.length - 1 + j]!) };
}

const gaps = (r: { sampled: number[]; scored: number[] }) => r.sampled.map((l, j) => Math.abs(l - r.scored[j]!));

describe.skipIf(!kernels)("int8 sampling weights", () => {
  for (const dtype of ["fp32", "bf16"] as const) {
    it(`${dtype} weights: sessions sample from int8 copies, scoring reads the weights`, async () => {
      const e = createRandomModel(BF16_TEST_CONFIG, 7, { kernels: kernels!, std: 0.08, dtype, samplingWeights: "int8" });
      expect(e.samplingWeights).toBe("int8");
      const int8 = gaps(await sampleAndScore(e));
      expect(e.model.sampling!.bytes).toBeGreaterThan(0);
      e.useSamplingWeights("same");
      expect(e.samplingWeights).toBe("same");
      const same = gaps(await sampleAndScore(e));
      e.dispose();
      // sampling from the weights: the sampler's log-probs are the trainer's
      expect(Math.max(...same)).toBeLessThan(dtype === "fp32" ? 1e-5 : 1e-4);
      // from int8 copies: a small gap, and not zero
      const mean = int8.reduce((a, b) => a + b, 0) / int8.length;
      expect(mean).toBeGreaterThan(1e-4);
      expect(Math.max(...int8)).toBeLessThan(0.05);
    });
  }

  it("the copies follow the weights: after a step they equal a fresh engine's from the new weights", async () => {
    const e = createRandomModel(BF16_TEST_CONFIG, 7, { kernels: kernels!, std: 0.08, samplingWeights: "int8" });
    const before = await sampleAndScore(e);
    const made = e.model.sampling!.quantizations;
    await e.forwardBackward([randomTokens(5, 30, V), randomTokens(6, 30, V)], meanCrossEntropy());
    await e.optimStep({ lr: 1e-2 });
    const after = await sampleAndScore(e);
    expect(e.model.sampling!.quantizations).toBeGreaterThan(made); // quantized again
    expect(after.sampled).not.toEqual(before.sampled);
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-int8-"));
    dirs.push(dir);
    await e.save(dir);
    e.dispose();
    const fresh = loadEngine(dir, { kernels: kernels!, samplingWeights: "int8" });
    const again = await sampleAndScore(fresh);
    fresh.dispose();
    expect(again.tokens).toEqual(after.tokens);
    expect(again.sampled).toEqual(after.sampled);
  });

  it("refuses an unknown setting", () => {
    expect(() => createRandomModel(BF16_TEST_CONFIG, 7, { kernels: kernels!, samplingWeights: "int4" as never })).toThrow(/samplingWeights must be one of same, int8, got "int4"/);
  });
});
