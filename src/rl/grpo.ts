/**
 * One GRPO update, top to bottom: group advantages -> reference log-probs -> E epochs of PPO-clip
 * steps on the engine (the "old" log-probs are those of epoch 0's own forward pass). Read it like a
 * cleanrl script: every step is here, in order.
 *
 * Input is plain data (token ids, loss masks, behaviour log-probs, rewards) grouped by task; the
 * engine does the forward/backward through the `Engine` primitives. This file knows no environment.
 */
import type { Engine, TokenLoss } from "../engine/index.js";
import { computeAdvantages, type AdvantageEstimator } from "./advantages.js";
import { countMask, policyLoss, type LossAggregation, type LossSequence } from "./policy-loss.js";
import { packedForwardBackward, packSharedPrefixes } from "./prefix-packing.js";

/** One sampled sequence, as the trainer needs it. */
export interface TrainSequence {
  /** Every token of the trajectory (prompt, sampled, environment). */
  tokens: number[];
  /** One entry per token: 1 where the policy sampled the token. */
  lossMask: Uint8Array;
  /** One entry per token: the sampler's log-prob of that token (0 where lossMask is 0). */
  behaviourLogprobs: Float32Array;
  reward: number;
  /** The policy version that sampled it (for staleness metrics). */
  policyVersion: number;
  /** What it came from (the pipeline passes the suite's name), for `balanceSuites`. */
  suite?: string;
  /**
   * One entry per token: 1 where the rollout's session pinned it (the attention mask's pinned positions);
   * every forward of the update (the policy's and the reference's) scores with these. Absent: none.
   */
  pinned?: Uint8Array;
}

export interface GrpoHparams {
  estimator: AdvantageEstimator;
  clipLow: number;
  clipHigh: number;
  aggregation: LossAggregation;
  klCoef: number;
  tisCap: number;
  epochs: number;
  lr: number;
  weightDecay: number;
  maxGradNorm: number;
  filterDegenerateGroups: boolean;
  /** Weight every suite's policy-gradient term equally (see `balanceSuiteAdvantages`); default false. */
  balanceSuites?: boolean;
  /** Multiplies every negative advantage (default 1); see the config field of the same name. */
  negativeAdvantageScale?: number;
  /** Sequences per forward/backward call (gradients accumulate across calls of one step). */
  microBatch: number;
  /**
   * Pack sequences sharing a prefix (a group's prompt) into one sequence with one copy of it (default
   * true; the same loss, fewer tokens).
   */
  packPrefixes?: boolean;
}

export interface GrpoStepMetrics {
  loss: number;
  kl: number;
  clipFraction: number;
  ratioMean: number;
  importanceWeightMean: number;
  /** The trainer's minus the sampler's log-prob on the sampled tokens (policy-loss.ts): mean and mean absolute value. */
  logprobGap: number;
  logprobGapAbs: number;
  entropyEstimate: number;
  gradNorm: number;
  trainedTokens: number;
  /** Tokens the engine computed for this update: old and reference log-probs, and every epoch. */
  engineTokens: number;
  sequences: number;
  degenerateGroups: number;
  groups: number;
  /** Mean (current version - sampling version) over the batch. */
  staleness: number;
  advantageAbsMean: number;
  /**
   * The advantages the loss used, one list per input group (one entry per sequence, in order): after
   * the negative ones were scaled and `balanceSuites` scaled each suite's; null for a group left out as
   * degenerate (`filterDegenerateGroups`).
   */
  advantages: (number[] | null)[];
}

/** Shifts per-token arrays to the engine's log-prob positions: entry t predicts token t+1. */
function shiftToPredictions(seq: TrainSequence): { mask: Uint8Array; behaviour: Float32Array } {
  const L = seq.tokens.length;
  if (seq.lossMask.length !== L || seq.behaviourLogprobs.length !== L) {
    throw new Error(`grpo: a sequence has ${L} tokens but a mask of ${seq.lossMask.length} and ${seq.behaviourLogprobs.length} behaviour log-probs`);
  }
  if (seq.lossMask[0]) throw new Error("grpo: the first token cannot be a sampled token (nothing predicts it)");
  if (seq.pinned && seq.pinned.length !== L) throw new Error(`grpo: a sequence has ${L} tokens but ${seq.pinned.length} pinned flags (one per token)`);
  return { mask: seq.lossMask.subarray(1), behaviour: seq.behaviourLogprobs.subarray(1) };
}

