/**
 * The Qwen3 family (dense Qwen3 models): per-head q/k RMSNorm before RoPE, no biases unless
 * `attention_bias` (then q/k/v/o), explicit head_dim (H * D may exceed the hidden size), padded vocab.
 *
 * This file declares the family; the decoder math is ../transformer.ts.
 */
import { ModelConfigError, type ModelConfig } from "../config-types.js";
import { COMMON_FIELDS, identity, sameTensors } from "./shared.js";
import type { ModelFamily } from "./types.js";

export const qwen3Family: ModelFamily = {
  arch: "qwen3",
  label: "Qwen3",
  modelTypes: ["qwen3"],
  architectures: ["Qwen3ForCausalLM"],
  chatFormat: "qwen3-hermes",
  toolFormat: "hermes",
  configFields: [...COMMON_FIELDS, "attention_bias", "use_sliding_window", "sliding_window", "max_window_layers"],
  ropeScalings: ["none", "linear", "llama3"],
  qkNorm: true,
  oBiasWithQkv: true,
  loraTargets: ["q", "k", "v", "o", "gate", "up", "down"],
  readConfig(raw, src) {
    if (raw.use_sliding_window === true) {
      throw new ModelConfigError(
        `${src}: use_sliding_window=true is not supported for Qwen3; set it to false (sinkflex's windowed attention is configured separately)`,
      );
    }
    return { qkvBias: raw.attention_bias === true, slidingWindow: null };
  },
  writeConfig(cfg: ModelConfig) {
    return {
      architectures: ["Qwen3ForCausalLM"],
      model_type: "qwen3",
      attention_bias: cfg.qkvBias,
      use_sliding_window: false,
      sliding_window: null,
      max_window_layers: cfg.numLayers,
    };
  },
  storedTensors: sameTensors,
  toEngine: identity,
  toStored: identity,
};
