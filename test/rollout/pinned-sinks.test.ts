// Secondary attention sinks pinned end to end: a multi-turn group (shared prompt, forked sessions) played
// under a sink window with a pin rule (a chat-template special token, the run's token sink) records the
// pinned flags the sessions were given, equal to attention's `sequencePins` of the tokens; the behaviour
// log-probs equal the teacher-forced ones under those flags (1e-5, fp32) with pins far beyond the window,
// and GRPO's update scores the policy and the reference with the same flags, as SFT does (packed and
// unpacked).
import { describe, expect, it } from "vitest";
import { countPins, pinFlags, sequencePins, type SinkPinRule } from "../../src/attention/index.js";
import { createRandomModel, type EmbeddedEngine } from "../../src/engine/embedded.js";
import { parseHfConfig } from "../../src/model/config.js";
import { grpoUpdate, sftTrain, type GrpoHparams, type SftExample, type TrainSequence } from "../../src/rl/index.js";
import { checkTrajectory, Rollout, trajectoryToJSON, type Trajectory } from "../../src/rollout/index.js";
import { groupTask, stockCodec, template } from "./helpers.js";

const codec = stockCodec();
// Weights small enough that fp32 rounding stays below 1e-5 in the log-probs (at std 0.5 it reaches 2e-5).
const STD = 0.3;
const MASK = { sinks: 4, window: 24 };
const IM_START = codec.encode("<|im_start|>");

function engineOf(seed: number): EmbeddedEngine {
  const cfg = parseHfConfig({
    architectures: ["Qwen2ForCausalLM"], model_type: "qwen2", hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4,
    num_key_value_heads: 2, intermediate_size: 128, vocab_size: codec.size, rms_norm_eps: 1e-6, rope_theta: 10000,
    max_position_embeddings: 8192, tie_word_embeddings: true,
  });
  return createRandomModel(cfg, seed, { std: STD, attention: MASK });
}

/** The largest |behaviour - teacher-forced| over the sampled tokens of a segment, scored with `pinned` (or none). */
async function worstGap(engine: EmbeddedEngine, seg: Trajectory["segments"][number], pinned: Uint8Array | undefined): Promise<number> {
  const [lp] = await engine.logprobs([seg.tokens], pinned ? { pinned: [pinned] } : undefined);
  let worst = 0;
  for (let i = 1; i < seg.tokens.length; i++) if (seg.lossMask[i]) worst = Math.max(worst, Math.abs(seg.behaviourLogprobs[i]! - lp![i - 1]!));
  return worst;
}

