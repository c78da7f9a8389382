/**
 * The sink probe: runs a model over token sequences with full causal attention and measures, for a
 * sample of query rows per layer and head, the attention mass each key receives:
 *
 *   α(l, h, k) = mean over sampled queries i >= k + δ of A_lh[i, k]
 *
 * A head depends on key k when α >= threshold (0.3); k is a sink of layer l when at least headFraction
 * (a quarter) of the layer's heads depend on it. Position sinks are measured on α averaged over all
 * sequences (per position); token sinks are keys that are sinks in their own sequence at positions that
 * are not position sinks, grouped by token id.
 *
 * The attention probabilities are rebuilt from the forward's own activations (post-RoPE q and k, and the
 * per-row log-sum-exp the attention kernel keeps): A[i, k] = exp(scale * q_i . k_k - lse_i). So the probe
 * needs no change to the kernels. It is not a training tool and keeps nothing of the model.
 *
 * Shapes: T sequence length, H query heads, KVH kv heads, D head size, L layers.
 */
import { packSequences, trainForward, TrainWorkspace, type Model } from "../model/index.js";
import { SINK_PROFILE_FORMAT, type LayerSinks, type SinkProfile, type TokenSink } from "./profile.js";

export interface ProbeOptions {
  /** δ: queries at least this many positions after the key. Default 64. */
  delta?: number;
  /** Dependence threshold on α. Default 0.3. */
  threshold?: number;
  /** Fraction of a layer's heads that must depend on a key for it to be a sink. Default 0.25. */
  headFraction?: number;
  /** Query rows sampled per sequence (evenly spaced over [δ, T)). Default 256. */
  queries?: number;
  /** Entries of the natural prefix recorded in the profile. Default 8. */
  prefixLength?: number;
  /** Description of the model for the profile. Default "model". */
  model?: string;
}

export class ProbeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProbeError";
  }
}

/** Sampled query rows: up to `n` positions evenly spaced over [from, T). */
function queryRows(from: number, T: number, n: number): number[] {
  const span = T - from;
  if (span <= 0) return [];
  if (span <= n) return Array.from({ length: span }, (_, i) => from + i);
  return Array.from({ length: n }, (_, i) => from + Math.floor(((i + 0.5) * span) / n));
}

/**
 * α of one sequence: alpha [L, H, T] (mass sums) and count [T] (queries that counted for each key),
 * from a full-attention forward.
 */
export function attentionMass(
  model: Model, ws: TrainWorkspace, tokens: number[], delta: number, queries: number,
): { sum: Float64Array; count: Float64Array } {
  const { numLayers: L, numHeads: H, numKvHeads: KVH, headDim: D } = model.cfg;
  const T = tokens.length;
  const full: Model = { ...model, attention: { window: 0, sinks: 0 } };
  const batch = packSequences([tokens]);
  trainForward(full, ws, batch, false);
  const Q = H * D;
  const KV = KVH * D;
  const group = H / KVH;
  const scale = 1 / Math.sqrt(D);
  const rows = queryRows(delta, T, queries);
  const sum = new Float64Array(L * H * T);
  const count = new Float64Array(T);
  for (const i of rows) for (let k = 0; k <= i - delta; k++) count[k]!++;
  for (let l = 0; l < L; l++) {
    const a = ws.layers[l]!;
    for (const i of rows) {
      const last = i - delta;
      for (let h = 0; h < H; h++) {
        const qo = i * Q + h * D;
        const kvh = Math.floor(h / group);
        const lse = a.lse[i * H + h]!;
        const base = (l * H + h) * T;
        for (let k = 0; k <= last; k++) {
          const ko = k * KV + kvh * D;
          let dot = 0;
          for (let d = 0; d < D; d++) dot += a.q[qo + d]! * a.k[ko + d]!;
          sum[base + k]! += Math.exp(dot * scale - lse);
        }
      }
    }
  }
  return { sum, count };
}

