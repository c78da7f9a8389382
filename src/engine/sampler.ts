/**
 * Token sampling from one row of logits: temperature, top-k, top-p (nucleus), greedy at temperature 0,
 * and the log-probability of the chosen token under the distribution actually sampled from (after
 * temperature and truncation, renormalized). At temperature 1 with no truncation that is exactly
 * log_softmax(logits)[token], the teacher-forced log-prob.
 *
 * Only ids below `usable` are ever sampled: a checkpoint's embedding may have more rows than its
 * tokenizer has ids (Qwen2.5 and Qwen3 pad 151665 ids to 151936 rows), and those padding rows are
 * excluded from every distribution here, as if their logits were -Infinity.
 *
 * This file does not run the model and keeps no state besides reusable scratch buffers.
 */
import type { SampleParams } from "./types.js";
import type { Rng } from "../core/index.js";

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

/**
 * The first index i at which mass[0] + ... + mass[i] exceeds u; when rounding leaves u beyond the total,
 * the last index with mass.
 */
function inverseCdf(mass: ArrayLike<number>, V: number, u: number): number {
  for (let i = 0; i < V; i++) {
    u -= mass[i]!;
    if (u < 0) return i;
  }
  let tok = V - 1;
  while (mass[tok] === 0 && tok > 0) tok--;
  return tok;
}

const BINS_PER_NAT = 256;
const NUM_BINS = 256 * 24;

/** Samples tokens from logits rows; holds scratch space for a vocabulary of V. */
export class Sampler {
  private readonly probs: Float64Array;
  private readonly probs32: Float32Array;
  private readonly order: Int32Array;

  private readonly bins: Int32Array;
  private readonly binMass = new Float64Array(NUM_BINS);
  private readonly binCount = new Int32Array(NUM_BINS);

  /**
   * `softmax` (a kernel set's `softmaxRows`), when given, computes the probabilities of plain temperature
   * sampling (no top-k / top-p); without it the sampler computes them itself.
   */
  /** Ids below this are sampled; the rest (padding rows of the embedding) never are. Default V. */
  private usableIds: number;

  constructor(
    readonly V: number,
    private readonly softmax?: (N: number, V: number, temperature: number, x: Float32Array, out: Float32Array) => void,
  ) {
    this.usableIds = V;
    this.probs = new Float64Array(V);
    this.probs32 = new Float32Array(softmax ? V : 0);
    this.order = new Int32Array(V);
    this.bins = new Int32Array(V);
  }

  /** The ids that may be sampled: 0 .. usable-1 (the tokenizer's ids); rows past them are padding. */
  get usable(): number {
    return this.usableIds;
  }

  set usable(n: number) {
    if (!(Number.isInteger(n) && n >= 1 && n <= this.V)) {
      throw new SampleParamsError(`usable ids must be an integer in [1, ${this.V}] (the embedding's rows); got ${n}`);
    }
    this.usableIds = n;
  }

  /** Plain temperature sampling from the kernels' softmax: the inverse of the cumulative distribution at u. */
  private sampleSoftmax(logits: Float32Array, temperature: number, rng: Rng): { token: number; logprob: number } {
    const V = this.usableIds;
    const q = this.probs32;
    this.softmax!(1, V, temperature, logits, q);
    const tok = inverseCdf(q, V, rng.uniform());
    return { token: tok, logprob: Math.log(q[tok]!) };
  }

  /** Puts the ids of bin b into order[0..n), by descending probability (ties by ascending id); returns n. */
  private sortBin(b: number, V: number): number {
    const { bins, order, probs } = this;
    let n = 0;
    for (let i = 0; i < V; i++) if (bins[i] === b) order[n++] = i;
    order.subarray(0, n).sort((x, y) => probs[y]! - probs[x]! || x - y);
    return n;
  }