/**
 * Scales the advantages (in place) so that every suite's policy-gradient term weighs the same. The loss
 * weighs each trained token 1 / (tokens in the batch) (aggregation "token"), or each sequence 1 /
 * (sequences in the batch); a suite's advantages are multiplied by (batch total) / (suites x its own
 * total), so its tokens (sequences) weigh 1 / (suites x its own total). Scaling an advantage by a positive
 * factor leaves PPO's clipping decision unchanged; the KL term is not scaled. Sequences without a suite
 * form one suite of their own.
 */
export function balanceSuiteAdvantages(sequences: readonly TrainSequence[], advantages: number[], aggregation: LossAggregation): void {
  const units = sequences.map((s) => {
    const tokens = countMask(s.lossMask.subarray(1));
    return aggregation === "token" ? tokens : tokens > 0 ? 1 : 0;
  });
  const perSuite = new Map<string, number>();
  sequences.forEach((s, i) => perSuite.set(s.suite ?? "", (perSuite.get(s.suite ?? "") ?? 0) + units[i]!));
  const total = units.reduce((a, b) => a + b, 0);
  const suites = [...perSuite.values()].filter((n) => n > 0).length;
  sequences.forEach((s, i) => {
    const own = perSuite.get(s.suite ?? "")!;
    if (own > 0) advantages[i] = advantages[i]! * (total / (suites * own));
  });
}

/** Multiplies the negative advantages (in place) by `scale`, in (0, 1]; returns them. */
export function scaleNegativeAdvantages(advantages: number[], scale: number): number[] {
  if (!(scale > 0 && scale <= 1)) throw new Error(`grpo: negativeAdvantageScale must be in (0, 1], got ${scale}`);
  for (let i = 0; i < advantages.length; i++) if (advantages[i]! < 0) advantages[i]! *= scale;
  return advantages;
}

