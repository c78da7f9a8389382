/** Test helpers for the engine: a tiny config, the mean cross-entropy loss, fixture paths. */
import type { ModelConfig } from "../../src/model/config.js";
import type { TokenLoss } from "../../src/engine/types.js";

export function tinyConfig(over: Partial<ModelConfig> = {}): ModelConfig {
  return {
    arch: "qwen2", hiddenSize: 32, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 8, intermediateSize: 48,
    vocabSize: 64, rmsNormEps: 1e-6, ropeTheta: 10000, ropeScaling: { type: "none" }, maxPositionEmbeddings: 512,
    tieWordEmbeddings: false, qkvBias: true, ...over,
  };
}

/** Mean next-token cross-entropy over all tokens of all sequences (times `weight`). */
export function meanCrossEntropy(weight = 1, total?: number): TokenLoss {
  return (lps) => {
    const n = total ?? lps.reduce((a, l) => a + l.length, 0);
    let loss = 0;
    for (const l of lps) for (const x of l) loss -= x;
    return { loss: (weight * loss) / n, dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-weight / n)) };
  };
}

export function randomTokens(seed: number, n: number, V: number): number[] {
  let x = seed * 2654435761 + 12345;
  return Array.from({ length: n }, () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return (x >>> 8) % V;
  });
}
