/**
 * The policy loss over teacher-forced log-probs, with its gradient d(loss)/d(logprobs).
 *
 * Per sampled token t of sequence s (mask = 1):
 *   ratio      r  = exp(logp - oldLogp)                      (PPO ratio against the batch's start policy)
 *   clipped       = clip(r, 1 - clipLow, 1 + clipHigh)
 *   policy term   = -min(r * A_s, clipped * A_s)
 *   importance w  = min(exp(oldLogp - behaviourLogp), tisCap) (truncated importance correction, constant)
 *   KL term       = klCoef * (exp(ref - logp) - (ref - logp) - 1)   (the k3 estimator)
 *   loss_t        = w * policy term + KL term
 * Aggregation: "token" averages loss_t over every sampled token of the batch; "sequence" averages each
 * sequence's tokens, then the sequences.
 *
 * The engine calls `TokenLoss` with the current log-probs; this file only does arithmetic on arrays.
 */

export type LossAggregation = "token" | "sequence";

export interface PolicyLossConfig {
  clipLow: number;
  clipHigh: number;
  aggregation: LossAggregation;
  /** Coefficient of the k3 KL to the reference policy; 0 disables it. */
  klCoef: number;
  /** Cap of the truncated importance weight exp(old - behaviour); Infinity = no cap; 0 disables correction. */
  tisCap: number;
}

/** One sequence of the batch, aligned with the engine's teacher-forced log-probs (length L-1 for L tokens). */
export interface LossSequence {
  /** 1 where the token was sampled by the policy (trained on), 0 elsewhere. */
  mask: Uint8Array;
  advantage: number;
  /** Log-probs of the policy at the start of this batch's optimization (for the PPO ratio). */
  oldLogprobs: Float32Array;
  /** Log-probs the sampler reported (may be from an older policy version). */
  behaviourLogprobs: Float32Array;
  /** Log-probs of the frozen reference policy (required when klCoef > 0). */
  refLogprobs?: Float32Array;
}

export interface PolicyLossResult {
  loss: number;
  dLogprobs: Float32Array[];
  metrics: {
    /** Fraction of tokens whose ratio was clipped (gradient stopped). */
    clipFraction: number;
    /** Mean k3 KL to the reference over trained tokens (0 when disabled). */
    kl: number;
    /** Mean policy ratio. */
    ratioMean: number;
    /** Mean truncated importance weight. */
    importanceWeightMean: number;
    /**
     * The trainer's log-prob minus the sampler's on the sampled tokens, mean and mean absolute value:
     * oldLogp - behaviourLogp, the log of the importance weight before truncation (0 when the sampler
     * computes exactly what the trainer does on the same weights).
     */
    logprobGap: number;
    logprobGapAbs: number;
    /** Mean negative log-prob of the sampled tokens (an entropy estimate). */
    entropyEstimate: number;
    tokens: number;
  };
}

