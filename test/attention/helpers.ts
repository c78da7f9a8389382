/** Test helpers for attention/: a tiny model config and seeded token sequences. */
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
