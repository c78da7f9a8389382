/**
 * The Qwen2 family (Qwen2, Qwen2.5 and their instruct/coder variants): q/k/v biases (always, no o_proj
 * bias), tied (0.5B-3B) or untied embeddings, a vocab_size padded above the tokenizer's ids (151936 rows
 * for 151665 ids). Qwen2.5's config carries `sliding_window` with `use_sliding_window: false`; a window
 * actually in use is refused.
 *
 * This file declares the family; the decoder math is ../transformer.ts.
 */
import { ModelConfigError, type ModelConfig } from "../config-types.js";
import { COMMON_FIELDS, identity, sameTensors } from "./shared.js";
import type { ModelFamily } from "./types.js";

export const qwen2Family: ModelFamily = {
  arch: "qwen2",
  label: "Qwen2 / Qwen2.5",
  modelTypes: ["qwen2"],
  architectures: ["Qwen2ForCausalLM"],
  chatFormat: "qwen2.5-hermes",
  toolFormat: "hermes",
  configFields: [...COMMON_FIELDS, "use_sliding_window", "sliding_window", "max_window_layers"],
  ropeScalings: ["none", "linear", "llama3"],
  qkNorm: false,
  oBiasWithQkv: false,
  loraTargets: ["q", "k", "v", "o", "gate", "up", "down"],
  readConfig(raw, src) {
    if (raw.use_sliding_window === true) {
      throw new ModelConfigError(
        `${src}: use_sliding_window=true is not supported for Qwen2/Qwen2.5; set it to false (sinkflex's windowed attention is configured separately)`,
      );
    }
    return { qkvBias: true, slidingWindow: null };
  },
  writeConfig(cfg: ModelConfig) {
    if (!cfg.qkvBias) throw new ModelConfigError("Qwen2 models always have q/k/v biases; set qkvBias: true or use arch llama");
    return {
      architectures: ["Qwen2ForCausalLM"],
      model_type: "qwen2",
      use_sliding_window: false,
      sliding_window: null,
      max_window_layers: cfg.numLayers,
    };
  },
  storedTensors: sameTensors,
  toEngine: identity,
  toStored: identity,
};
