/**
 * The learnable sink logit per head, in the gpt-oss form: an extra logit s_h in each softmax denominator
 * that attends to nothing,
 *
 *   p_j = exp(score_j) / (exp(s_h) + sum_k exp(score_k)),
 *
 * so a head can put mass "nowhere" instead of on a sink token. The kernels compute it (forward and
 * backward, both kernel sets); the parameter is `model.layers.N.self_attn.sinks` [H].
 *
 * Here: adding the parameter to a model that has none (`withSinkLogits`), and an initialization that
 * leaves the model's outputs unchanged at step 0 (`initSinkLogits`): s_h = (smallest log-sum-exp of head
 * h over calibration rows) + ln(ε), so the sink takes at most a fraction ε of any calibration row's mass;
 * ε is the largest power of ten (<= 1e-2) whose largest logit change stays within the bound (1e-4 by
 * default). A larger ε gives the sink a usable gradient sooner (AdamW steps are lr-sized whatever the
 * gradient's scale). This file does not train.
 *
 * Shapes: L layers, H query heads, V vocabulary, T sequence length.
 */
import type { ModelWeights } from "../model/index.js";
import { buildModel, convertWeights } from "../model/index.js";
import { paramLayout } from "../model/index.js";
import type { Kernels } from "../kernels/index.js";
import { packSequences, trainForward, TrainWorkspace, xWT, type Model } from "../model/index.js";

export class SinkLogitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SinkLogitError";
  }
}

/**
 * The same weights in the layout with a sink logit per head (`values[l]` [H], default -Infinity-like
 * -1e4 = no effect). Every other tensor is copied by name. Weights that already have sink logits are
 * copied with their values replaced when `values` is given. Weights held in bf16 come back in fp32.
 */
export function withSinkLogits(held: ModelWeights, values?: Float32Array[]): ModelWeights {
  const weights = convertWeights(held, "fp32");
  const cfg = weights.cfg;
  const { entries, total } = paramLayout(cfg, { sinkLogits: true });
  const data = new Float32Array(total);
  const old = new Map(weights.entries.map((e) => [e.name, e]));
  for (const e of entries) {
    const o = old.get(e.name);
    if (e.kind === "sink") {
      const l = Number(/layers\.(\d+)\./.exec(e.name)![1]);
      const v = values?.[l];
      if (v && v.length !== cfg.numHeads) throw new SinkLogitError(`sink logits of layer ${l}: ${v.length} values for ${cfg.numHeads} heads`);
      if (v) data.set(v, e.offset);
      else if (o) data.set(weights.data.subarray(o.offset, o.offset + o.size), e.offset);
      else data.fill(-1e4, e.offset, e.offset + e.size);
      continue;
    }
    if (!o || o.size !== e.size) throw new SinkLogitError(`tensor ${e.name} is missing or has another shape in the source weights`);
    data.set(weights.data.subarray(o.offset, o.offset + o.size), e.offset);
  }
  return { cfg, entries, data };
}

/**
 * logits [T, V] of one sequence (every row), under the model's attention settings and, when given, the
 * sequence's document ids [T] and pinned flags [T].
 */
export function sequenceLogits(
  model: Model, ws: TrainWorkspace, tokens: number[], mask: { docIds?: Int32Array | null; pinned?: Uint8Array | null } = {},
): Float32Array {
  const { hiddenSize: C, vocabSize: V } = model.cfg;
  const T = tokens.length;
  const batch = packSequences([tokens], mask.docIds ? [mask.docIds] : null, mask.pinned ? [mask.pinned] : null);
  trainForward(model, ws, batch, false);
  const out = new Float32Array(T * V);
  xWT(model.kernels, T, V, C, ws.lnf, model.params.lmHead, 0, out);
  return out;
}

/** max |logit_a - logit_b| over every position of every sequence. */
export function maxLogitDifference(a: Model, b: Model, sequences: number[][]): number {
  const wa = new TrainWorkspace(a.cfg);
  const wb = new TrainWorkspace(b.cfg);
  let d = 0;
  for (const s of sequences) {
    const la = sequenceLogits(a, wa, s);
    const lb = sequenceLogits(b, wb, s);
    for (let i = 0; i < la.length; i++) d = Math.max(d, Math.abs(la[i]! - lb[i]!));
  }
  return d;
}

/** Smallest log-sum-exp of each layer's heads over the calibration rows: [L][H]. */
export function minRowLse(model: Model, sequences: number[][]): Float32Array[] {
  const { numLayers: L, numHeads: H } = model.cfg;
  const ws = new TrainWorkspace(model.cfg);
  const min = Array.from({ length: L }, () => new Float32Array(H).fill(Infinity));
  for (const s of sequences) {
    trainForward(model, ws, packSequences([s]), false);
    for (let l = 0; l < L; l++) {
      const lse = ws.layers[l]!.lse;
      for (let t = 0; t < s.length; t++) for (let h = 0; h < H; h++) min[l]![h] = Math.min(min[l]![h]!, lse[t * H + h]!);
    }
  }
  return min;
}

export interface SinkInitResult {
  weights: ModelWeights;
  /** Per layer [H], the initial sink logits. */
  values: Float32Array[];
  /** The sink's largest share of a calibration row's attention mass. */
  epsilon: number;
  /** Largest |Δlogit| against the model without sink logits, over the calibration sequences. */
  maxLogitChange: number;
}

/**
 * Sink logits for `weights` initialized so the outputs change by at most `maxChange` (default 1e-4) on
 * the calibration sequences (see the file comment). The model is run with full attention.
 */
export function initSinkLogits(
  weights: ModelWeights, kernels: Kernels, calibration: number[][], opts: { maxChange?: number } = {},
): SinkInitResult {
  const maxChange = opts.maxChange ?? 1e-4;
  if (calibration.length === 0) throw new SinkLogitError("initSinkLogits: give at least one calibration sequence");
  const base = buildModel(weights, kernels);
  const lse = minRowLse(base, calibration);
  for (let epsilon = 1e-2; epsilon >= 1e-12; epsilon /= 10) {
    const values = lse.map((row) => row.map((x) => x + Math.log(epsilon)));
    const w = withSinkLogits(weights, values);
    const change = maxLogitDifference(base, buildModel(w, kernels), calibration);
    if (change <= maxChange) return { weights: w, values, epsilon, maxLogitChange: change };
  }
  throw new SinkLogitError(`no sink-logit initialization keeps the logit change within ${maxChange}; the calibration rows may be degenerate`);
}
