/**
 * Assembling a runnable `Model` (config + parameter views + kernels + RoPE tables + mask settings) from
 * a loaded checkpoint or a fresh random initialization.
 *
 * This file holds no compute (transformer.ts) and no file formats (checkpoint.ts).
 */
import type { Kernels, SinkWindow } from "../kernels/index.js";
import { validateConfig, type ModelConfig } from "./config.js";
import {
  bindParams, bindParamsBf16, initParams, initParamsBf16, isMatrixEntry, paramLayout, roundToBf16, widenBf16,
  type ParamEntry, type WeightDtype,
} from "./params.js";
import { RopeTable } from "./rope.js";
import { applyMimeticAttention } from "./mimetic.js";
import type { Model } from "./transformer.js";

export interface ModelWeights {
  cfg: ModelConfig;
  entries: ParamEntry[];
  /** Flat fp32 parameters in the layout of `entries`; empty (length 0) when `dtype` is "bf16". */
  data: Float32Array;
  /** How the weights are held (absent = "fp32"); see WeightDtype. */
  dtype?: WeightDtype;
  /** bf16 only: every parameter as bfloat16 bits, in the layout of `entries`. */
  data16?: Uint16Array;
  /** bf16 only: the norms, biases and sink logits, fp32, by name (exact, not rounded to bf16). */
  vectors?: Map<string, Float32Array>;
}

/** The dtype the weights are held in. */
export function weightDtype(w: ModelWeights): WeightDtype {
  return w.dtype ?? "fp32";
}

/** Bytes the weights occupy in memory (fp32 buffer, bf16 buffer and fp32 vectors). */
export function weightBytes(w: ModelWeights): number {
  let n = w.data.byteLength + (w.data16?.byteLength ?? 0);
  for (const v of w.vectors?.values() ?? []) n += v.byteLength;
  return n;
}

/** fp32 copies of the vector parameters (norms, biases, sink logits) of an fp32 buffer, by name. */
function vectorsOf(entries: ParamEntry[], data: Float32Array): Map<string, Float32Array> {
  return new Map(entries.filter((e) => !isMatrixEntry(e)).map((e) => [e.name, data.slice(e.offset, e.offset + e.size)]));
}

/**
 * The same weights held as `dtype`: fp32 -> bf16 rounds every matrix to nearest even and keeps the vectors
 * exact (the fp32 buffer is not kept: drop the argument to free it); bf16 -> fp32 widens (exact). Returns the
 * argument itself when it is held so already.
 */
export function convertWeights(w: ModelWeights, dtype: WeightDtype): ModelWeights {
  if (weightDtype(w) === dtype) return w;
  const { cfg, entries } = w;
  if (dtype === "bf16") {
    const data16 = new Uint16Array(w.data.length);
    for (const e of entries) roundToBf16(w.data.subarray(e.offset, e.offset + e.size), data16.subarray(e.offset, e.offset + e.size));
    return { cfg, entries, data: new Float32Array(0), dtype, data16, vectors: vectorsOf(entries, w.data) };
  }
  const data = widenBf16(w.data16!);
  for (const e of entries) {
    const v = w.vectors?.get(e.name);
    if (v) data.set(v, e.offset);
  }
  return { cfg, entries, data };
}

/** No window and no sink slots: full causal attention. */
export const FULL_ATTENTION: SinkWindow = { window: 0, sinks: 0 };

/** A runnable model over `weights.data` (shared, not copied). */
export function buildModel(weights: ModelWeights, kernels: Kernels, attention: SinkWindow = FULL_ATTENTION): Model {
  return {
    cfg: weights.cfg,
    params: weightDtype(weights) === "bf16"
      ? bindParamsBf16(weights.cfg, weights.entries, weights.data16!, weights.vectors)
      : bindParams(weights.cfg, weights.entries, weights.data),
    kernels,
    rope: new RopeTable(weights.cfg),
    attention: { ...attention },
  };
}

/** How a fresh model's attention weights start: all N(0, std), or mimetic (see mimetic.ts). */
export const ATTENTION_INITS = ["random", "mimetic"] as const;
export type AttentionInit = (typeof ATTENTION_INITS)[number];

/**
 * Fresh random weights for a config (N(0, std) matrices, unit norms, zero biases), deterministic in `seed`.
 * dtype "bf16" holds the same values rounded to bf16, made one tensor at a time (no fp32 copy of the whole
 * model exists at any moment, except with the mimetic attention init, which is computed in fp32).
 */
export function randomWeights(
  cfg: ModelConfig, seed: number, opts: { std?: number; sinkLogits?: boolean; attentionInit?: AttentionInit; dtype?: WeightDtype } = {},
): ModelWeights {
  const valid = validateConfig(cfg);
  const { entries, total } = paramLayout(valid, { sinkLogits: opts.sinkLogits });
  if (opts.dtype === "bf16" && opts.attentionInit !== "mimetic") {
    const data16 = new Uint16Array(total);
    initParamsBf16(entries, data16, seed, opts.std ?? 0.02);
    const vectors = new Map(entries.filter((e) => !isMatrixEntry(e)).map((e) => [e.name, widenBf16(data16.subarray(e.offset, e.offset + e.size))]));
    return { cfg: valid, entries, data: new Float32Array(0), dtype: "bf16", data16, vectors };
  }
  const data = new Float32Array(total);
  initParams(entries, data, seed, opts.std ?? 0.02);
  if (opts.attentionInit === "mimetic") applyMimeticAttention(valid, bindParams(valid, entries, data), opts.std ?? 0.02, seed);
  return convertWeights({ cfg: valid, entries, data }, opts.dtype ?? "fp32");
}