export function policyLoss(logprobs: Float32Array[], batch: LossSequence[], cfg: PolicyLossConfig): PolicyLossResult {
  if (logprobs.length !== batch.length) {
    throw new Error(`policyLoss: got ${logprobs.length} log-prob rows for ${batch.length} sequences`);
  }
  const totalTokens = batch.reduce((n, s) => n + countMask(s.mask), 0);
  const sequencesWithTokens = batch.filter((s) => countMask(s.mask) > 0).length;
  let loss = 0;
  let clipped = 0;
  let klSum = 0;
  let ratioSum = 0;
  let weightSum = 0;
  let gapSum = 0;
  let gapAbsSum = 0;
  let nllSum = 0;
  const dLogprobs: Float32Array[] = [];

  batch.forEach((seq, s) => {
    const lp = logprobs[s]!;
    const n = seq.mask.length;
    if (lp.length !== n || seq.oldLogprobs.length !== n || seq.behaviourLogprobs.length !== n) {
      throw new Error(`policyLoss: sequence ${s} has mismatched lengths (logprobs ${lp.length}, mask ${n}, old ${seq.oldLogprobs.length}, behaviour ${seq.behaviourLogprobs.length})`);
    }
    if (cfg.klCoef > 0 && (!seq.refLogprobs || seq.refLogprobs.length !== n)) {
      throw new Error(`policyLoss: sequence ${s} needs reference log-probs of length ${n} when klCoef > 0`);
    }
    const d = new Float32Array(n);
    const seqTokens = countMask(seq.mask);
    // Per-token normalizer of this sequence's contribution.
    const norm = cfg.aggregation === "token" ? 1 / Math.max(totalTokens, 1) : 1 / (Math.max(seqTokens, 1) * Math.max(sequencesWithTokens, 1));
    const A = seq.advantage;
    for (let t = 0; t < n; t++) {
      if (!seq.mask[t]) continue;
      const logp = lp[t]!;
      const ratio = Math.exp(logp - seq.oldLogprobs[t]!);
      const clippedRatio = Math.min(Math.max(ratio, 1 - cfg.clipLow), 1 + cfg.clipHigh);
      const unclippedObj = ratio * A;
      const clippedObj = clippedRatio * A;
      const gap = seq.oldLogprobs[t]! - seq.behaviourLogprobs[t]!;
      const w = cfg.tisCap > 0 ? Math.min(Math.exp(gap), cfg.tisCap) : 1;
      let tokenLoss: number;
      let dToken: number;
      if (unclippedObj <= clippedObj) {
        // The unclipped objective is the min: the gradient flows through the ratio.
        tokenLoss = -w * unclippedObj;
        dToken = -w * unclippedObj; // d(ratio)/d(logp) = ratio
      } else {
        tokenLoss = -w * clippedObj;
        dToken = 0;
        clipped++;
      }
      if (cfg.klCoef > 0) {
        const diff = seq.refLogprobs![t]! - logp;
        const e = Math.exp(diff);
        const kl = e - diff - 1;
        tokenLoss += cfg.klCoef * kl;
        dToken += cfg.klCoef * (1 - e); // d/dlogp of e^(ref-logp) - (ref-logp) - 1
        klSum += kl;
      }
      loss += norm * tokenLoss;
      d[t] = norm * dToken;
      ratioSum += ratio;
      weightSum += w;
      gapSum += gap;
      gapAbsSum += Math.abs(gap);
      nllSum -= logp;
    }
    dLogprobs.push(d);
  });
  const T = Math.max(totalTokens, 1);
  return {
    loss,
    dLogprobs,
    metrics: {
      clipFraction: clipped / T,
      kl: klSum / T,
      ratioMean: ratioSum / T,
      importanceWeightMean: weightSum / T,
      logprobGap: gapSum / T,
      logprobGapAbs: gapAbsSum / T,
      entropyEstimate: nllSum / T,
      tokens: totalTokens,
    },
  };
}

/** Supervised loss: mean negative log-likelihood over masked tokens (per token over the batch). */
export function sftLoss(logprobs: Float32Array[], masks: Uint8Array[]): { loss: number; dLogprobs: Float32Array[]; metrics: { tokens: number } } {
  const total = masks.reduce((n, m) => n + countMask(m), 0);
  const norm = 1 / Math.max(total, 1);
  let loss = 0;
  const dLogprobs = logprobs.map((lp, s) => {
    const m = masks[s]!;
    if (m.length !== lp.length) throw new Error(`sftLoss: sequence ${s} has ${lp.length} log-probs but a mask of ${m.length}`);
    const d = new Float32Array(lp.length);
    for (let t = 0; t < lp.length; t++) {
      if (!m[t]) continue;
      loss -= norm * lp[t]!;
      d[t] = -norm;
    }
    return d;
  });
  return { loss, dLogprobs, metrics: { tokens: total } };
}

export function countMask(mask: Uint8Array): number {
  let n = 0;
  for (let i = 0; i < mask.length; i++) n += mask[i]! ? 1 : 0;
  return n;
}