export async function grpoUpdate(
  engine: Engine,
  reference: Engine | undefined,
  groups: TrainSequence[][],
  hp: GrpoHparams,
): Promise<GrpoStepMetrics> {
  if (hp.klCoef > 0 && !reference) throw new Error("grpo: klCoef > 0 needs a reference engine");

  // 1. Advantages, one per sequence, relative to its group.
  const adv = computeAdvantages(
    groups.map((g) => g.map((s) => s.reward)),
    hp.estimator,
    { filterDegenerate: hp.filterDegenerateGroups },
  );
  const sequences: TrainSequence[] = [];
  const advantages: number[] = [];
  for (const g of adv.kept) {
    groups[g]!.forEach((s, i) => {
      sequences.push(s);
      advantages.push(adv.advantages[g]![i]!);
    });
  }
  scaleNegativeAdvantages(advantages, hp.negativeAdvantageScale ?? 1);
  if (hp.balanceSuites) balanceSuiteAdvantages(sequences, advantages, hp.aggregation);
  const trained: (number[] | null)[] = groups.map(() => null);
  let at = 0;
  for (const g of adv.kept) {
    trained[g] = advantages.slice(at, at + groups[g]!.length);
    at += groups[g]!.length;
  }
  const version = engine.policyVersion;
  const base = {
    advantages: trained,
    degenerateGroups: adv.degenerateGroups,
    groups: groups.length,
    sequences: sequences.length,
    staleness: groups.flat().reduce((a, s) => a + (version - s.policyVersion), 0) / Math.max(groups.flat().length, 1),
    advantageAbsMean: advantages.reduce((a, x) => a + Math.abs(x), 0) / Math.max(advantages.length, 1),
  };
  if (sequences.length === 0) {
    return { ...base, loss: 0, kl: 0, clipFraction: 0, ratioMean: 1, importanceWeightMean: 1, logprobGap: 0, logprobGapAbs: 0, entropyEstimate: 0, gradNorm: 0, trainedTokens: 0, engineTokens: 0 };
  }

  // 2. Log-probs of the reference. Those of the policy at the start of this update (the PPO "old"
  // policy) take no pass of their own: epoch 0's forward pass runs on exactly those weights, so each
  // micro-batch keeps the log-probs it computes there, for the ratio of this epoch and the later ones.
  const tokenLists = sequences.map((s) => s.tokens);
  const shifted = sequences.map(shiftToPredictions);
  const pinned = sequences.map((s) => s.pinned);
  /** The unpacked calls' masks: the predictions scored, and the pinned flags when any sequence has them. */
  const plainMasks = (from: number, to: number) => {
    const pins = pinned.slice(from, to);
    return {
      scored: shifted.slice(from, to).map((x) => x.mask),
      ...(pins.some((p) => p) ? { pinned: pins.map((p, i) => p ?? new Uint8Array(tokenLists[from + i]!.length)) } : {}),
    };
  };
  const pack = hp.packPrefixes !== false;
  let engineTokens = 0;
  let refLogprobs: Float32Array[] | undefined;
  if (hp.klCoef > 0) {
    const packing = pack ? packSharedPrefixes(tokenLists, shifted.map((x) => x.mask), pinned) : null;
    engineTokens += packing ? packing.tokensOut : tokenLists.reduce((n, t) => n + t.length, 0);
    refLogprobs = packing
      ? packing.unpack(await reference!.logprobs(packing.sequences, packing.masks))
      : await reference!.logprobs(tokenLists, plainMasks(0, tokenLists.length));
  }
  const lossSequences: LossSequence[] = shifted.map(({ mask, behaviour }, i) => (
    { mask, advantage: advantages[i]!, oldLogprobs: new Float32Array(0), behaviourLogprobs: behaviour, refLogprobs: refLogprobs?.[i] }
  ));
  const totalTokens = lossSequences.reduce((n, s) => n + countMask(s.mask), 0);

  // 3. E epochs; each is one optimizer step over the whole batch, accumulated over micro-batches.
  let last: Omit<GrpoStepMetrics, keyof typeof base> | undefined;
  for (let epoch = 0; epoch < hp.epochs; epoch++) {
    // Let the event loop run between epochs (signals, progress, the dashboard).
    await new Promise<void>((resolve) => setImmediate(resolve));
    let loss = 0;
    const sums = { kl: 0, clipFraction: 0, ratioMean: 0, importanceWeightMean: 0, logprobGap: 0, logprobGapAbs: 0, entropyEstimate: 0 };
    for (let start = 0; start < lossSequences.length; start += hp.microBatch) {
      const micro = lossSequences.slice(start, start + hp.microBatch);
      const microTokens = micro.reduce((n, s) => n + countMask(s.mask), 0);
      const microSeqs = micro.filter((s) => countMask(s.mask) > 0).length;
      // Scale so that the micro-batch losses add up to the loss of the whole batch.
      const scale = hp.aggregation === "token" ? microTokens / Math.max(totalTokens, 1) : microSeqs / Math.max(lossSequences.filter((s) => countMask(s.mask) > 0).length, 1);
      const firstEpoch = epoch === 0;
      const microLoss: TokenLoss = (lp) => {
        if (firstEpoch) micro.forEach((s, i) => (s.oldLogprobs = Float32Array.from(lp[i]!)));
        const r = policyLoss(lp, micro, hp);
        return { loss: r.loss * scale, dLogprobs: r.dLogprobs.map((d) => d.map((x) => x * scale)), metrics: r.metrics };
      };
      const microSeqList = tokenLists.slice(start, start + hp.microBatch);
      const result = pack
        ? await packedForwardBackward(engine, microSeqList, micro.map((s) => s.mask), microLoss, pinned.slice(start, start + hp.microBatch))
        : await engine.forwardBackward(microSeqList, microLoss, plainMasks(start, start + hp.microBatch));
      engineTokens += result.metrics.tokens ?? 0;
      loss += result.loss;
      for (const key of Object.keys(sums) as (keyof typeof sums)[]) sums[key] += (result.metrics[key] ?? 0) * (microTokens / Math.max(totalTokens, 1));
    }
    const { gradNorm } = await engine.optimStep({ lr: hp.lr, weightDecay: hp.weightDecay, maxGradNorm: hp.maxGradNorm });
    last = { loss, ...sums, gradNorm, trainedTokens: totalTokens, engineTokens };
  }
  return { ...base, ...last! };
}
