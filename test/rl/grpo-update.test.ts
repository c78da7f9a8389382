// The direction of a GRPO update, end to end through a real (tiny) model: on-policy groups with mixed
// rewards, then one update; the rewarded sequences become more likely and the others less likely.
// A group whose rewards are all equal teaches nothing and leaves the weights as they were.
import { describe, expect, it } from "vitest";
import { createRandomModel, type EmbeddedEngine } from "../../src/engine/embedded.js";
import { grpoUpdate, type GrpoHparams, type TrainSequence } from "../../src/rl/grpo.js";
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

  it("leaves the weights unchanged when every group's rewards are equal", async () => {
    const engine = make();
    const groups = await onPolicyGroups(engine, [[1, 1, 1, 1], [0, 0, 0, 0]]);
    const weights = Float32Array.from(engine.weights.data);
    const m = await grpoUpdate(engine, undefined, groups, hp);
    expect(m.degenerateGroups).toBe(2);
    expect(m.trainedTokens).toBe(0);
    expect(engine.weights.data).toEqual(weights);
  });
});
