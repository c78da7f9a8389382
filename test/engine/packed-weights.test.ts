// Packed weight copies of batched decoding on every kernel set: products with several rows use them and
// give what the stored weights give; optimStep, load and weightsChanged drop them, so decoding after a
// weight change uses the new weights (sampled log-probs equal teacher-forced ones under the new weights).
import { describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRandomModel, type EmbeddedEngine } from "../../src/engine/embedded.js";
import { kernelSets } from "../model/fixtures.js";
import { meanCrossEntropy, randomTokens, tinyConfig } from "./helpers.js";

const kernels = await kernelSets();
const V = 64;

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

/** Samples from three sessions together (products of 3 rows) and checks each against teacher forcing. */
async function sampleAndCheck(engine: EmbeddedEngine, seed: number): Promise<number[][]> {
  const prompts = [randomTokens(seed, 9, V), randomTokens(seed + 1, 5, V), randomTokens(seed + 2, 12, V)];
  const sessions = await Promise.all(prompts.map((p) => engine.session(p)));
  const res = await engine.sampleBatch(sessions, prompts.map((_, i) => ({ maxTokens: 7, seed: seed + i })));
  const lps = await engine.logprobs(prompts.map((p, i) => [...p, ...res[i]!.tokens]));
  res.forEach((r, i) => expect(maxAbsDiff(lps[i]!.subarray(prompts[i]!.length - 1), r.logprobs)).toBeLessThan(1e-4));
  for (const s of sessions) s.close();
  return res.map((r) => r.tokens);
}

describe.each(kernels.map((k) => [k.name, k] as const))("packed weights on %s kernels", (_n, k) => {
  const make = (opts = {}) => createRandomModel(tinyConfig(), 21, { kernels: k, std: 0.3, blockSize: 4, packWeights: true, ...opts });

  it("packed copies are on by default with the native kernels only", () => {
    const engine = createRandomModel(tinyConfig(), 21, { kernels: k });
    expect(engine.model.packed !== undefined).toBe(k.name === "native");
  });

  it("batched decoding packs each matrix once, reuses it, and matches an engine without packed copies", async () => {
    const engine = make();
    const plain = make({ packWeights: false });
    const packed = engine.model.packed!;
    expect(plain.model.packed).toBeUndefined();
    const tokens = await sampleAndCheck(engine, 3);
    expect(await sampleAndCheck(plain, 3)).toEqual(tokens);
    // 2 layers x (q, k, v, o, gate, up, down) + the LM head, each packed once over prefill and 7 steps
    expect(packed.size).toBe(2 * 7 + 1);
    expect(packed.packs).toBe(2 * 7 + 1);
    expect(packed.bytes).toBeGreaterThan(0);
    await sampleAndCheck(engine, 3);
    expect(packed.packs).toBe(2 * 7 + 1);
  });

  it("optimStep drops the packed copies: decoding after it uses the new weights", async () => {
    const engine = make();
    const before = await sampleAndCheck(engine, 5);
    const packs = engine.model.packed!.packs;
    await engine.forwardBackward([randomTokens(8, 20, V), randomTokens(9, 20, V)], meanCrossEntropy());
    await engine.optimStep({ lr: 0.05, weightDecay: 0 });
    expect(engine.model.packed!.size).toBe(0);
    const after = await sampleAndCheck(engine, 5);
    expect(after).not.toEqual(before);
    expect(engine.model.packed!.packs).toBe(2 * packs);
  });

  it("a direct write to the weights is seen after weightsChanged(), and load drops the copies too", async () => {
    const engine = make();
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-packed-"));
    try {
      engine.saveSync(dir);
      const original = await sampleAndCheck(engine, 7);
      // scale one layer's MLP down-projection: stale packed copies would make sampling disagree with scoring
      const down = engine.model.params.layers[1]!.down;
      for (let i = 0; i < down.length; i++) down[i] = down[i]! * -3;
      engine.weightsChanged();
      expect(engine.model.packed!.size).toBe(0);
      const changed = await sampleAndCheck(engine, 7);
      expect(changed).not.toEqual(original);
      engine.loadSync(dir);
      expect(engine.model.packed!.size).toBe(0);
      expect(await sampleAndCheck(engine, 7)).toEqual(original);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
