/** Test helpers for the engine: a tiny config, the mean cross-entropy loss, gradient comparison. */
import type { ModelConfig } from "../../src/model/config.js";
import { expect } from "vitest";
import type { EmbeddedEngine } from "../../src/engine/embedded.js";
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

/** Expects the accumulated gradients of `a` to equal those of `b` within `tol` x b's largest gradient. */
export function expectSameGradients(a: EmbeddedEngine, b: EmbeddedEngine, tol = 1e-4): void {
  expectSameValues(a.grads, b.grads, tol);
}

/** Expects `actual` to equal `expected` within `tol` x expected's largest magnitude (which must not be 0). */
export function expectSameValues(actual: Float32Array, expected: Float32Array, tol: number): void {
  expect(actual.length).toBe(expected.length);
  let worst = 0;
  let scale = 0;
  for (let i = 0; i < actual.length; i++) {
    worst = Math.max(worst, Math.abs(actual[i]! - expected[i]!));
    scale = Math.max(scale, Math.abs(expected[i]!));
  }
  expect(scale).toBeGreaterThan(0);
  expect(worst / scale, `largest difference ${worst} (largest value ${scale})`).toBeLessThan(tol);
}
