/**
 * The engine's parameter layout of a decoder (any family in ./families/): every weight's name (the Hugging
 * Face name where the family stores it unfused; see a family's toEngine / toStored for the others), shape and place in
 * one flat Float32Array, and typed views into such an array (parameters, gradients and AdamW moments all
 * share the layout, so the optimizer and gradient norm are single passes over contiguous memory).
 *
 * This file does not compute anything with the weights (see transformer.ts) and does not read or write
 * files (see checkpoint.ts).
 */
import type { ModelConfig } from "./config.js";
import { familyOf } from "./families/index.js";
import { Rng } from "../core/index.js";

export type { ParamEntry } from "./config-types.js";
import type { ParamEntry } from "./config-types.js";

export interface LayerParams {
  /** [C] */ inputNorm: Float32Array;
  /** [H*D, C] */ q: Float32Array;
  /** [KVH*D, C] */ k: Float32Array;
  /** [KVH*D, C] */ v: Float32Array;
  /** [H*D] or null */ qBias: Float32Array | null;
  /** [KVH*D] or null */ kBias: Float32Array | null;
  /** [KVH*D] or null */ vBias: Float32Array | null;
  /** [C, H*D] */ o: Float32Array;
  /** [C] or null (Llama / Qwen3 with attention_bias have an o_proj bias too; Qwen2 has none) */ oBias: Float32Array | null;
  /** [D] per-head query / key RMSNorm weights (Qwen3), or null */ qNorm: Float32Array | null;
  /** [D] */ kNorm: Float32Array | null;
  /** [H] per-head learnable sink logit, or null when the model has none. */ sinks: Float32Array | null;
  /** [C] */ postNorm: Float32Array;
  /** [F, C] */ gate: Float32Array;
  /** [F, C] */ up: Float32Array;
  /** [C, F] */ down: Float32Array;
}

export interface ModelParams {
  /** The flat buffer all views point into. */
  data: Float32Array;
  /** [V, C] */ embed: Float32Array;
  layers: LayerParams[];
  /** [C] */ finalNorm: Float32Array;
  /** [V, C]; the same view as `embed` when embeddings are tied. */ lmHead: Float32Array;
}

export interface ParamOptions {
  /** Adds a learnable per-head sink logit to every attention layer ("model.layers.N.self_attn.sinks"). */
  sinkLogits?: boolean;
}

/** Llama's and Qwen3's `attention_bias` puts a bias on q, k, v and o; Qwen2 has q/k/v biases only. */
export function hasOBias(cfg: ModelConfig): boolean {
  return familyOf(cfg.arch).oBiasWithQkv && cfg.qkvBias;
}

/** Qwen3 RMS-normalizes every query and key head (weights [D]) before RoPE. */
export function hasQkNorm(cfg: ModelConfig): boolean {
  return familyOf(cfg.arch).qkNorm;
}

