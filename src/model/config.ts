/**
 * Model configuration: the decoder shape of a Qwen2/Qwen2.5, Qwen3, Llama 3.x or Phi-3/3.5 model, read
 * from and written to a Hugging Face `config.json`. The fields every family shares are read here; the
 * family (found by `model_type`) reads its own (./families/).
 *
 * This file validates the fields sinkflex uses and says clearly what is wrong or unsupported. It is not
 * the tokenizer configuration, nor the generation configuration, and it holds no weights.
 */
import { familyForConfig, familyOf } from "./families/index.js";

export { ModelConfigError, type ModelArch, type ModelConfig, type RopeScaling } from "./config-types.js";
import { ModelConfigError, type ModelConfig, type RopeScaling } from "./config-types.js";

function req(raw: Record<string, unknown>, key: string, src: string, where = ""): number {
  const v = raw[key];
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw new ModelConfigError(`${src}: "${where}${key}" must be a number (got ${JSON.stringify(v)}); add it to the config`);
  }
  return v;
}

function posInt(raw: Record<string, unknown>, key: string, src: string, fallback?: number): number {
  const v = raw[key] === undefined || raw[key] === null ? fallback : raw[key];
  if (typeof v !== "number" || !Number.isInteger(v) || v <= 0) {
    throw new ModelConfigError(`${src}: "${key}" must be a positive integer (got ${JSON.stringify(raw[key])})`);
  }
  return v;
}

function factorList(o: Record<string, unknown>, key: string, half: number, src: string): number[] {
  const v = o[key];
  if (!Array.isArray(v) || v.length !== half || !v.every((x) => typeof x === "number" && Number.isFinite(x) && x > 0)) {
    throw new ModelConfigError(
      `${src}: rope_scaling.${key} must be a list of ${half} positive numbers (head_dim / 2); got ${Array.isArray(v) ? `${v.length} entries` : JSON.stringify(v)}`,
    );
  }
  return v as number[];
}

function parseRopeScaling(rs: unknown, r: Record<string, unknown>, half: number, maxPos: number, src: string): RopeScaling {
  if (rs === undefined || rs === null) return { type: "none" };
  if (typeof rs !== "object") throw new ModelConfigError(`${src}: "rope_scaling" must be an object or null`);
  const o = rs as Record<string, unknown>;
  const kind = (o.rope_type ?? o.type ?? "default") as string;
  if (kind === "default") return { type: "none" };
  if (kind === "linear") {
    const factor = req(o, "factor", src, "rope_scaling.");
    if (factor <= 0) throw new ModelConfigError(`${src}: rope_scaling.factor must be > 0`);
    return { type: "linear", factor };
  }
  if (kind === "llama3") {
    return {
      type: "llama3",
      factor: req(o, "factor", src, "rope_scaling."),
      lowFreqFactor: req(o, "low_freq_factor", src, "rope_scaling."),
      highFreqFactor: req(o, "high_freq_factor", src, "rope_scaling."),
      originalMaxPositionEmbeddings: req(o, "original_max_position_embeddings", src, "rope_scaling."),
    };
  }
  if (kind === "longrope" || kind === "su") {
    const shortFactor = factorList(o, "short_factor", half, src);
    const longFactor = factorList(o, "long_factor", half, src);
    // As transformers: the original length from rope_scaling or the top level, and the scale factor from
    // rope_scaling.factor, else max_position_embeddings / original.
    const orig = o.original_max_position_embeddings ?? r.original_max_position_embeddings;
    if (typeof orig !== "number" || !Number.isInteger(orig) || orig <= 0) {
      throw new ModelConfigError(
        `${src}: longrope needs "original_max_position_embeddings" (a positive integer, top level or in rope_scaling); got ${JSON.stringify(orig)}`,
      );
    }
    const original = orig;
    const factor = typeof o.factor === "number" ? o.factor : maxPos / original;
    for (const k of ["short_mscale", "long_mscale"]) {
      if (o[k] !== undefined && o[k] !== null) {
        throw new ModelConfigError(`${src}: rope_scaling.${k} is not supported (transformers' Phi3 ignores it too); remove it`);
      }
    }
    const af = o.attention_factor;
    const attentionFactor = typeof af === "number" ? af : factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(original));
    return { type: "longrope", shortFactor, longFactor, originalMaxPositionEmbeddings: original, attentionFactor };
  }
  throw new ModelConfigError(
    `${src}: rope scaling type ${JSON.stringify(kind)} is not supported (rope_scaling); use "linear", "llama3" or "longrope" where the family allows it, or remove rope_scaling`,
  );
}

/**
 * Reads a parsed Hugging Face config.json of any registered family into a validated ModelConfig; `src`
 * (the file's path) names the file in errors.
 */
