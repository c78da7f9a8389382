/**
 * Token sampling from one row of logits: temperature, top-k, top-p (nucleus), greedy at temperature 0,
 * and the log-probability of the chosen token under the distribution actually sampled from (after
 * temperature and truncation, renormalized). At temperature 1 with no truncation that is exactly
 * log_softmax(logits)[token], the teacher-forced log-prob.
 *
 * This file does not run the model and keeps no state besides reusable scratch buffers.
 */
import type { SampleParams } from "./types.js";
import type { Rng } from "../model/random.js";

export class SampleParamsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SampleParamsError";
  }
}

export interface ResolvedSampleParams {
  temperature: number;
  topP: number;
  topK: number;
  maxTokens: number;
  stopTokens: Set<number>;
  seed: number | undefined;
}

export function resolveSampleParams(p: SampleParams): ResolvedSampleParams {
  const r = {
    temperature: p.temperature ?? 1,
    topP: p.topP ?? 1,
    topK: p.topK ?? 0,
    maxTokens: p.maxTokens,
    stopTokens: new Set(p.stopTokens ?? []),
    seed: p.seed,
  };
  if (!(Number.isFinite(r.temperature) && r.temperature >= 0)) {
    throw new SampleParamsError(`temperature must be >= 0 (0 = greedy); got ${p.temperature}`);
  }
  if (!(r.topP > 0 && r.topP <= 1)) throw new SampleParamsError(`topP must be in (0, 1]; got ${p.topP}`);
  if (!(Number.isInteger(r.topK) && r.topK >= 0)) throw new SampleParamsError(`topK must be an integer >= 0 (0 = off); got ${p.topK}`);
  if (!(Number.isInteger(r.maxTokens) && r.maxTokens >= 0)) {
    throw new SampleParamsError(`maxTokens must be an integer >= 0; got ${p.maxTokens}`);
  }
  return r;
}

/** Samples tokens from logits rows; holds scratch space for a vocabulary of V. */
export class Sampler {
  private readonly probs: Float64Array;
  private readonly order: Int32Array;

  constructor(readonly V: number) {
    this.probs = new Float64Array(V);
    this.order = new Int32Array(V);
  }

  /** Picks a token from logits [V]; returns it with its log-prob under the sampling distribution. */
  sample(logits: Float32Array, p: ResolvedSampleParams, rng: Rng): { token: number; logprob: number } {
    const V = this.V;
    if (p.temperature === 0) {
      let best = 0;
      for (let i = 1; i < V; i++) if (logits[i]! > logits[best]!) best = i;
      return { token: best, logprob: 0 };
    }
    const invT = 1 / p.temperature;
    let mx = -Infinity;
    for (let i = 0; i < V; i++) mx = Math.max(mx, logits[i]! * invT);
    const probs = this.probs;
    let Z = 0;
    for (let i = 0; i < V; i++) {
      const e = Math.exp(logits[i]! * invT - mx);
      probs[i] = e;
      Z += e;
    }
    const truncate = (p.topK > 0 && p.topK < V) || p.topP < 1;
    if (!truncate) {
      let u = rng.uniform() * Z;
      let tok = V - 1;
      for (let i = 0; i < V; i++) {
        u -= probs[i]!;
        if (u < 0) {
          tok = i;
          break;
        }
      }
      while (probs[tok] === 0 && tok > 0) tok--;
      return { token: tok, logprob: logits[tok]! * invT - mx - Math.log(Z) };
    }
    // Candidates in descending probability (ties by id), cut by top-k then top-p. Only tokens at or above
    // a threshold are sorted: the threshold is lowered until those tokens hold the top-p mass and number
    // at least top-k (or all tokens), so the kept set is exactly the one a full sort would give.
    const order = this.order;
    const wantK = p.topK > 0 ? Math.min(p.topK, V) : 0;
    const wantMass = p.topP * Z;
    let n = 0;
    for (let shift = 8; ; shift += 8) {
      const tau = shift >= 1000 ? 0 : 2 ** -shift; // probs are relative to the largest, which is 1
      n = 0;
      let mass = 0;
      for (let i = 0; i < V; i++) {
        if (probs[i]! >= tau) {
          order[n++] = i;
          mass += probs[i]!;
        }
      }
      if (tau === 0 || (wantK > 0 ? n >= wantK : mass >= wantMass)) break;
    }
    const cand = order.subarray(0, n);
    cand.sort((a, b) => probs[b]! - probs[a]! || a - b);
    let keep = wantK > 0 ? Math.min(wantK, n) : n;
    if (p.topP < 1) {
      // top-p over the distribution left by top-k, renormalized (as transformers and vLLM do)
      let cum = 0;
      let massK = Z;
      if (wantK > 0) {
        massK = 0;
        for (let i = 0; i < keep; i++) massK += probs[order[i]!]!;
      }
      const target = p.topP * massK;
      for (let i = 0; i < keep; i++) {
        cum += probs[order[i]!]!;
        if (cum >= target) {
          keep = i + 1;
          break;
        }
      }
    }
    let Zk = 0;
    for (let i = 0; i < keep; i++) Zk += probs[order[i]!]!;
    let u = rng.uniform() * Zk;
    let tok = order[keep - 1]!;
    for (let i = 0; i < keep; i++) {
      u -= probs[order[i]!]!;
      if (u < 0) {
        tok = order[i]!;
        break;
      }
    }
    return { token: tok, logprob: Math.log(probs[tok]! / Zk) };
  }
}
