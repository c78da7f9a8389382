/**
 * Model configuration: the decoder shape of a Qwen2 or Llama model, read from and written to a
 * Hugging Face `config.json`.
 *
 * This file validates the fields sinkflex uses and says clearly what is wrong or unsupported. It is not
 * the tokenizer configuration, nor the generation configuration, and it holds no weights.
 */

export type ModelArch = "qwen2" | "qwen3" | "llama";

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
  bosTokenId?: number;
  eosTokenId?: number | number[];
}

/** Thrown when a config.json cannot be used; the message names the field and what to do. */
export class ModelConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelConfigError";
  }
}

function req(raw: Record<string, unknown>, key: string): number {
  const v = raw[key];
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw new ModelConfigError(`config.json: "${key}" must be a number (got ${JSON.stringify(v)}); add it to the config`);
  }
  return v;
}

function posInt(raw: Record<string, unknown>, key: string, fallback?: number): number {
  const v = raw[key] === undefined || raw[key] === null ? fallback : raw[key];
  if (typeof v !== "number" || !Number.isInteger(v) || v <= 0) {
    throw new ModelConfigError(`config.json: "${key}" must be a positive integer (got ${JSON.stringify(raw[key])})`);
  }
  return v;
}

function parseArch(raw: Record<string, unknown>): ModelArch {
  const modelType = raw.model_type;
  const archs = Array.isArray(raw.architectures) ? (raw.architectures as unknown[]) : [];
  if (modelType === "qwen2" || archs.includes("Qwen2ForCausalLM")) return "qwen2";
  if (modelType === "qwen3" || archs.includes("Qwen3ForCausalLM")) return "qwen3";
  if (modelType === "llama" || archs.includes("LlamaForCausalLM")) return "llama";
  throw new ModelConfigError(
    `config.json: unsupported model_type ${JSON.stringify(modelType)} / architectures ${JSON.stringify(archs)}; ` +
      `sinkflex supports "qwen2" (Qwen2ForCausalLM), "qwen3" (Qwen3ForCausalLM) and "llama" (LlamaForCausalLM)`,
  );
}

function parseRopeScaling(rs: unknown): RopeScaling {
  if (rs === undefined || rs === null) return { type: "none" };
  if (typeof rs !== "object") throw new ModelConfigError(`config.json: "rope_scaling" must be an object or null`);
  const o = rs as Record<string, unknown>;
  const kind = (o.rope_type ?? o.type ?? "default") as string;
  if (kind === "default") return { type: "none" };
  if (kind === "linear") {
    const factor = req(o, "factor");
    if (factor <= 0) throw new ModelConfigError(`config.json: rope_scaling.factor must be > 0`);
    return { type: "linear", factor };
  }
  if (kind === "llama3") {
    return {
      type: "llama3",
      factor: req(o, "factor"),
      lowFreqFactor: req(o, "low_freq_factor"),
      highFreqFactor: req(o, "high_freq_factor"),
      originalMaxPositionEmbeddings: req(o, "original_max_position_embeddings"),
    };
  }
  throw new ModelConfigError(
    `config.json: rope scaling type ${JSON.stringify(kind)} is not supported; use "linear" or "llama3", or remove rope_scaling`,
  );
}

/** Reads a parsed Hugging Face config.json (Qwen2 or Llama) into a validated ModelConfig. */
export function parseHfConfig(raw: unknown): ModelConfig {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new ModelConfigError("config.json must hold a JSON object");
  }
  const r = raw as Record<string, unknown>;
  const arch = parseArch(r);
  const act = r.hidden_act ?? r.hidden_activation ?? "silu";
  if (act !== "silu") {
    throw new ModelConfigError(`config.json: hidden_act ${JSON.stringify(act)} is not supported; only "silu" (SwiGLU) is`);
  }
  if (r.mlp_bias === true) throw new ModelConfigError(`config.json: mlp_bias=true is not supported; set it to false`);
  if (arch !== "llama" && r.use_sliding_window === true) {
    throw new ModelConfigError(
      `config.json: use_sliding_window=true is not supported for Qwen2/Qwen3; sinkflex's windowed attention is configured separately`,
    );
  }
  // transformers 5 folds rope_theta and rope_scaling into rope_parameters.
  const rp = (r.rope_parameters ?? undefined) as Record<string, unknown> | undefined;
  const ropeTheta = r.rope_theta ?? rp?.rope_theta ?? 10000;
  if (typeof ropeTheta !== "number" || !(ropeTheta > 0)) {
    throw new ModelConfigError(`config.json: "rope_theta" must be a positive number (got ${JSON.stringify(ropeTheta)})`);
  }
  const ropeScaling = parseRopeScaling(r.rope_scaling ?? rp);
  const hiddenSize = posInt(r, "hidden_size");
  const numHeads = posInt(r, "num_attention_heads");
  const numKvHeads = posInt(r, "num_key_value_heads", numHeads);
  if (numHeads % numKvHeads !== 0) {
    throw new ModelConfigError(
      `config.json: num_attention_heads (${numHeads}) must be a multiple of num_key_value_heads (${numKvHeads})`,
    );
  }
  if (r.head_dim === undefined || r.head_dim === null) {
    if (hiddenSize % numHeads !== 0) {
      throw new ModelConfigError(
        `config.json: hidden_size (${hiddenSize}) is not divisible by num_attention_heads (${numHeads}); set "head_dim"`,
      );
    }
  }
  const headDim = posInt(r, "head_dim", hiddenSize / numHeads);
  if (headDim % 2 !== 0) throw new ModelConfigError(`config.json: head_dim (${headDim}) must be even for RoPE`);
  const rmsNormEps = r.rms_norm_eps ?? 1e-6;
  if (typeof rmsNormEps !== "number" || !(rmsNormEps > 0)) {
    throw new ModelConfigError(`config.json: "rms_norm_eps" must be a positive number`);
  }
  const partial = r.partial_rotary_factor;
  if (partial !== undefined && partial !== null && partial !== 1) {
    throw new ModelConfigError(`config.json: partial_rotary_factor=${String(partial)} is not supported (only 1)`);
  }
  const cfg: ModelConfig = {
    arch,
    hiddenSize,
    numLayers: posInt(r, "num_hidden_layers"),
    numHeads,
    numKvHeads,
    headDim,
    intermediateSize: posInt(r, "intermediate_size"),
    vocabSize: posInt(r, "vocab_size"),
    rmsNormEps,
    ropeTheta,
    ropeScaling,
    maxPositionEmbeddings: posInt(r, "max_position_embeddings", 32768),
    tieWordEmbeddings: r.tie_word_embeddings === true,
    qkvBias: arch === "qwen2" ? true : r.attention_bias === true,
  };
  if (typeof r.bos_token_id === "number") cfg.bosTokenId = r.bos_token_id;
  if (typeof r.eos_token_id === "number" || Array.isArray(r.eos_token_id)) cfg.eosTokenId = r.eos_token_id as number | number[];
  return cfg;
}

