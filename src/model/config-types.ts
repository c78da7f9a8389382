/**
 * The model's declared shapes, on their own so that the families (./families/) and the files that use
 * them (config.ts, params.ts) share them without importing each other: the config fields every family
 * fills, RoPE scaling, a parameter's entry in the flat layout, and the config error.
 *
 * Types and one error class only; parsing is config.ts's, the layout params.ts's.
 */
export type ModelArch = "qwen2" | "qwen3" | "llama" | "phi3";

/** RoPE frequency scaling, as in transformers' `rope_scaling` / `rope_parameters`. */
export type RopeScaling =
  | { type: "none" }
  | { type: "linear"; factor: number }
  | {
      type: "llama3";
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositionEmbeddings: number;
    }
  | {
      /** Phi-3's LongRoPE (`su` in older configs): per-frequency short and long factors [D/2]. */
      type: "longrope";
      shortFactor: number[];
      longFactor: number[];
      originalMaxPositionEmbeddings: number;
      /** cos and sin are multiplied by this (transformers' attention_factor). */
      attentionFactor: number;
    };

export interface ModelConfig {
  arch: ModelArch;
  /** C: the residual stream width. */
  hiddenSize: number;
  /** L: decoder layers. */
  numLayers: number;
  /** H: query heads. */
  numHeads: number;
  /** KV heads (grouped-query attention); divides numHeads. */
  numKvHeads: number;
  /** D: per-head width (hiddenSize / numHeads unless set explicitly). */
  headDim: number;
  /** F: the SwiGLU MLP's inner width. */
  intermediateSize: number;
  /** V: vocabulary size (rows of the embedding). */
  vocabSize: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: RopeScaling;
  maxPositionEmbeddings: number;
  tieWordEmbeddings: boolean;
  /**
   * Attention projections have biases: q/k/v for Qwen2 (always); q/k/v/o for Llama and Qwen3
   * (`attention_bias`). Qwen3 also normalizes each query and key head (q_norm / k_norm, see hasQkNorm).
   */
  qkvBias: boolean;
  /**
   * Keys more than this many positions back are masked (Phi-3). Absent or null: no window. The engine is
   * exact only for sequences that fit in it (see families/phi3.ts).
   */
  slidingWindow?: number | null;
  bosTokenId?: number;
  eosTokenId?: number | number[];
  /** config.json's pad_token_id, kept so a saved config loads as the original did (Phi-3 defaults it to 32000). */
  padTokenId?: number;
}

/** Thrown when a config.json cannot be used; the message names the field and what to do. */
export class ModelConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelConfigError";
  }
}

export interface ParamEntry {
  /** The Hugging Face tensor name, e.g. "model.layers.0.self_attn.q_proj.weight". */
  name: string;
  shape: number[];
  offset: number;
  size: number;
  kind: "embedding" | "linear" | "bias" | "norm" | "sink";
}
