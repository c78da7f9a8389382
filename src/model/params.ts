/**
 * The engine's parameter layout of a decoder (any family in ./families/): every weight's name (the Hugging
 * Face name where the family stores it unfused; see a family's toEngine / toStored for the others), shape and place in
 * one flat Float32Array, and typed views into such an array (parameters, gradients and AdamW moments all
 * share the layout, so the optimizer and gradient norm are single passes over contiguous memory).
 *
 * Weight matrices (the projections, the embedding and the LM head) may instead be held as bfloat16 bits in
 * a Uint16Array (`bindParamsBf16`: a model whose weights are frozen, see WeightDtype); norms, biases and sink
 * logits are fp32 in either case.
 *
 * This file does not compute anything with the weights (see transformer.ts) and does not read or write
 * files (see checkpoint.ts).
 */
import type { ModelConfig } from "./config.js";
import { familyOf } from "./families/index.js";
import { Rng } from "../core/index.js";

export type { ParamEntry } from "./config-types.js";
import type { ParamEntry } from "./config-types.js";

/** A weight matrix: fp32 values, or bfloat16 bits (the upper 16 bits of each fp32 pattern). */
export type WeightMatrix = Float32Array | Uint16Array;

/**
 * How a model's weights are held in memory: "fp32" (every parameter fp32, the default), or "bf16" (the weight
 * matrices as bfloat16 and nothing else of them: half the memory; products read bf16 and accumulate in
 * fp32). A model held in bf16 samples, scores, trains a LoRA adapter (fp32) on top of its weights, or
 * trains every weight through an fp32 master copy that the engine rounds into them after each step.
 */
export const WEIGHT_DTYPES = ["fp32", "bf16"] as const;
export type WeightDtype = (typeof WEIGHT_DTYPES)[number];

/** `M`: the type of the weight matrices (fp32 views, or either kind in a model that may hold bf16). */
export interface LayerParams<M extends WeightMatrix = WeightMatrix> {
  /** [C] */ inputNorm: Float32Array;
  /** [H*D, C] */ q: M;
  /** [KVH*D, C] */ k: M;
  /** [KVH*D, C] */ v: M;
  /** [H*D] or null */ qBias: Float32Array | null;
  /** [KVH*D] or null */ kBias: Float32Array | null;
  /** [KVH*D] or null */ vBias: Float32Array | null;
  /** [C, H*D] */ o: M;
  /** [C] or null (Llama / Qwen3 with attention_bias have an o_proj bias too; Qwen2 has none) */ oBias: Float32Array | null;
  /** [D] per-head query / key RMSNorm weights (Qwen3), or null */ qNorm: Float32Array | null;
  /** [D] */ kNorm: Float32Array | null;
  /** [H] per-head learnable sink logit, or null when the model has none. */ sinks: Float32Array | null;
  /** [C] */ postNorm: Float32Array;
  /** [F, C] */ gate: M;
  /** [F, C] */ up: M;
  /** [C, F] */ down: M;
}

