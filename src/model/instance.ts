/**
 * Assembling a runnable `Model` (config + parameter views + kernels + RoPE tables + mask settings) from
 * a loaded checkpoint or a fresh random initialization.
 *
 * This file holds no compute (transformer.ts) and no file formats (checkpoint.ts).
 */
import type { Kernels, SinkWindow } from "../kernels/index.js";
import { validateConfig, type ModelConfig } from "./config.js";
import { bindParams, initParams, paramLayout, type ParamEntry } from "./params.js";
import { RopeTable } from "./rope.js";
import { applyMimeticAttention } from "./mimetic.js";
import type { Model } from "./transformer.js";

export interface ModelWeights {
  cfg: ModelConfig;
  entries: ParamEntry[];
  /** Flat parameters in the layout of `entries`. */
  data: Float32Array;
}

/** No window and no sink slots: full causal attention. */
export const FULL_ATTENTION: SinkWindow = { window: 0, sinks: 0 };

/** A runnable model over `weights.data` (shared, not copied). */
export function buildModel(weights: ModelWeights, kernels: Kernels, attention: SinkWindow = FULL_ATTENTION): Model {
  return {
    cfg: weights.cfg,
    params: bindParams(weights.cfg, weights.entries, weights.data),
    kernels,
    rope: new RopeTable(weights.cfg),
    attention: { ...attention },
  };
}

/** How a fresh model's attention weights start: all N(0, std), or mimetic (see mimetic.ts). */
export const ATTENTION_INITS = ["random", "mimetic"] as const;
export type AttentionInit = (typeof ATTENTION_INITS)[number];

/** Fresh random weights for a config (N(0, std) matrices, unit norms, zero biases), deterministic in `seed`. */
export function randomWeights(
  cfg: ModelConfig, seed: number, opts: { std?: number; sinkLogits?: boolean; attentionInit?: AttentionInit } = {},
): ModelWeights {
  const valid = validateConfig(cfg);
  const { entries, total } = paramLayout(valid, { sinkLogits: opts.sinkLogits });
  const data = new Float32Array(total);
  initParams(entries, data, seed, opts.std ?? 0.02);
  if (opts.attentionInit === "mimetic") applyMimeticAttention(valid, bindParams(valid, entries, data), opts.std ?? 0.02, seed);
  return { cfg: valid, entries, data };
}
