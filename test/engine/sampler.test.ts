// The sampler against a brute-force reference: the kept set of top-k / top-p (top-p over the top-k
// distribution, renormalized) and the reported log-prob of each sampled token.
import { describe, expect, it } from "vitest";
import { resolveSampleParams, Sampler } from "../../src/engine/sampler.js";
import { Rng } from "../../src/core/index.js";
import { getKernels } from "../../src/kernels/index.js";

function bruteForce(logits: Float32Array, T: number, topK: number, topP: number): Map<number, number> {
  const V = logits.length;
  const mx = Math.max(...Array.from(logits, (x) => x / T));
  const p = Array.from(logits, (x) => Math.exp(x / T - mx));
  const order = [...p.keys()].sort((a, b) => p[b]! - p[a]! || a - b);
  let keep = topK > 0 ? Math.min(topK, V) : V;
  const massK = order.slice(0, keep).reduce((a, i) => a + p[i]!, 0);
  if (topP < 1) {
    let cum = 0;
    for (let i = 0; i < keep; i++) {
      cum += p[order[i]!]!;
      if (cum >= topP * massK) {
        keep = i + 1;
        break;
      }
    }
  }
  const Z = order.slice(0, keep).reduce((a, i) => a + p[i]!, 0);
  return new Map(order.slice(0, keep).map((i) => [i, Math.log(p[i]! / Z)]));
}

describe("Sampler", () => {
  it.each([
    [1, 0, 1], [0.7, 5, 1], [1, 0, 0.9], [1.3, 20, 0.5], [1, 1, 1], [0.5, 0, 0.999], [2, 300, 0.95],
  ])("temperature %s, topK %s, topP %s: kept set and log-probs match brute force", (T, topK, topP) => {
    const V = 300;
    const rng = new Rng(7, "xoshiro128**");
    const sampler = new Sampler(V);
    for (let trial = 0; trial < 20; trial++) {
      const scale = [3, 12, 0.002, 40][trial % 4]!; // flat (one bin), spread, peaked, beyond the last bin
      const logits = Float32Array.from({ length: V }, () => rng.normal() * scale);
      const want = bruteForce(logits, T, topK, topP);
      const params = resolveSampleParams({ maxTokens: 1, temperature: T, topK, topP });
      for (let s = 0; s < 10; s++) {
        const { token, logprob } = sampler.sample(logits, params, rng);
        expect(want.has(token)).toBe(true);
        expect(Math.abs(logprob - want.get(token)!)).toBeLessThan(1e-9);
      }
    }
  });

  it("samples in proportion to the distribution", () => {
    const sampler = new Sampler(3);
    const logits = Float32Array.from([Math.log(0.5), Math.log(0.3), Math.log(0.2)]);
    const rng = new Rng(1, "xoshiro128**");
    const counts = [0, 0, 0];
    for (let i = 0; i < 20000; i++) counts[sampler.sample(logits, resolveSampleParams({ maxTokens: 1 }), rng).token]!++;
    expect(Math.abs(counts[0]! / 20000 - 0.5)).toBeLessThan(0.015);
    expect(Math.abs(counts[2]! / 20000 - 0.2)).toBeLessThan(0.015);
  });

  it("with the kernels' softmax (plain temperature sampling): the same log-probs and proportions", () => {
    const k = getKernels();
    const softmax = (n: number, v: number, t: number, x: Float32Array, out: Float32Array) => k.softmaxRows(n, v, t, x, out);
    const V = 300;
    const rng = new Rng(11, "xoshiro128**");
    const sampler = new Sampler(V, softmax);
    for (const T of [1, 0.6, 1.7]) {
      const logits = Float32Array.from({ length: V }, () => rng.normal() * 4);
      const want = bruteForce(logits, T, 0, 1);
      for (let s = 0; s < 50; s++) {
        const { token, logprob } = sampler.sample(logits, resolveSampleParams({ maxTokens: 1, temperature: T }), rng);
        expect(Math.abs(logprob - want.get(token)!)).toBeLessThan(1e-5);
      }
    }
    const three = new Sampler(3, softmax);
    const logits = Float32Array.from([Math.log(0.5), Math.log(0.3), Math.log(0.2)]);
    const counts = [0, 0, 0];
    for (let i = 0; i < 20000; i++) counts[three.sample(logits, resolveSampleParams({ maxTokens: 1 }), rng).token]!++;
    expect(Math.abs(counts[0]! / 20000 - 0.5)).toBeLessThan(0.015);
    expect(Math.abs(counts[2]! / 20000 - 0.2)).toBeLessThan(0.015);
    // top-k / top-p still take the exact path
    const { logprob } = three.sample(logits, resolveSampleParams({ maxTokens: 1, topK: 2 }), new Rng(3, "xoshiro128**"));
    expect([Math.log(0.5 / 0.8), Math.log(0.3 / 0.8)].some((x) => Math.abs(x - logprob) < 1e-6)).toBe(true);
  });
});