/** Probes `sequences` (token ids of the model's vocabulary) and returns the model's SinkProfile. */
export function probeSinks(model: Model, sequences: number[][], opts: ProbeOptions = {}): SinkProfile {
  const delta = opts.delta ?? 64;
  const threshold = opts.threshold ?? 0.3;
  const headFraction = opts.headFraction ?? 0.25;
  const queries = opts.queries ?? 256;
  const prefixLength = opts.prefixLength ?? 8;
  if (!(Number.isInteger(delta) && delta >= 0)) throw new ProbeError(`delta must be an integer >= 0, got ${delta}`);
  if (!(Number.isInteger(queries) && queries >= 1)) throw new ProbeError(`queries must be an integer >= 1, got ${queries}`);
  const usable = sequences.filter((s) => s.length > delta);
  if (usable.length === 0) {
    throw new ProbeError(`no sequence is longer than delta = ${delta} tokens; give longer trajectories or a smaller delta`);
  }
  const { numLayers: L, numHeads: H } = model.cfg;
  const needHeads = Math.max(1, Math.ceil(headFraction * H));
  const Tmax = Math.max(...usable.map((s) => s.length));
  const ws = new TrainWorkspace(model.cfg);

  // Position-wise sums over sequences, and per-sequence sink detections for token sinks.
  const posSum = new Float64Array(L * H * Tmax);
  const posCount = new Float64Array(Tmax);
  const tokensAt: Map<number, number>[] = Array.from({ length: Tmax }, () => new Map());
  const perSeq: { layer: number; position: number; tokenId: number; mass: number }[] = [];
  const occurrences = new Map<number, number>(); // token id -> measurable occurrences
  let totalTokens = 0;
  for (const seq of usable) {
    const T = seq.length;
    totalTokens += T;
    for (let t = 0; t < T; t++) tokensAt[t]!.set(seq[t]!, (tokensAt[t]!.get(seq[t]!) ?? 0) + 1);
    const { sum, count } = attentionMass(model, ws, seq, delta, queries);
    for (let k = 0; k < T; k++) {
      if (count[k] === 0) continue;
      posCount[k]! += count[k]!;
      occurrences.set(seq[k]!, (occurrences.get(seq[k]!) ?? 0) + 1);
    }
    for (let l = 0; l < L; l++) {
      for (let k = 0; k < T; k++) {
        const c = count[k]!;
        if (c === 0) continue;
        let dependent = 0;
        let mass = 0;
        for (let h = 0; h < H; h++) {
          const s = sum[(l * H + h) * T + k]!;
          posSum[(l * H + h) * Tmax + k]! += s;
          const alpha = s / c;
          mass += alpha / H;
          if (alpha >= threshold) dependent++;
        }
        if (dependent >= needHeads) perSeq.push({ layer: l, position: k, tokenId: seq[k]!, mass });
      }
    }
  }

  const mostCommon = (t: number): number => {
    let best = -1;
    let n = -1;
    for (const [id, c] of tokensAt[t]!) if (c > n || (c === n && id < best)) [best, n] = [id, c];
    return best;
  };
  const layers: LayerSinks[] = [];
  for (let l = 0; l < L; l++) {
    const positions: LayerSinks["positions"] = [];
    for (let k = 0; k < Tmax; k++) {
      if (posCount[k] === 0) continue;
      const heads: number[] = [];
      let mass = 0;
      for (let h = 0; h < H; h++) {
        const alpha = posSum[(l * H + h) * Tmax + k]! / posCount[k]!;
        mass += alpha / H;
        if (alpha >= threshold) heads.push(h);
      }
      if (heads.length >= needHeads) positions.push({ position: k, tokenId: mostCommon(k), mass, heads });
    }
    const sinkPos = new Set(positions.map((p) => p.position));
    const byToken = new Map<number, { n: number; mass: number }>();
    for (const d of perSeq) {
      if (d.layer !== l || sinkPos.has(d.position)) continue;
      const e = byToken.get(d.tokenId) ?? { n: 0, mass: 0 };
      e.n++;
      e.mass += d.mass;
      byToken.set(d.tokenId, e);
    }
    const tokens: TokenSink[] = [];
    for (const [tokenId, e] of byToken) {
      const occ = occurrences.get(tokenId) ?? e.n;
      // A token sink is one the layer depends on at most of its occurrences, seen at least twice.
      if (e.n >= 2 && e.n * 2 >= occ) tokens.push({ tokenId, occurrences: occ, sinkOccurrences: e.n, mass: e.mass / e.n });
    }
    tokens.sort((a, b) => b.mass - a.mass || a.tokenId - b.tokenId);
    layers.push({ layer: l, positions, tokens });
  }
  return {
    format: SINK_PROFILE_FORMAT,
    model: opts.model ?? "model",
    numLayers: L,
    numHeads: H,
    settings: { delta, threshold, headFraction, queries },
    sequences: usable.length,
    tokens: totalTokens,
    layers,
    layersWithoutSinks: layers.filter((l) => l.positions.length === 0 && l.tokens.length === 0).map((l) => l.layer),
    prefix: Array.from({ length: Math.min(prefixLength, Tmax) }, (_, t) => mostCommon(t)),
  };
}