  /** Picks a token from logits [V]; returns it with its log-prob under the sampling distribution. */
  sample(logits: Float32Array, p: ResolvedSampleParams, rng: Rng): { token: number; logprob: number } {
    // Every loop below runs over the usable ids only: padding rows get no probability.
    const V = this.usableIds;
    if (p.temperature === 0) {
      let best = 0;
      let bestLogit = logits[0]!;
      for (let i = 1; i < V; i++) {
        const x = logits[i]!;
        if (x > bestLogit) {
          bestLogit = x;
          best = i;
        }
      }
      return { token: best, logprob: 0 };
    }
    const truncate = (p.topK > 0 && p.topK < V) || p.topP < 1;
    if (!truncate && this.softmax) return this.sampleSoftmax(logits, p.temperature, rng);
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
    if (!truncate) {
      const tok = inverseCdf(probs, V, rng.uniform() * Z);
      return { token: tok, logprob: logits[tok]! * invT - mx - Math.log(Z) };
    }
    // Top-k, then top-p over the renormalized top-k distribution. Tokens are binned by log-probability
    // (bins 1/256 nat wide, from the largest down); whole bins above a cut are kept, and only the bin the
    // cut falls in is sorted, so the kept set is exactly what a full sort would give, at O(V) cost.
    const { bins, binMass, binCount, order } = this;
    binMass.fill(0);
    binCount.fill(0);
    const last = NUM_BINS - 1;
    for (let i = 0; i < V; i++) {
      const b = Math.min(last, Math.floor((mx - logits[i]! * invT) * BINS_PER_NAT));
      bins[i] = b;
      binMass[b]! += probs[i]!;
      binCount[b]!++;
    }
    // cutBin: bins below it are kept whole; `partial` (sorted, descending) holds what is kept of cutBin.
    let cutBin = NUM_BINS;
    let partial = 0;
    let keptMass = Z;
    if (p.topK > 0 && p.topK < V) {
      let count = 0;
      let mass = 0;
      for (let b = 0; b < NUM_BINS; b++) {
        if (count + binCount[b]! >= p.topK) {
          cutBin = b;
          this.sortBin(b, V);
          partial = p.topK - count;
          for (let j = 0; j < partial; j++) mass += probs[order[j]!]!;
          break;
        }
        count += binCount[b]!;
        mass += binMass[b]!;
      }
      keptMass = mass;
    }
    if (p.topP < 1) {
      const target = p.topP * keptMass;
      let cum = 0;
      for (let b = 0; b <= Math.min(cutBin, last); b++) {
        const whole = b < cutBin;
        const m = whole ? binMass[b]! : 0;
        if (whole && cum + m < target) {
          cum += m;
          continue;
        }
        // the cut falls in bin b: keep its tokens in descending order until the mass is reached
        const n = whole ? this.sortBin(b, V) : partial;
        let j = 0;
        while (j < n) {
          cum += probs[order[j]!]!;
          j++;
          if (cum >= target) break;
        }
        cutBin = b;
        partial = j;
        break;
      }
    }
    let Zk = 0;
    for (let i = 0; i < V; i++) if (bins[i]! < cutBin) Zk += probs[i]!;
    for (let j = 0; j < partial; j++) Zk += probs[order[j]!]!;
    let u = rng.uniform() * Zk;
    let tok = -1;
    for (let i = 0; i < V && tok < 0; i++) {
      if (bins[i]! < cutBin) {
        u -= probs[i]!;
        if (u < 0) tok = i;
      }
    }
    for (let j = 0; j < partial && tok < 0; j++) {
      u -= probs[order[j]!]!;
      if (u < 0 || j === partial - 1) tok = order[j]!;
    }
    if (tok < 0) {
      // rounding left u >= 0 after every kept token: take the last kept whole-bin token
      for (let i = V - 1; i >= 0 && tok < 0; i--) if (bins[i]! < cutBin) tok = i;
    }
    return { token: tok, logprob: Math.log(probs[tok]! / Zk) };
  }
}
