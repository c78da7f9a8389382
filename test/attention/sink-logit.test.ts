// The learnable sink logit (gpt-oss form) and the mask as the kernels read it, on every kernel set:
// - attention forward under the canonical mask (window, sink slots, pinned, documents) equals a float64
//   evaluation that uses the mask module's own keep(q, kv);
// - forward and backward with a per-head sink logit match central finite differences (dQ, dK, dV, dSink);
// - the initialization leaves the model's logits unchanged within 1e-4, and the sink logits then train.
import { describe, expect, it } from "vitest";
import { createRandomModel, EmbeddedEngine } from "../../src/engine/embedded.js";
import { loadNativeKernels, referenceKernels, type Kernels } from "../../src/kernels/index.js";
import { buildModel } from "../../src/model/instance.js";
import { Rng } from "../../src/core/index.js";
import {
  canonicalMask, documentPositions, initSinkLogits, keeps, maxLogitDifference, withSinkLogits,
} from "../../src/attention/index.js";
import { randomTokens, tinyConfig } from "./helpers.js";

const native = loadNativeKernels();
const kernelSets: Kernels[] = native ? [referenceKernels, native] : [referenceKernels];

const T = 14;
const H = 4;
const KVH = 2;
const D = 4;
const shape = { B: 1, T, H, KVH, D, scale: 1 / Math.sqrt(D) };
const docIds = Int32Array.from({ length: T }, (_, t) => (t < 9 ? 0 : 1));
const pinned = Uint8Array.from({ length: T }, (_, t) => (t === 4 ? 1 : 0));
const mask = canonicalMask({ sinks: 2, window: 3 }, T, docIds, pinned);

function randn(rng: Rng, n: number, s = 1): Float32Array {
  return Float32Array.from({ length: n }, () => rng.normal() * s);
}

describe.each(kernelSets.map((k) => [k.name, k] as const))("sink logit and mask on %s kernels", (_n, k) => {
  const rng = new Rng(5, "xoshiro128**");
  const q = randn(rng, T * H * D);
  const kk = randn(rng, T * KVH * D);
  const v = randn(rng, T * KVH * D);
  const sink = Float32Array.from([0.3, -0.5, 1.2, -2]);
  const R = randn(rng, T * H * D); // loss = sum(out * R)

  const forward = (qq = q, k2 = kk, vv = v, ss = sink) => {
    const out = new Float32Array(T * H * D);
    k.attentionForward(shape, mask, qq, k2, vv, ss, out, new Float32Array(T * H));
    return out;
  };
  const loss = (out: Float32Array) => out.reduce((a, x, i) => a + x * R[i]!, 0);

  it("the kernels keep exactly the keys keep(q, kv) keeps, with the sink logit in the denominator", () => {
    const out = forward();
    const start = documentPositions(mask, T);
    let worst = 0;
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) {
        const g = Math.floor(h / (H / KVH));
        const scores: [number, number][] = [];
        for (let j = 0; j <= t; j++) {
          if (!keeps(mask, start, t, j)) continue;
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[(t * H + h) * D + d]! * kk[(j * KVH + g) * D + d]!;
          scores.push([j, dot * shape.scale]);
        }
        const z = Math.exp(sink[h]!) + scores.reduce((a, [, s]) => a + Math.exp(s), 0);
        for (let d = 0; d < D; d++) {
          const want = scores.reduce((a, [j, s]) => a + (Math.exp(s) / z) * v[(j * KVH + g) * D + d]!, 0);
          worst = Math.max(worst, Math.abs(want - out[(t * H + h) * D + d]!));
        }
      }
    }
    expect(worst).toBeLessThan(1e-5);
  });

  it("backward (dQ, dK, dV, dSink) matches central finite differences", () => {
    const out = forward();
    const lse = new Float32Array(T * H);
    k.attentionForward(shape, mask, q, kk, v, sink, out, lse);
    const dQ = new Float32Array(q.length);
    const dK = new Float32Array(kk.length);
    const dV = new Float32Array(v.length);
    const dSink = new Float32Array(H);
    k.attentionBackward(shape, mask, q, kk, v, sink, out, lse, R, dQ, dK, dV, dSink);
    const h = 1e-2;
    const check = (x: Float32Array, grad: Float32Array, idx: number[], run: () => Float32Array) => {
      for (const i of idx) {
        const x0 = x[i]!;
        x[i] = x0 + h;
        const up = loss(run());
        x[i] = x0 - h;
        const down = loss(run());
        x[i] = x0;
        const fd = (up - down) / (2 * h);
        expect(Math.abs(fd - grad[i]!), `index ${i}: fd ${fd} vs ${grad[i]}`).toBeLessThan(2e-3 + 1e-2 * Math.abs(fd));
      }
    };
    const some = (n: number) => [0, 3, Math.floor(n / 3), Math.floor(n / 2) + 1, n - 5, n - 1];
    check(q, dQ, some(q.length), () => forward());
    check(kk, dK, some(kk.length), () => forward());
    check(v, dV, some(v.length), () => forward());
    check(sink, dSink, [0, 1, 2, 3], () => forward());
    expect(Math.max(...[...dSink].map(Math.abs))).toBeGreaterThan(1e-3);
  });

  it("init leaves the logits unchanged (<= 1e-4, also on unseen sequences) and the sink logits then train", async () => {
    const engine = createRandomModel(tinyConfig(), 8, { kernels: k, std: 0.2 });
    const calib = [randomTokens(1, 40, 64), randomTokens(2, 40, 64)];
    const init = initSinkLogits(engine.weights, k, calib);
    expect(init.maxLogitChange).toBeLessThanOrEqual(1e-4);
    expect(init.epsilon).toBeGreaterThanOrEqual(1e-6);
    const base = buildModel(engine.weights, k);
    const withSinks = buildModel(init.weights, k);
    expect(withSinks.params.layers[0]!.sinks).not.toBeNull();
    expect(maxLogitDifference(base, withSinks, [randomTokens(3, 60, 64)])).toBeLessThanOrEqual(1e-4);
    // an unhelpful init (-1e4) is exactly the model without sinks
    expect(maxLogitDifference(base, buildModel(withSinkLogits(engine.weights), k), calib)).toBe(0);

    const e2 = new EmbeddedEngine(init.weights, { kernels: k });
    const seqs = [randomTokens(4, 30, 64)];
    const nll = (lps: Float32Array[]) => ({
      loss: -lps[0]!.reduce((a, x) => a + x, 0) / lps[0]!.length,
      dLogprobs: [new Float32Array(lps[0]!.length).fill(-1 / lps[0]!.length)],
    });
    await e2.forwardBackward(seqs, nll);
    const g = e2.gradParams.layers[1]!.sinks!;
    expect(Math.max(...[...g].map(Math.abs))).toBeGreaterThan(0);
    const before = Float32Array.from(e2.model.params.layers[1]!.sinks!);
    await e2.optimStep({ lr: 1e-2, weightDecay: 0 });
    const after = e2.model.params.layers[1]!.sinks!;
    // AdamW moves every sink logit by about lr on its first step, however small its gradient
    for (let h = 0; h < H; h++) expect(Math.abs(after[h]! - before[h]!)).toBeGreaterThan(5e-3);
  });
});
