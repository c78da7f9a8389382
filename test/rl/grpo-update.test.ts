// The direction of a GRPO update, end to end through a real (tiny) model: on-policy groups with mixed
// rewards, then one update; the rewarded sequences become more likely and the others less likely.
// A group whose rewards are all equal teaches nothing and leaves the weights as they were.
import { describe, expect, it } from "vitest";
import { createRandomModel, type EmbeddedEngine } from "../../src/engine/embedded.js";
import { grpoUpdate, type GrpoHparams, type TrainSequence } from "../../src/rl/grpo.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { randomTokens, tinyConfig } from "../engine/helpers.js";

const V = 64;
const make = () => createRandomModel(tinyConfig(), 7, { std: 0.2 });
const hp: GrpoHparams = {
  estimator: "dr-grpo", clipLow: 0.2, clipHigh: 0.28, aggregation: "token", klCoef: 0, tisCap: 2, epochs: 1,
  lr: 1e-2, weightDecay: 0, maxGradNorm: 1, filterDegenerateGroups: true, microBatch: 4, packPrefixes: true,
};

/** Groups of one prompt and four completions, with the completions' log-probs under `engine` as the behaviour. */
async function onPolicyGroups(engine: EmbeddedEngine, rewards: number[][]): Promise<TrainSequence[][]> {
  const groups: TrainSequence[][] = [];
  for (const [g, rs] of rewards.entries()) {
    const prompt = randomTokens(100 + g, 24, V);
    const tokens = rs.map((_, i) => [...prompt, ...randomTokens(200 + 10 * g + i, 8, V)]);
    const lps = await engine.logprobs(tokens);
    groups.push(rs.map((reward, i) => {
      const lossMask = new Uint8Array(tokens[i]!.length).fill(1, prompt.length);
      const behaviourLogprobs = new Float32Array(tokens[i]!.length);
      for (let t = prompt.length; t < tokens[i]!.length; t++) behaviourLogprobs[t] = lps[i]![t - 1]!;
      return { tokens: tokens[i]!, lossMask, behaviourLogprobs, reward, policyVersion: 0 };
    }));
  }
  return groups;
}

/** Each sequence's log-prob of its trained tokens. */
async function sequenceLogprobs(engine: EmbeddedEngine, seqs: TrainSequence[]): Promise<number[]> {
  const lps = await engine.logprobs(seqs.map((s) => s.tokens));
  return lps.map((lp, i) => seqs[i]!.lossMask.reduce((a, m, t) => (m && t > 0 ? a + lp[t - 1]! : a), 0));
}

