/**
 * Pieces shared by the families whose checkpoints use the engine's own tensor names (Qwen2, Qwen3,
 * Llama): identity mappings and the common config.json keys.
 *
 * This file holds no family; see the sibling files.
 */
import type { ModelConfig } from "../config-types.js";
import type { ParamEntry } from "../config-types.js";
import type { TensorMap } from "../safetensors.js";
import type { StoredTensor } from "./types.js";

/** config.json keys every family reads (../config.ts). */
export const COMMON_FIELDS = [
  "model_type", "architectures", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
  "num_key_value_heads", "head_dim", "hidden_act", "vocab_size", "rms_norm_eps", "rope_theta", "rope_scaling",
  "rope_parameters", "max_position_embeddings", "tie_word_embeddings", "partial_rotary_factor", "mlp_bias",
  "bos_token_id", "eos_token_id", "pad_token_id",
] as const;

export function sameTensors(_cfg: ModelConfig, entries: ParamEntry[]): StoredTensor[] {
  return entries.map((e) => ({ name: e.name, shape: e.shape }));
}

export function identity(_cfg: ModelConfig, tensors: TensorMap): TensorMap {
  return tensors;
}

/** A positive integer or null/absent (null); anything else is an error naming the key and the file. */
export function optionalPosInt(raw: Record<string, unknown>, key: string, src: string, err: (m: string) => Error): number | null {
  const v = raw[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== "number" || !Number.isInteger(v) || v <= 0) {
    throw err(`${src}: "${key}" must be a positive integer or null (got ${JSON.stringify(v)})`);
  }
  return v;
}