/** The ordered list of parameters of a model, as named in Hugging Face checkpoints. */
export function paramLayout(cfg: ModelConfig, opts: ParamOptions = {}): { entries: ParamEntry[]; total: number } {
  const C = cfg.hiddenSize;
  const qDim = cfg.numHeads * cfg.headDim;
  const kvDim = cfg.numKvHeads * cfg.headDim;
  const F = cfg.intermediateSize;
  const entries: ParamEntry[] = [];
  let offset = 0;
  const add = (name: string, shape: number[], kind: ParamEntry["kind"]) => {
    const size = shape.reduce((a, b) => a * b, 1);
    entries.push({ name, shape, offset, size, kind });
    // Keep every tensor 16-float aligned so native kernels may use aligned loads.
    offset += Math.ceil(size / 16) * 16;
  };
  add("model.embed_tokens.weight", [cfg.vocabSize, C], "embedding");
  for (let l = 0; l < cfg.numLayers; l++) {
    const p = `model.layers.${l}.`;
    add(`${p}input_layernorm.weight`, [C], "norm");
    add(`${p}self_attn.q_proj.weight`, [qDim, C], "linear");
    if (cfg.qkvBias) add(`${p}self_attn.q_proj.bias`, [qDim], "bias");
    add(`${p}self_attn.k_proj.weight`, [kvDim, C], "linear");
    if (cfg.qkvBias) add(`${p}self_attn.k_proj.bias`, [kvDim], "bias");
    add(`${p}self_attn.v_proj.weight`, [kvDim, C], "linear");
    if (cfg.qkvBias) add(`${p}self_attn.v_proj.bias`, [kvDim], "bias");
    add(`${p}self_attn.o_proj.weight`, [C, qDim], "linear");
    if (hasQkNorm(cfg)) {
      add(`${p}self_attn.q_norm.weight`, [cfg.headDim], "norm");
      add(`${p}self_attn.k_norm.weight`, [cfg.headDim], "norm");
    }
    if (hasOBias(cfg)) add(`${p}self_attn.o_proj.bias`, [C], "bias");
    if (opts.sinkLogits) add(`${p}self_attn.sinks`, [cfg.numHeads], "sink");
    add(`${p}post_attention_layernorm.weight`, [C], "norm");
    add(`${p}mlp.gate_proj.weight`, [F, C], "linear");
    add(`${p}mlp.up_proj.weight`, [F, C], "linear");
    add(`${p}mlp.down_proj.weight`, [C, F], "linear");
  }
  add("model.norm.weight", [C], "norm");
  if (!cfg.tieWordEmbeddings) add("lm_head.weight", [cfg.vocabSize, C], "linear");
  return { entries, total: offset };
}

/** Typed views of every parameter inside `data` (which has the layout's total length). */
export function bindParams(cfg: ModelConfig, entries: ParamEntry[], data: Float32Array): ModelParams {
  const byName = new Map(entries.map((e) => [e.name, e]));
  const view = (name: string): Float32Array => {
    const e = byName.get(name)!;
    return data.subarray(e.offset, e.offset + e.size);
  };
  const opt = (name: string): Float32Array | null => (byName.has(name) ? view(name) : null);
  const layers: LayerParams[] = [];
  for (let l = 0; l < cfg.numLayers; l++) {
    const p = `model.layers.${l}.`;
    layers.push({
      inputNorm: view(`${p}input_layernorm.weight`),
      q: view(`${p}self_attn.q_proj.weight`),
      k: view(`${p}self_attn.k_proj.weight`),
      v: view(`${p}self_attn.v_proj.weight`),
      qBias: opt(`${p}self_attn.q_proj.bias`),
      kBias: opt(`${p}self_attn.k_proj.bias`),
      vBias: opt(`${p}self_attn.v_proj.bias`),
      o: view(`${p}self_attn.o_proj.weight`),
      oBias: opt(`${p}self_attn.o_proj.bias`),
      qNorm: opt(`${p}self_attn.q_norm.weight`),
      kNorm: opt(`${p}self_attn.k_norm.weight`),
      sinks: opt(`${p}self_attn.sinks`),
      postNorm: view(`${p}post_attention_layernorm.weight`),
      gate: view(`${p}mlp.gate_proj.weight`),
      up: view(`${p}mlp.up_proj.weight`),
      down: view(`${p}mlp.down_proj.weight`),
    });
  }
  const embed = view("model.embed_tokens.weight");
  return {
    data,
    embed,
    layers,
    finalNorm: view("model.norm.weight"),
    lmHead: cfg.tieWordEmbeddings ? embed : view("lm_head.weight"),
  };
}

/**
 * Fills a parameter buffer with a fresh random initialization: linear and embedding weights
 * ~ N(0, std), norms 1, biases 0, sink logits `sinkInit`.
 */
export function initParams(
  entries: ParamEntry[], data: Float32Array, seed: number, std = 0.02, sinkInit = -10,
): void {
  const rng = new Rng(seed, "xoshiro128**");
  for (const e of entries) {
    const v = data.subarray(e.offset, e.offset + e.size);
    if (e.kind === "norm") v.fill(1);
    else if (e.kind === "bias") v.fill(0);
    else if (e.kind === "sink") v.fill(sinkInit);
    else for (let i = 0; i < v.length; i++) v[i] = rng.normal() * std;
  }
}