export function parseHfConfig(raw: unknown, src = "config.json"): ModelConfig {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new ModelConfigError(`${src} must hold a JSON object`);
  }
  const r = raw as Record<string, unknown>;
  const family = familyForConfig(r, src);
  const arch = family.arch;
  const act = r.hidden_act ?? r.hidden_activation ?? "silu";
  if (act !== "silu") {
    throw new ModelConfigError(`${src}: hidden_act ${JSON.stringify(act)} is not supported; only "silu" (SwiGLU) is`);
  }
  if (r.mlp_bias === true) throw new ModelConfigError(`${src}: mlp_bias=true is not supported; set it to false`);
  const part = family.readConfig(r, src);
  // transformers 5 folds rope_theta and rope_scaling into rope_parameters.
  const rp = (r.rope_parameters ?? undefined) as Record<string, unknown> | undefined;
  const ropeTheta = r.rope_theta ?? rp?.rope_theta ?? 10000;
  if (typeof ropeTheta !== "number" || !(ropeTheta > 0)) {
    throw new ModelConfigError(`${src}: "rope_theta" must be a positive number (got ${JSON.stringify(ropeTheta)})`);
  }
  const hiddenSize = posInt(r, "hidden_size", src);
  const numHeads = posInt(r, "num_attention_heads", src);
  const numKvHeads = posInt(r, "num_key_value_heads", src, numHeads);
  if (numHeads % numKvHeads !== 0) {
    throw new ModelConfigError(
      `${src}: num_attention_heads (${numHeads}) must be a multiple of num_key_value_heads (${numKvHeads})`,
    );
  }
  if (r.head_dim === undefined || r.head_dim === null) {
    if (hiddenSize % numHeads !== 0) {
      throw new ModelConfigError(
        `${src}: hidden_size (${hiddenSize}) is not divisible by num_attention_heads (${numHeads}); set "head_dim"`,
      );
    }
  }
  const headDim = posInt(r, "head_dim", src, hiddenSize / numHeads);
  if (headDim % 2 !== 0) throw new ModelConfigError(`${src}: head_dim (${headDim}) must be even for RoPE`);
  const maxPositionEmbeddings = posInt(r, "max_position_embeddings", src, 32768);
  const ropeScaling = parseRopeScaling(r.rope_scaling ?? rp, r, headDim / 2, maxPositionEmbeddings, src);
  if (!family.ropeScalings.includes(ropeScaling.type)) {
    throw new ModelConfigError(
      `${src}: rope_scaling type "${ropeScaling.type}" is not supported for ${family.label}; it supports ${family.ropeScalings.map((t) => `"${t}"`).join(", ")}`,
    );
  }
  const rmsNormEps = r.rms_norm_eps ?? 1e-6;
  if (typeof rmsNormEps !== "number" || !(rmsNormEps > 0)) {
    throw new ModelConfigError(`${src}: "rms_norm_eps" must be a positive number`);
  }
  const partial = r.partial_rotary_factor;
  if (partial !== undefined && partial !== null && partial !== 1) {
    throw new ModelConfigError(`${src}: partial_rotary_factor=${String(partial)} is not supported (only 1)`);
  }
  const cfg: ModelConfig = {
    arch,
    hiddenSize,
    numLayers: posInt(r, "num_hidden_layers", src),
    numHeads,
    numKvHeads,
    headDim,
    intermediateSize: posInt(r, "intermediate_size", src),
    vocabSize: posInt(r, "vocab_size", src),
    rmsNormEps,
    ropeTheta,
    ropeScaling,
    maxPositionEmbeddings,
    tieWordEmbeddings: r.tie_word_embeddings === true,
    qkvBias: part.qkvBias,
  };
  if (part.slidingWindow !== null) cfg.slidingWindow = part.slidingWindow;
  if (typeof r.bos_token_id === "number") cfg.bosTokenId = r.bos_token_id;
  if (typeof r.pad_token_id === "number") cfg.padTokenId = r.pad_token_id;
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
        : rs.type === "llama3"
          ? {
              rope_type: "llama3",
              factor: rs.factor,
              low_freq_factor: rs.lowFreqFactor,
              high_freq_factor: rs.highFreqFactor,
              original_max_position_embeddings: rs.originalMaxPositionEmbeddings,
            }
          : {
              rope_type: "longrope",
              type: "longrope",
              short_factor: rs.shortFactor,
              long_factor: rs.longFactor,
              attention_factor: rs.attentionFactor,
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
  if (cfg.padTokenId !== undefined) common.pad_token_id = cfg.padTokenId;
  if (cfg.eosTokenId !== undefined) common.eos_token_id = cfg.eosTokenId;
  const specific = familyOf(cfg.arch).writeConfig(cfg);
  return { architectures: specific.architectures, model_type: specific.model_type, ...common, ...specific };
}

/** Number of parameters (tied embeddings counted once). */
export function parameterCount(cfg: ModelConfig): number {
  const family = familyOf(cfg.arch);
  const C = cfg.hiddenSize;
  const qDim = cfg.numHeads * cfg.headDim;
  const kvDim = cfg.numKvHeads * cfg.headDim;
  const F = cfg.intermediateSize;
  const perLayer =
    2 * C + C * qDim + 2 * C * kvDim + qDim * C + (cfg.qkvBias ? qDim + 2 * kvDim + (family.oBiasWithQkv ? C : 0) : 0) +
    (family.qkNorm ? 2 * cfg.headDim : 0) + 3 * C * F;
  return cfg.vocabSize * C * (cfg.tieWordEmbeddings ? 1 : 2) + cfg.numLayers * perLayer + C;
}
