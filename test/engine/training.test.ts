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

  it("masks.scored: log-probs of the scored predictions, the same gradients, and a clear error for a gradient outside them", async () => {
    const cfg = tinyConfig();
    const seqs = [randomTokens(4, 11, 64), randomTokens(5, 7, 64)];
    const scored = seqs.map((s, i) => Uint8Array.from({ length: s.length - 1 }, (_, t) => ((t + i) % 3 === 0 ? 1 : 0)));
    // Mean cross-entropy over the scored predictions.
    const count = scored.reduce((n, m) => n + m.reduce((a, x) => a + x, 0), 0);
    const loss = (lps: Float32Array[]) => ({
      loss: -lps.reduce((a, lp, i) => a + lp.reduce((x, v, t) => x + (scored[i]![t] ? v : 0), 0), 0) / count,
      dLogprobs: lps.map((lp, i) => Float32Array.from(lp, (_, t) => (scored[i]![t] ? -1 / count : 0))),
    });
    const a = createRandomModel(cfg, 9, { kernels: k, std: 0.1 });
    const b = createRandomModel(cfg, 9, { kernels: k, std: 0.1 });
    const ra = await a.forwardBackward(seqs, loss);
    const rb = await b.forwardBackward(seqs, loss, { scored });
    expect(rb.loss).toBeCloseTo(ra.loss, 6);
    expectSameGradients(b, a, 1e-5);
    const full = await a.logprobs(seqs);
    const part = await b.logprobs(seqs, { scored });
    part.forEach((lp, i) => lp.forEach((v, t) => expect(v).toBeCloseTo(scored[i]![t] ? full[i]![t]! : 0, 6)));
    // A gradient on a prediction that was not scored, and masks of the wrong length, are errors.
    const leaky = (lps: Float32Array[]) => ({ loss: 0, dLogprobs: lps.map((lp) => new Float32Array(lp.length).fill(0.1)) });
    await expect(b.forwardBackward(seqs, leaky, { scored })).rejects.toThrow(/dLogprobs\[0\]\[1\] is 0\.1.*scored leaves that prediction out/);
    await expect(b.logprobs(seqs, { scored: [scored[0]!] })).rejects.toThrow(/scored: 1 arrays for 2 sequences/);
    await expect(b.logprobs(seqs, { scored: [scored[0]!, scored[0]!] })).rejects.toThrow(/scored\[1\] has 10 values for a sequence of 7 tokens/);
  });
});
