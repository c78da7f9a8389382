/**
 * What a model needs in memory before any hardware is rented: parameters, weights in fp32 and bf16,
 * gradients and AdamW state for full training or for a LoRA adapter, the frozen reference a KL term keeps,
 * and the KV cache at a context length and number of concurrent sequences. Built-in shapes of published
 * models (their config.json values) let a config be sized without downloading the checkpoint.
 *
 * Numbers are for one copy of the model on one device (data-parallel replicas each hold all of it; the
 * embedded engine keeps gradients and optimizer moments in fp32). Activations are not counted: they depend
 * on the packed batch length and are freed after each backward. This file computes sizes only; it loads
 * nothing but a config.json.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parameterCount, parseHfConfig } from "./config.js";
import type { ModelConfig } from "./config-types.js";
import { loraParamCount, type LoraConfig } from "./lora.js";

/** config.json values of published checkpoints (the fields sizing reads, as Hugging Face publishes them). */
export const MODEL_SHAPES: Record<string, Record<string, unknown>> = {
  "qwen2.5-0.5b": qwen2(896, 4864, 24, 14, 2, true),
  "qwen2.5-1.5b": qwen2(1536, 8960, 28, 12, 2, true),
  "qwen2.5-3b": qwen2(2048, 11008, 36, 16, 2, true),
  "qwen2.5-7b": qwen2(3584, 18944, 28, 28, 4, false, 152064),
  "qwen2.5-14b": qwen2(5120, 13824, 48, 40, 8, false, 152064),
  "qwen3-8b": {
    architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", hidden_size: 4096, intermediate_size: 12288, num_hidden_layers: 36,
    num_attention_heads: 32, num_key_value_heads: 8, head_dim: 128, vocab_size: 151936, max_position_embeddings: 40960,
    rms_norm_eps: 1e-6, rope_theta: 1000000, tie_word_embeddings: false, attention_bias: false,
  },
  "llama3.1-8b": {
    architectures: ["LlamaForCausalLM"], model_type: "llama", hidden_size: 4096, intermediate_size: 14336, num_hidden_layers: 32,
    num_attention_heads: 32, num_key_value_heads: 8, vocab_size: 128256, max_position_embeddings: 131072, rms_norm_eps: 1e-5,
    rope_theta: 500000, tie_word_embeddings: false, attention_bias: false,
    rope_scaling: { rope_type: "llama3", factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 },
  },
};

function qwen2(C: number, F: number, L: number, H: number, KVH: number, tied: boolean, V = 151936): Record<string, unknown> {
  return {
    architectures: ["Qwen2ForCausalLM"], model_type: "qwen2", hidden_size: C, intermediate_size: F, num_hidden_layers: L,
    num_attention_heads: H, num_key_value_heads: KVH, vocab_size: V, max_position_embeddings: 32768, rms_norm_eps: 1e-6,
    rope_theta: 1000000, tie_word_embeddings: tied,
  };
}

export class SizingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SizingError";
  }
}

/**
 * A model's config from a checkpoint folder (its config.json), or a built-in shape by name (case-insensitive,
 * e.g. "qwen2.5-7b"). `from` says which was used.
 */
export function sizingConfig(nameOrDir: string): { cfg: ModelConfig; from: string } {
  const shape = MODEL_SHAPES[nameOrDir.toLowerCase()];
  if (shape) return { cfg: parseHfConfig(shape, `the built-in shape ${nameOrDir}`), from: `the built-in shape ${nameOrDir.toLowerCase()} (published config.json values)` };
  const path = join(nameOrDir, "config.json");
  if (existsSync(path)) return { cfg: parseHfConfig(JSON.parse(readFileSync(path, "utf8")), path), from: path };
  throw new SizingError(`"${nameOrDir}" is neither a checkpoint folder with config.json nor a built-in shape (${Object.keys(MODEL_SHAPES).join(", ")})`);
}

