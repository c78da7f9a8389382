/**
 * The contract every model family implements: which Hugging Face `model_type` / `architectures` it
 * accepts, the config.json fields it reads, the RoPE scalings it computes exactly, its chat-template and
 * tool-call format, and how its checkpoint tensors map to and from the engine's parameter layout.
 *
 * This file declares types only. The families are in the sibling files, the registry in index.ts; the
 * generic config.json fields are read by ../config.ts and the engine layout is ../params.ts.
 */
import type { ModelArch, ModelConfig, RopeScaling } from "../config-types.js";
import type { ParamEntry } from "../config-types.js";
import type { TensorMap } from "../safetensors.js";
import type { ToolFormat } from "./tool-formats.js";

/** The chat-template and tool-call convention of a family's instruct models. */
export type ChatFormat = "qwen2.5-hermes" | "qwen3-hermes" | "llama3-json" | "phi3";

/** What a family reads from config.json beyond the fields every family shares. */
export interface FamilyConfigPart {
  /** Attention projections carry biases (see ModelConfig.qkvBias). */
  qkvBias: boolean;
  /** Keys further back than this many positions are masked out; null when the family has no window. */
  slidingWindow: number | null;
}

/**
 * A module a LoRA adapter may target, by peft's module name without "_proj" (../lora.ts): the engine's
 * projections, or Phi-3's fused qkv_proj / gate_up_proj.
 */
export type LoraTargetName = "q" | "k" | "v" | "qkv" | "o" | "gate" | "up" | "gate_up" | "down";

/** A tensor as a family's checkpoints store it. */
export interface StoredTensor {
  name: string;
  shape: number[];
}

export interface ModelFamily {
  arch: ModelArch;
  /** Human name of the models covered, for messages and docs ("Qwen2 / Qwen2.5"). */
  label: string;
  /** `model_type` values of config.json this family accepts. */
  modelTypes: readonly string[];
  /** `architectures` entries this family accepts (the transformers class names). */
  architectures: readonly string[];
  chatFormat: ChatFormat;
  /** How its instruct models write tool calls and read tool results (tool-formats.ts). */
  toolFormat: ToolFormat;
  /** config.json keys this family reads (beyond these, keys are ignored). */
  configFields: readonly string[];
  /** The RoPE scalings this family's models use and the engine computes. */
  ropeScalings: readonly RopeScaling["type"][];
  /** Per-head RMSNorm of queries and keys before RoPE (q_norm / k_norm). */
  qkNorm: boolean;
  /** With `qkvBias`, o_proj has a bias too. */
  oBiasWithQkv: boolean;
  /** The modules a LoRA adapter may target, as peft names them in this family's models (fused ones whole). */
  loraTargets: readonly LoraTargetName[];
  /** Reads the family-specific fields; `src` names the file in errors. */
  readConfig(raw: Record<string, unknown>, src: string): FamilyConfigPart;
  /** The family-specific keys of a config.json transformers loads (architectures, model_type, ...). */
  writeConfig(cfg: ModelConfig): Record<string, unknown>;
  /** The tensors a checkpoint of this family holds, given the engine layout of the same model. */
  storedTensors(cfg: ModelConfig, entries: ParamEntry[]): StoredTensor[];
  /** Stored (checkpoint) tensors to engine-named tensors; tensors not renamed pass through. */
  toEngine(cfg: ModelConfig, stored: TensorMap): TensorMap;
  /** Engine-named tensors to the names and shapes the family's checkpoints use. */
  toStored(cfg: ModelConfig, engine: TensorMap): TensorMap;
}
