/** Test helpers for attention/: a tiny model config, seeded token sequences, a model with a known sink. */
import { createRandomModel } from "../../src/engine/embedded.js";
import { referenceKernels } from "../../src/kernels/index.js";
import type { ModelConfig } from "../../src/model/config.js";

export function tinyConfig(over: Partial<ModelConfig> = {}): ModelConfig {
  return {
    arch: "qwen2", hiddenSize: 32, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 8, intermediateSize: 48,
    vocabSize: 64, rmsNormEps: 1e-6, ropeTheta: 10000, ropeScaling: { type: "none" }, maxPositionEmbeddings: 4096,
    tieWordEmbeddings: false, qkvBias: true, ...over,
  };
}

export function randomTokens(seed: number, n: number, V: number): number[] {
  let x = seed * 2654435761 + 12345;
  return Array.from({ length: n }, () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return (x >>> 8) % V;
  });
}

export const X = 7;
const V = 64;

/** A random model whose layer-0 heads all put their mass on token X (through a low-frequency RoPE pair). */
export function sinkModel() {
  const cfg = tinyConfig({ ropeTheta: 1e6 });
  const engine = createRandomModel(cfg, 21, { kernels: referenceKernels, std: 0.02 });
  const { hiddenSize: C, headDim: D, numHeads: H, numKvHeads: KVH } = cfg;
  const P = engine.model.params;
  for (let v = 0; v < V; v++) P.embed[v * C] = 0;
  P.embed.fill(0, X * C, X * C + C);
  P.embed[X * C] = 1;
  const W = P.layers[0]!;
  const slow = D / 2 - 1; // the slowest-rotating RoPE pair (slow, slow + D/2)
  for (let h = 0; h < H; h++) {
    for (const d of [slow, slow + D / 2]) W.q.fill(0, (h * D + d) * C, (h * D + d + 1) * C);
    W.qBias![h * D + slow] = 4;
    W.qBias![h * D + slow + D / 2] = 0;
  }
  for (let g = 0; g < KVH; g++) {
    for (const d of [slow, slow + D / 2]) W.k.fill(0, (g * D + d) * C, (g * D + d + 1) * C);
    W.k[(g * D + slow) * C] = 4;
    W.kBias![g * D + slow] = 0;
    W.kBias![g * D + slow + D / 2] = 0;
  }
  return engine;
}

/** Random tokens other than X, with X at position `at`. */
export function withX(seed: number, T: number, at: number): number[] {
  const s = randomTokens(seed, T, V).map((t) => (t === X ? X + 1 : t));
  s[at] = X;
  return s;
}