describe("pinned secondary sinks in rollout and training", () => {
  it("the rollout pins the rule's tokens in every append, records them, and its log-probs equal the teacher-forced ones under them", async () => {
    expect(IM_START).toHaveLength(1);
    const rule: SinkPinRule = { tokenIds: IM_START, budget: 5, slots: MASK.sinks };
    const engine = engineOf(3);
    const rollout = new Rollout(engine, codec, template, {
      maxTokensPerTurn: 6, turnLimit: "close", maxTurns: 20, seed: 11, pins: (t, s, b) => pinFlags(rule, t, s, b),
    });
    const trajs = await rollout.runGroup(groupTask(0, 2, 4));
    await rollout.close();
    expect(rollout.stats.groupPrefills).toBe(1); // one shared prompt, forked for both members
    for (const t of trajs) {
      expect(t.endReason, t.error).toBe("terminated");
      expect(t.turns.length).toBeGreaterThanOrEqual(4);
      checkTrajectory(t);
      const seg = t.segments[0]!;
      expect(seg.pinned).toBeDefined();
      // the one function on both sides: the recorded flags are those the tokens and the sampled mask give
      expect([...seg.pinned!]).toEqual([...sequencePins(rule, seg.tokens, seg.lossMask)]);
      expect(countPins(seg.pinned!)).toBe(rule.budget);
      const pinnedAt = [...seg.pinned!.keys()].filter((i) => seg.pinned![i]);
      for (const p of pinnedAt) expect(seg.tokens[p]).toBe(IM_START[0]);
      expect(pinnedAt[0]).toBeGreaterThanOrEqual(MASK.sinks);
      // pinned keys far older than the window when the last turn samples
      expect(t.turns[t.turns.length - 1]!.sampleStart - pinnedAt[0]!).toBeGreaterThan(2 * MASK.window);
      // some pins came in with later turns' appends, not only with the shared prompt
      expect(pinnedAt[pinnedAt.length - 1]!).toBeGreaterThan(t.turns[0]!.sampleEnd);
      expect(await worstGap(engine, seg, seg.pinned)).toBeLessThan(1e-5);
      // the pins matter: scored without them, the sampled tokens' log-probs differ
      expect(await worstGap(engine, seg, undefined)).toBeGreaterThan(1e-3);
      expect(JSON.parse(JSON.stringify(trajectoryToJSON(t))).segments[0].pinned).toEqual([...seg.pinned!]);
    }
    // GRPO: the epoch's old log-probs (the policy's forward) equal the behaviour ones (importance weight
    // 1), and the reference (same weights) scores what the policy does (KL 0), only with the flags.
    const hp: GrpoHparams = {
      estimator: "grpo", clipLow: 0.2, clipHigh: 0.2, aggregation: "token", klCoef: 0.04, tisCap: 1e9, epochs: 1, lr: 0, weightDecay: 0,
      maxGradNorm: 1, filterDegenerateGroups: false, microBatch: 8,
    };
    const group = (withPins: boolean): TrainSequence[] => trajs.map((t, i) => {
      const s = t.segments[0]!;
      return { tokens: s.tokens, lossMask: s.lossMask, behaviourLogprobs: s.behaviourLogprobs, reward: i, policyVersion: 0, ...(withPins ? { pinned: s.pinned } : {}) };
    });
    const reference = engineOf(3);
    for (const packPrefixes of [true, false]) {
      const m = await grpoUpdate(engine, reference, [group(true)], { ...hp, packPrefixes });
      expect(m.trainedTokens).toBeGreaterThan(20);
      expect(Math.abs(m.importanceWeightMean - 1), `packPrefixes ${packPrefixes}`).toBeLessThan(1e-5);
      expect(m.kl).toBeLessThan(1e-9);
      // without the flags the trainer scores other keys than the sampler kept
      const off = await grpoUpdate(engine, reference, [group(false)], { ...hp, packPrefixes });
      expect(Math.abs(off.importanceWeightMean - 1)).toBeGreaterThan(1e-4);
    }
    // SFT on the same tokens: its loss is the mean NLL of the teacher-forced log-probs under the flags.
    const examples: SftExample[] = trajs.map((t) => ({ tokens: t.segments[0]!.tokens, lossMask: t.segments[0]!.lossMask, pinned: t.segments[0]!.pinned }));
    let nll = 0;
    let count = 0;
    for (const ex of examples) {
      const [lp] = await engine.logprobs([ex.tokens], { pinned: [ex.pinned!] });
      for (let i = 1; i < ex.tokens.length; i++) if (ex.lossMask[i]) [nll, count] = [nll - lp![i - 1]!, count + 1];
    }
    const sftHp = { epochs: 1, batchSize: 2, lr: 0, weightDecay: 0, maxGradNorm: 1, seed: 0, microBatch: 2 };
    for (const packPrefixes of [true, false]) {
      const [step] = await sftTrain(engine, examples, { ...sftHp, packPrefixes });
      expect(Math.abs(step!.loss - nll / count), `packPrefixes ${packPrefixes}`).toBeLessThan(1e-5);
      const [plain] = await sftTrain(engine, examples.map(({ pinned: _, ...ex }) => ex), { ...sftHp, packPrefixes });
      expect(Math.abs(plain!.loss - nll / count)).toBeGreaterThan(1e-4);
    }
    engine.dispose();
    reference.dispose();
  }, 240_000);

  it("first come, first pinned: a sequence appended in parts gets the flags of appending it whole", () => {
    const rule: SinkPinRule = { tokenIds: [5, 9], budget: 3, slots: 2 };
    const tokens = [5, 9, 1, 5, 2, 9, 9, 5, 5];
    const whole = pinFlags(rule, tokens, 0, 0);
    expect([...whole]).toEqual([0, 0, 0, 1, 0, 1, 1, 0, 0]);
    const a = pinFlags(rule, tokens.slice(0, 4), 0, 0);
    const b = pinFlags(rule, tokens.slice(4), 4, countPins(a));
    expect([...a, ...b]).toEqual([...whole]);
    // sampled tokens are never pinned, and the budget counts only appended ones
    expect([...sequencePins(rule, tokens, [0, 0, 0, 1, 0, 0, 0, 0, 0])]).toEqual([0, 0, 0, 0, 0, 1, 1, 1, 0]);
    expect(() => sequencePins(rule, tokens, [0])).toThrow(/1 sampled flags for 9 tokens/);
  });
});