/** A built-in shape a checkpoint path's folder name suggests ("/models/Qwen2.5-7B-Instruct" -> qwen2.5-7b), if any. */
export function shapeFromPath(path: string): string | undefined {
  const base = path.replace(/[\\/]+$/, "").split(/[\\/]/).pop()!.toLowerCase().replace(/^meta-/, "").replace("llama-3.1", "llama3.1");
  return Object.keys(MODEL_SHAPES).find((name) => base === name || base.startsWith(`${name}-`));
}

export interface SizingRequest {
  /** Train a LoRA adapter (base frozen) instead of every weight. */
  lora?: LoraConfig;
  /** Tokens per sequence the KV cache holds (prompt and completion). */
  context: number;
  /** Sequences decoded at once. */
  concurrency: number;
  /** A KL term keeps a frozen reference copy of the weights. */
  reference: boolean;
}

export interface Sizing {
  parameters: number;
  /** Trainable parameters: all, or the adapter's. */
  trainable: number;
  /** Bytes of each item on one device. */
  weightsFp32: number;
  weightsBf16: number;
  /** fp32 gradients of what trains. */
  gradients: number;
  /** AdamW's two fp32 moments of what trains. */
  optimizer: number;
  /** The adapter's own fp32 weights (0 without LoRA). */
  adapter: number;
  /**
   * Full fine-tuning of bf16 weights: the fp32 master copy AdamW updates (the engine rounds it into the bf16
   * weights); counted in `totalBf16` only. 0 with LoRA (the adapter is fp32 already).
   */
  masterBf16: number;
  referenceFp32: number;
  referenceBf16: number;
  kvCacheFp32: number;
  kvCacheBf16: number;
  /** KV bytes per token (all layers, K and V) in fp32. */
  kvPerTokenFp32: number;
  /** Sums: training with fp32 weights (the embedded engine), and with bf16 weights and KV cache. */
  totalFp32: number;
  totalBf16: number;
}

/** The memory a model needs for `req`; every byte count is exact for the layout (no allocator overhead). */
export function sizeModel(cfg: ModelConfig, req: SizingRequest): Sizing {
  if (!(Number.isInteger(req.context) && req.context >= 1)) throw new SizingError(`context must be an integer >= 1 tokens (got ${req.context})`);
  if (!(Number.isInteger(req.concurrency) && req.concurrency >= 1)) throw new SizingError(`concurrency must be an integer >= 1 sequences (got ${req.concurrency})`);
  const parameters = parameterCount(cfg);
  const trainable = req.lora ? loraParamCount(cfg, req.lora) : parameters;
  const kvPerTokenFp32 = 2 * cfg.numLayers * cfg.numKvHeads * cfg.headDim * 4;
  const tokens = req.context * req.concurrency;
  const s = {
    parameters,
    trainable,
    weightsFp32: parameters * 4,
    weightsBf16: parameters * 2,
    gradients: trainable * 4,
    optimizer: trainable * 8,
    adapter: req.lora ? trainable * 4 : 0,
    masterBf16: req.lora ? 0 : parameters * 4,
    referenceFp32: req.reference ? parameters * 4 : 0,
    referenceBf16: req.reference ? parameters * 2 : 0,
    kvCacheFp32: kvPerTokenFp32 * tokens,
    kvCacheBf16: (kvPerTokenFp32 / 2) * tokens,
    kvPerTokenFp32,
  };
  return {
    ...s,
    totalFp32: s.weightsFp32 + s.adapter + s.gradients + s.optimizer + s.referenceFp32 + s.kvCacheFp32,
    totalBf16: s.weightsBf16 + s.masterBf16 + s.adapter + s.gradients + s.optimizer + s.referenceBf16 + s.kvCacheBf16,
  };
}

/** Bytes with two decimals in GiB, MiB or KiB (whichever keeps the number at least 1), or B. */
export function formatBytes(n: number): string {
  if (n === 0) return "0";
  for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]] as const) {
    if (n >= size) return `${(n / size).toFixed(2)} ${unit}`;
  }
  return `${n} B`;
}