/** Checks a ModelConfig built by hand (e.g. for a random test model). */
export function validateConfig(cfg: ModelConfig): ModelConfig {
  return parseHfConfig(toHfConfig(cfg));
}

/** A complete Hugging Face config.json object for this config, loadable by transformers. */
export function toHfConfig(cfg: ModelConfig): Record<string, unknown> {
  const rs = cfg.ropeScaling;
  const ropeScaling =
    rs.type === "none"
      ? null
      : rs.type === "linear"
        ? { rope_type: "linear", type: "linear", factor: rs.factor }
        : {
            rope_type: "llama3",
            factor: rs.factor,
            low_freq_factor: rs.lowFreqFactor,
            high_freq_factor: rs.highFreqFactor,
            original_max_position_embeddings: rs.originalMaxPositionEmbeddings,
          };
  const common: Record<string, unknown> = {
    hidden_size: cfg.hiddenSize,
    intermediate_size: cfg.intermediateSize,
    num_hidden_layers: cfg.numLayers,
    num_attention_heads: cfg.numHeads,
    num_key_value_heads: cfg.numKvHeads,
    head_dim: cfg.headDim,
    hidden_act: "silu",
    max_position_embeddings: cfg.maxPositionEmbeddings,
    rms_norm_eps: cfg.rmsNormEps,
    rope_theta: cfg.ropeTheta,
    rope_scaling: ropeScaling,
    tie_word_embeddings: cfg.tieWordEmbeddings,
    vocab_size: cfg.vocabSize,
    torch_dtype: "float32",
    use_cache: true,
    attention_dropout: 0.0,
    initializer_range: 0.02,
  };
  if (cfg.bosTokenId !== undefined) common.bos_token_id = cfg.bosTokenId;
  if (cfg.eosTokenId !== undefined) common.eos_token_id = cfg.eosTokenId;
  if (cfg.arch === "qwen2") {
    if (!cfg.qkvBias) throw new ModelConfigError("Qwen2 models always have q/k/v biases; set qkvBias: true or use arch llama");
    return {
      architectures: ["Qwen2ForCausalLM"],
      model_type: "qwen2",
      ...common,
      use_sliding_window: false,
      sliding_window: null,
      max_window_layers: cfg.numLayers,
    };
  }
  if (cfg.arch === "qwen3") {
    return {
      architectures: ["Qwen3ForCausalLM"],
      model_type: "qwen3",
      ...common,
      attention_bias: cfg.qkvBias,
      use_sliding_window: false,
      sliding_window: null,
      max_window_layers: cfg.numLayers,
    };
  }
  return {
    architectures: ["LlamaForCausalLM"],
    model_type: "llama",
    ...common,
    attention_bias: cfg.qkvBias,
    mlp_bias: false,
    pretraining_tp: 1,
  };
}

/** Number of parameters (tied embeddings counted once). */
export function parameterCount(cfg: ModelConfig): number {
  const C = cfg.hiddenSize;
  const qDim = cfg.numHeads * cfg.headDim;
  const kvDim = cfg.numKvHeads * cfg.headDim;
  const F = cfg.intermediateSize;
  const perLayer =
    2 * C + C * qDim + 2 * C * kvDim + qDim * C + (cfg.qkvBias ? qDim + 2 * kvDim + (cfg.arch !== "qwen2" ? C : 0) : 0) +
    (cfg.arch === "qwen3" ? 2 * cfg.headDim : 0) + 3 * C * F;
  return cfg.vocabSize * C * (cfg.tieWordEmbeddings ? 1 : 2) + cfg.numLayers * perLayer + C;
}