describe("a GRPO update", () => {
  it("makes the rewarded sequences of a group more likely and the others less likely", async () => {
    const engine = make();
    const groups = await onPolicyGroups(engine, [[1, 0, 0, 1], [0, 0, 1, 0], [1, 1, 1, 0]]);
    const seqs = groups.flat();
    const before = await sequenceLogprobs(engine, seqs);
    const m = await grpoUpdate(engine, undefined, groups, hp);
    expect(m.degenerateGroups).toBe(0);
    const after = await sequenceLogprobs(engine, seqs);
    const delta = after.map((x, i) => x - before[i]!);
    const rewarded = delta.filter((_, i) => seqs[i]!.reward === 1);
    const others = delta.filter((_, i) => seqs[i]!.reward === 0);
    expect(Math.min(...rewarded)).toBeGreaterThan(0);
    expect(Math.max(...others)).toBeLessThan(0);
  });

  it("with negativeAdvantageScale below 1, leans on raising the rewarded sequences", async () => {
    // The mean log-prob change of the rewarded and of the other sequences after one update.
    const update = async (negativeAdvantageScale: number) => {
      const engine = make();
      const groups = await onPolicyGroups(engine, [[1, 0, 0, 1], [0, 0, 1, 0], [1, 1, 1, 0]]);
      const seqs = groups.flat();
      const before = await sequenceLogprobs(engine, seqs);
      await grpoUpdate(engine, undefined, groups, { ...hp, negativeAdvantageScale });
      const after = await sequenceLogprobs(engine, seqs);
      const mean = (reward: number) => {
        const d = seqs.flatMap((s, i) => (s.reward === reward ? [after[i]! - before[i]!] : []));
        return d.reduce((a, x) => a + x, 0) / d.length;
      };
      return { rewarded: mean(1), others: mean(0) };
    };
    const full = await update(1);
    const leaning = await update(0.1);
    expect(leaning.rewarded).toBeGreaterThan(0);
    expect(leaning.others).toBeLessThan(0);
    // The rise of the rewarded sequences against the fall of the others grows.
    expect(leaning.rewarded / -leaning.others).toBeGreaterThan(2 * (full.rewarded / -full.others));
    await expect(grpoUpdate(make(), undefined, [], { ...hp, negativeAdvantageScale: 0 })).rejects.toThrow(/negativeAdvantageScale/);
    const config = (negativeAdvantageScale: number) =>
      validateConfig({ name: "t", suites: [{ env: "test/a-v0" }], model: { init: {} }, grpo: { negativeAdvantageScale } }, "test");
    expect(config(0.25).grpo.negativeAdvantageScale).toBe(0.25);
    expect(() => config(0)).toThrow(/negativeAdvantageScale/);
    expect(() => config(1.5)).toThrow(/negativeAdvantageScale/);
  });

  it("takes the old log-probs from epoch 0's own forward pass: no separate pass, a ratio of exactly 1 there", async () => {
    const engine = make();
    const reference = make();
    const groups = await onPolicyGroups(engine, [[1, 0, 0, 1], [0, 0, 1, 0]]);
    const calls = { policy: 0, reference: 0 };
    const count = (e: EmbeddedEngine, key: keyof typeof calls) => {
      const logprobs = e.logprobs.bind(e);
      e.logprobs = (...args) => {
        calls[key]++;
        return logprobs(...args);
      };
    };
    count(engine, "policy");
    count(reference, "reference");
    const one = await grpoUpdate(engine, reference, groups, { ...hp, klCoef: 0.04 });
    expect(calls).toEqual({ policy: 0, reference: 1 });
    expect(one.ratioMean).toBeCloseTo(1, 12);
    expect(one.clipFraction).toBe(0);
    // The metrics are the last epoch's: a second epoch, off the old policy, has ratios other than 1.
    const other = make();
    count(other, "policy");
    const two = await grpoUpdate(other, undefined, groups, { ...hp, epochs: 2, lr: 0.1 });
    expect(Math.abs(two.ratioMean - 1)).toBeGreaterThan(1e-4);
    expect(calls).toEqual({ policy: 0, reference: 1 });
  });

  it("leaves the weights unchanged when every group's rewards are equal", async () => {
    const engine = make();
    const groups = await onPolicyGroups(engine, [[1, 1, 1, 1], [0, 0, 0, 0]]);
    const weights = Float32Array.from(engine.weights.data);
    const m = await grpoUpdate(engine, undefined, groups, hp);
    expect(m.degenerateGroups).toBe(2);
    expect(m.trainedTokens).toBe(0);
    expect(engine.weights.data).toEqual(weights);
  });

  it("returns the advantages it trained on: degenerate groups left out, negatives scaled, suites balanced", async () => {
    const engine = make();
    // dr-grpo: reward minus the group's mean. Group 1's rewards are all equal (degenerate, filtered out).
    const groups = await onPolicyGroups(engine, [[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 1, 0]]);
    groups[0]!.forEach((s) => (s.suite = "a"));
    groups[1]!.forEach((s) => (s.suite = "a"));
    groups[2]!.forEach((s) => (s.suite = "b"));
    const m = await grpoUpdate(engine, undefined, groups, { ...hp, negativeAdvantageScale: 0.5, balanceSuites: true });
    expect(m.degenerateGroups).toBe(1);
    expect(m.advantages).toHaveLength(3);
    expect(m.advantages[1]).toBeNull();
    // Every completion has 8 trained tokens: suite a and suite b have 32 each, so balancing keeps the
    // scale at 64 / (2 x 32) = 1; the negatives are halved.
    expect(m.advantages[0]).toEqual([0.5, -0.25, -0.25, 0.5]);
    expect(m.advantages[2]!.map((x) => Math.round(x * 1e12) / 1e12)).toEqual([-0.125, -0.125, 0.75, -0.125]);
    // Unequal suites: suite a's 2 groups (the degenerate one kept) against suite b's 1 are scaled apart.
    const unfiltered = await grpoUpdate(make(), undefined, await onPolicyGroups(make(), [[1, 0, 0, 1], [1, 0, 1, 1], [0, 0, 1, 0]]).then((gs) => {
      gs[0]!.forEach((s) => (s.suite = "a"));
      gs[1]!.forEach((s) => (s.suite = "a"));
      gs[2]!.forEach((s) => (s.suite = "b"));
      return gs;
    }), { ...hp, balanceSuites: true });
    // 96 tokens in all, suite a 64, suite b 32: a's advantages x 96 / (2 x 64) = 0.75, b's x 96 / (2 x 32) = 1.5.
    expect(unfiltered.advantages[0]).toEqual([0.375, -0.375, -0.375, 0.375]);
    expect(unfiltered.advantages[2]!.map((x) => Math.round(x * 1e12) / 1e12)).toEqual([-0.375, -0.375, 1.125, -0.375]);
  });
});
