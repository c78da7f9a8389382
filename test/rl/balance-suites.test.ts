import { describe, expect, it } from "vitest";
import { balanceSuiteAdvantages, type TrainSequence } from "../../src/rl/grpo.js";
import { validateConfig } from "../../src/pipeline/config.js";

/** A sequence with `trained` sampled tokens after a 3-token prompt. */
function seq(trained: number, suite?: string): TrainSequence {
  const n = 3 + trained;
  const lossMask = new Uint8Array(n).fill(1, 3);
  return { tokens: Array.from({ length: n }, (_, i) => i), lossMask, behaviourLogprobs: new Float32Array(n), reward: 0, policyVersion: 0, suite };
}

describe("balanceSuites", () => {
  const batch = [seq(10, "arith"), seq(10, "arith"), seq(10, "arith"), seq(2, "restapi"), seq(4), seq(0, "household")];
  const before = [0.5, -0.25, 1, -0.75, 0.4, 0.3];

  it("token aggregation: every suite's tokens weigh 1 / (suites x its own tokens), advantages keep their signs", () => {
    const after = [...before];
    balanceSuiteAdvantages(batch, after, "token");
    const total = 36;
    // arith 30 tokens, restapi 2, the sequence without a suite 4; household trains no token (left as it was)
    const suites = 3;
    const scale = after.map((a, i) => a / before[i]!);
    expect(scale[0]!).toBeCloseTo(total / (suites * 30), 12);
    expect(scale[1]!).toBeCloseTo(scale[0]!, 12);
    expect(scale[3]!).toBeCloseTo(total / (suites * 2), 12);
    expect(scale[4]!).toBeCloseTo(total / (suites * 4), 12);
    expect(scale[5]!).toBe(1);
    // each suite's summed per-token weight (scale / total per token) is 1 / suites
    expect((scale[0]! * 30) / total).toBeCloseTo(1 / 3, 12);
    expect((scale[3]! * 2) / total).toBeCloseTo(1 / 3, 12);
  });

  it("sequence aggregation counts sequences; one suite changes nothing", () => {
    const after = [...before];
    balanceSuiteAdvantages(batch, after, "sequence");
    // 5 sequences with trained tokens: arith 3, restapi 1, no suite 1
    expect(after[0]! / before[0]!).toBeCloseTo(5 / (3 * 3), 12);
    expect(after[3]! / before[3]!).toBeCloseTo(5 / 3, 12);
    const one = [seq(5, "arith"), seq(9, "arith")];
    const adv = [0.5, -0.5];
    balanceSuiteAdvantages(one, adv, "token");
    expect(adv).toEqual([0.5, -0.5]);
  });

  it("is a validated config field, off by default", () => {
    const base = { name: "x", suites: [{ env: "sinkflex/arith-v0" }], model: { init: { hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64 } } };
    expect(validateConfig(base, "test").grpo.balanceSuites).toBe(false);
    expect(validateConfig({ ...base, grpo: { balanceSuites: true } }, "test").grpo.balanceSuites).toBe(true);
    expect(() => validateConfig({ ...base, grpo: { balanceSuites: "yes" } }, "test")).toThrow(/balanceSuites/);
  });
});