export interface ModelParams<M extends WeightMatrix = WeightMatrix> {
  /** The flat fp32 buffer the views point into (empty when the matrices are bf16: see bindParamsBf16). */
  data: Float32Array;
  /** [V, C] */ embed: M;
  layers: LayerParams<M>[];
  /** [C] */ finalNorm: Float32Array;
  /** [V, C]; the same view as `embed` when embeddings are tied. */ lmHead: M;
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
export function bindParams(cfg: ModelConfig, entries: ParamEntry[], data: Float32Array): ModelParams<Float32Array> {
  const view = (e: ParamEntry) => data.subarray(e.offset, e.offset + e.size);
  return bindWith(cfg, entries, data, view, view);
}

/**
 * Views of a model held in bf16: the matrices are views into `data16` (bfloat16 bits in the layout of
 * `entries`); the norms, biases and sink logits are the fp32 arrays of `vectors` (by name), or, for one
 * missing there, fp32 copies widened from their slot of `data16`.
 */
export function bindParamsBf16(
  cfg: ModelConfig, entries: ParamEntry[], data16: Uint16Array, vectors?: Map<string, Float32Array>,
): ModelParams {
  return bindWith<WeightMatrix>(
    cfg, entries, new Float32Array(0),
    (e) => data16.subarray(e.offset, e.offset + e.size),
    (e) => vectors?.get(e.name) ?? widenBf16(data16.subarray(e.offset, e.offset + e.size)),
  );
}

/** Whether an entry is held as bf16 in a bf16 model (a matrix), rather than fp32 (a vector). */
export function isMatrixEntry(e: ParamEntry): boolean {
  return e.kind === "linear" || e.kind === "embedding";
}

/** fp32 values of bfloat16 bits (exact). */
export function widenBf16(h: Uint16Array, out: Float32Array = new Float32Array(h.length)): Float32Array {
  const o = new Uint32Array(out.buffer, out.byteOffset, h.length);
  for (let i = 0; i < h.length; i++) o[i] = h[i]! << 16;
  return out;
}

/** bfloat16 bits of fp32 values, rounded to nearest even (a NaN stays a NaN). */
export function roundToBf16(x: Float32Array, out: Uint16Array = new Uint16Array(x.length)): Uint16Array {
  const u = new Uint32Array(x.buffer, x.byteOffset, x.length);
  for (let i = 0; i < x.length; i++) {
    const b = u[i]!;
    out[i] = (b & 0x7fffffff) > 0x7f800000 ? (b >>> 16) | 0x40 : (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
  }
  return out;
}

function bindWith<M extends WeightMatrix>(
  cfg: ModelConfig, entries: ParamEntry[], data: Float32Array, mat: (e: ParamEntry) => M, vec: (e: ParamEntry) => Float32Array,
): ModelParams<M> {
  const byName = new Map(entries.map((e) => [e.name, e]));
  const view = (name: string): M => mat(byName.get(name)!);
  const small = (name: string): Float32Array => vec(byName.get(name)!);
  const opt = (name: string): Float32Array | null => (byName.has(name) ? small(name) : null);
  const layers: LayerParams<M>[] = [];
  for (let l = 0; l < cfg.numLayers; l++) {
    const p = `model.layers.${l}.`;
    layers.push({
      inputNorm: small(`${p}input_layernorm.weight`),
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
      postNorm: small(`${p}post_attention_layernorm.weight`),
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
    finalNorm: small("model.norm.weight"),
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
  for (const e of entries) initEntry(e, data.subarray(e.offset, e.offset + e.size), rng, std, sinkInit);
}

/**
 * `initParams` into bfloat16 bits (`data16`, the layout's total length), a piece of a tensor at a time
 * through a small fp32 scratch: the same values as initParams with the same seed, rounded to bf16.
 */
export function initParamsBf16(
  entries: ParamEntry[], data16: Uint16Array, seed: number, std = 0.02, sinkInit = -10,
): void {
  const rng = new Rng(seed, "xoshiro128**");
  const scratch = new Float32Array(1 << 20);
  for (const e of entries) {
    // the values are drawn in order, so pieces of a tensor draw what the whole tensor would
    for (let i = 0; i < e.size; i += scratch.length) {
      const v = scratch.subarray(0, Math.min(scratch.length, e.size - i));
      initEntry(e, v, rng, std, sinkInit);
      roundToBf16(v, data16.subarray(e.offset + i, e.offset + i + v.length));
    }
  }
}

function initEntry(e: ParamEntry, v: Float32Array, rng: Rng, std: number, sinkInit: number): void {
  if (e.kind === "norm") v.fill(1);
  else if (e.kind === "bias") v.fill(0);
  else if (e.kind === "sink") v.fill(sinkInit);
  else for (let i = 0; i < v.length; i++) v[i] = rng.normal() * std;
}
