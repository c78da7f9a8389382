// Training through the engine: 10 AdamW steps (with clipping) match transformers + torch.optim.AdamW
// on every kernel set (losses within 1e-4, gradient norms and final weights' per-tensor sums within 1e-3
// relative);
// gradient accumulation equals one big batch.
import { describe, expect, it } from "vitest";
import { createRandomModel, loadEngine } from "../../src/engine/embedded.js";
import { FIXTURE_MODELS, kernelSets, loadFixture } from "../model/fixtures.js";
import { expectSameGradients, meanCrossEntropy, randomTokens, tinyConfig } from "./helpers.js";

const kernels = await kernelSets();

describe.each(kernels.map((k) => [k.name, k] as const))("training on %s kernels", (_n, k) => {
  it.each(FIXTURE_MODELS)("%s: 10 AdamW steps follow PyTorch", async (name) => {
    const fx = loadFixture(name);
    const engine = loadEngine(fx.checkpoint, { kernels: k });
    const h = fx.meta.adamw;
    const losses: number[] = [];
    const norms: number[] = [];
    for (let s = 0; s < h.steps; s++) {
      const { loss } = await engine.forwardBackward(fx.inputIds, meanCrossEntropy());
      losses.push(loss);
      norms.push((await engine.optimStep(h)).gradNorm);
    }
    for (let s = 0; s < h.steps; s++) {
      expect(Math.abs(losses[s]! - fx.meta.adamwLosses[s]!), `step ${s}: ${losses[s]} vs ${fx.meta.adamwLosses[s]}`).toBeLessThan(1e-4);
      // The trajectories drift apart slowly (fp32 sums in another order, amplified by Adam): 1e-3 relative.
      expect(Math.abs(norms[s]! - fx.meta.adamwGradNorms[s]!), `step ${s} grad norm`).toBeLessThan(1e-3 * Math.max(1, fx.meta.adamwGradNorms[s]!));
    }
    const lp = await engine.logprobs(fx.inputIds);
    const final = -lp.reduce((a, l) => a + l.reduce((x, y) => x + y, 0), 0) / lp.reduce((a, l) => a + l.length, 0);
    expect(Math.abs(final - fx.meta.adamwFinalLoss)).toBeLessThan(1e-4);
    expect(engine.policyVersion).toBe(h.steps);
    for (const e of engine.weights.entries) {
      const want = fx.meta.finalWeights[e.name]!;
      const w = engine.weights.data.subarray(e.offset, e.offset + e.size);
      let sum = 0;
      let sumsq = 0;
      for (const x of w) {
        sum += x;
        sumsq += x * x;
      }
      expect(Math.abs(sumsq - want.sumsq), e.name).toBeLessThan(1e-3 * want.sumsq);
      expect(Math.abs(sum - want.sum), e.name).toBeLessThan(1e-3 * Math.sqrt(want.sumsq * e.size));
    }
  });

  it("gradient accumulation over two calls equals one batch of both", async () => {
    const cfg = tinyConfig();
    const seqs = [randomTokens(1, 9, 64), randomTokens(2, 13, 64), randomTokens(3, 5, 64)];
    const total = seqs.reduce((a, s) => a + s.length - 1, 0);
    const a = createRandomModel(cfg, 7, { kernels: k, std: 0.1 });
    const b = createRandomModel(cfg, 7, { kernels: k, std: 0.1 });
    await a.forwardBackward(seqs, meanCrossEntropy());
    await b.forwardBackward(seqs.slice(0, 2), meanCrossEntropy(1, total));
    await b.forwardBackward(seqs.slice(2), meanCrossEntropy(1, total));
    expectSameGradients(b, a, 1e-5);
    const before = (await a.logprobs(seqs)).flatMap((l) => [...l]).reduce((x, y) => x + y, 0);
    for (let i = 0; i < 3; i++) {
      await a.optimStep({ lr: 1e-2, maxGradNorm: 1 });
      await a.forwardBackward(seqs, meanCrossEntropy());
    }
    const after = (await a.logprobs(seqs)).flatMap((l) => [...l]).reduce((x, y) => x + y, 0);
    expect(after).toBeGreaterThan(before); // a few AdamW steps reduce the loss
  });
});
