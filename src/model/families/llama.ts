/**
 * The Llama family (Llama 3.0, 3.1, 3.2 and Llama-architecture models): `rope_scaling` of type `llama3`
 * (3.1, 3.2) or linear, tied embeddings (3.2 1B/3B), optional q/k/v/o biases (`attention_bias`).
 *
 * This file declares the family; the decoder math is ../transformer.ts.
 */
import type { ModelConfig } from "../config-types.js";
import { COMMON_FIELDS, identity, sameTensors } from "./shared.js";
import type { ModelFamily } from "./types.js";

export const llamaFamily: ModelFamily = {
  arch: "llama",
  label: "Llama 3 / 3.1 / 3.2",
  modelTypes: ["llama"],
  architectures: ["LlamaForCausalLM"],
  chatFormat: "llama3-json",
  toolFormat: "llama3-json",
  configFields: [...COMMON_FIELDS, "attention_bias", "pretraining_tp"],
  ropeScalings: ["none", "linear", "llama3"],
  qkNorm: false,
  oBiasWithQkv: true,
  loraTargets: ["q", "k", "v", "o", "gate", "up", "down"],
  readConfig(raw) {
    return { qkvBias: raw.attention_bias === true, slidingWindow: null };
  },
  writeConfig(cfg: ModelConfig) {
    return {
      architectures: ["LlamaForCausalLM"],
      model_type: "llama",
      attention_bias: cfg.qkvBias,
      mlp_bias: false,
      pretraining_tp: 1,
    };
  },
  storedTensors: sameTensors,
  toEngine: identity,
  toStored: identity,
};
