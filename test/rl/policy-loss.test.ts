import { describe, expect, it } from "vitest";
import { Rng } from "../../src/core/index.js";
import { policyLoss, sftLoss, type LossSequence, type PolicyLossConfig } from "../../src/rl/policy-loss.js";

function randomBatch(rng: Rng, withRef: boolean): { logprobs: Float32Array[]; batch: LossSequence[] } {
  const logprobs: Float32Array[] = [];
  const batch: LossSequence[] = [];
  for (let s = 0; s < 4; s++) {
    const n = 5 + rng.int(8);
    const lp = new Float32Array(n).map(() => -0.1 - 3 * rng.next());
    const mask = new Uint8Array(n).map(() => (rng.next() < 0.6 ? 1 : 0));
    mask[0] = 1;
    // Old / behaviour / reference log-probs near the current ones, so ratios fall on both sides of the clip range.
    const near = () => lp.map((v) => v + (rng.next() - 0.5) * 0.8);
    logprobs.push(lp);
    batch.push({ mask, advantage: rng.next() * 2 - 1, oldLogprobs: near(), behaviourLogprobs: near(), refLogprobs: withRef ? near() : undefined });
  }
  return { logprobs, batch };
}

function lossAt(logprobs: Float32Array[], batch: LossSequence[], cfg: PolicyLossConfig): number {
  return policyLoss(logprobs, batch, cfg).loss;
}

describe("policyLoss", () => {
  const configs: [string, PolicyLossConfig][] = [
    ["token aggregation, KL, truncated importance", { clipLow: 0.2, clipHigh: 0.28, aggregation: "token", klCoef: 0.04, tisCap: 2 }],
    ["sequence aggregation, no KL", { clipLow: 0.2, clipHigh: 0.2, aggregation: "sequence", klCoef: 0, tisCap: 0 }],
    ["large KL coefficient", { clipLow: 0.1, clipHigh: 0.3, aggregation: "token", klCoef: 1, tisCap: Infinity }],
  ];
  for (const [name, cfg] of configs) {
    it(`gradient matches finite differences (${name})`, () => {
      const rng = new Rng(7);
      const { logprobs, batch } = randomBatch(rng, cfg.klCoef > 0);
      const { dLogprobs } = policyLoss(logprobs, batch, cfg);
      const h = 1e-3;
      let checked = 0;
      for (let s = 0; s < logprobs.length; s++) {
        for (let t = 0; t < logprobs[s]!.length; t++) {
          const plus = logprobs.map((a) => Float64Array.from(a));
          // Central difference in float64 copies of the log-probs.
          const at = (delta: number) => {
            const copy = logprobs.map((a) => new Float32Array(a));
            copy[s]![t] = plus[s]![t]! + delta;
            return lossAt(copy, batch, cfg);
          };
          const numeric = (at(h) - at(-h)) / (2 * h);
          const ratio = Math.exp(logprobs[s]![t]! - batch[s]!.oldLogprobs[t]!);
          // Skip points within h of a clip boundary, where the loss is not differentiable.
          if (Math.abs(ratio - (1 - cfg.clipLow)) < 0.01 || Math.abs(ratio - (1 + cfg.clipHigh)) < 0.01) continue;
          expect(dLogprobs[s]![t]).toBeCloseTo(numeric, 3);
          checked++;
        }
      }
      expect(checked).toBeGreaterThan(20);
    });
  }

  it("is zero-gradient on unmasked tokens and counts clipped tokens", () => {
    const lp = new Float32Array([-1, -1, -1]);
    const res = policyLoss([lp], [{ mask: new Uint8Array([0, 1, 1]), advantage: 1, oldLogprobs: new Float32Array([-1, -2, -1]), behaviourLogprobs: new Float32Array([-1, -2, -1]) }], {
      clipLow: 0.2,
      clipHigh: 0.2,
      aggregation: "token",
      klCoef: 0,
      tisCap: 0,
    });
    expect(res.dLogprobs[0]![0]).toBe(0);
    // Token 1: ratio e^1 > 1.2 with A > 0: clipped, no gradient.
    expect(res.dLogprobs[0]![1]).toBe(0);
    expect(res.metrics.clipFraction).toBeCloseTo(0.5);
    // Token 2: ratio 1: gradient -A / tokens.
    expect(res.dLogprobs[0]![2]).toBeCloseTo(-0.5);
  });

  it("on-policy with zero advantage and no KL gives zero loss", () => {
    const lp = new Float32Array([-0.5, -2]);
    const res = policyLoss([lp], [{ mask: new Uint8Array([1, 1]), advantage: 0, oldLogprobs: lp, behaviourLogprobs: lp }], {
      clipLow: 0.2,
      clipHigh: 0.2,
      aggregation: "token",
      klCoef: 0,
      tisCap: 2,
    });
    expect(res.loss).toBe(0);
    expect(res.metrics.ratioMean).toBe(1);
  });

  it("rejects mismatched shapes and a missing reference", () => {
    const lp = new Float32Array([-1, -1]);
    const seq = { mask: new Uint8Array([1]), advantage: 1, oldLogprobs: lp, behaviourLogprobs: lp };
    const cfg: PolicyLossConfig = { clipLow: 0.2, clipHigh: 0.2, aggregation: "token", klCoef: 0, tisCap: 0 };
    expect(() => policyLoss([lp], [seq], cfg)).toThrow(/mismatched lengths/);
    const ok = { ...seq, mask: new Uint8Array([1, 1]) };
    expect(() => policyLoss([lp], [ok], { ...cfg, klCoef: 0.1 })).toThrow(/reference log-probs/);
  });
});

describe("sftLoss", () => {
  it("is the mean NLL over masked tokens", () => {
    const res = sftLoss([new Float32Array([-1, -3]), new Float32Array([-2])], [new Uint8Array([1, 0]), new Uint8Array([1])]);
    expect(res.loss).toBeCloseTo(1.5);
    expect(Array.from(res.dLogprobs[0]!)).toEqual([-0.5, 0]);
    expect(res.metrics.tokens).toBe(2);
  });
});
