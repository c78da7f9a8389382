/**
 * The Phi-3 family (Phi-3-mini 4k/128k, Phi-3.5-mini): fused `qkv_proj` ([H*D + 2*KVH*D, C], rows q
 * then k then v) and `gate_up_proj` ([2F, C], rows gate then up), split into the engine's separate q/k/v
 * and gate/up at load and fused back at save; no biases; untied embeddings; a padded vocab (32064 rows
 * for 32011 ids); `longrope` (formerly `su`) RoPE scaling with short and long factors; a sliding window.
 *
 * What the engine computes exactly, and what it refuses: longrope as transformers computes it, the short
 * factors for a sequence of up to `original_max_position_embeddings` tokens and the long factors at every
 * position of a longer one (../rope.ts); a sliding window is exact while a sequence fits in it (no key is
 * masked yet), and past it the RoPE table refuses the position with a message saying so. LoRA adapts the
 * fused modules whole, as peft does (../lora.ts).
 *
 * This file declares the family; the decoder math is ../transformer.ts.
 */
import { ModelConfigError, type ModelConfig } from "../config-types.js";
import type { ParamEntry } from "../config-types.js";
import type { NamedTensor, TensorMap } from "../safetensors.js";
import { COMMON_FIELDS, optionalPosInt } from "./shared.js";
import type { ModelFamily, StoredTensor } from "./types.js";

const layerOf = (name: string): string | null => /^(model\.layers\.\d+\.)/.exec(name)?.[1] ?? null;

function dims(cfg: ModelConfig): { C: number; qDim: number; kvDim: number; F: number } {
  return { C: cfg.hiddenSize, qDim: cfg.numHeads * cfg.headDim, kvDim: cfg.numKvHeads * cfg.headDim, F: cfg.intermediateSize };
}

function rows(t: NamedTensor, from: number, count: number, width: number): NamedTensor {
  return { shape: [count, width], data: t.data.subarray(from * width, (from + count) * width) };
}

function stack(parts: NamedTensor[], width: number): NamedTensor {
  const n = parts.reduce((a, p) => a + p.shape[0]!, 0);
  const data = new Float32Array(n * width);
  let at = 0;
  for (const p of parts) {
    data.set(p.data, at);
    at += p.data.length;
  }
  return { shape: [n, width], data };
}

export const phi3Family: ModelFamily = {
  arch: "phi3",
  label: "Phi-3 / Phi-3.5",
  modelTypes: ["phi3"],
  architectures: ["Phi3ForCausalLM"],
  chatFormat: "phi3",
  toolFormat: "phi3-hermes",
  configFields: [...COMMON_FIELDS, "sliding_window", "original_max_position_embeddings", "attention_bias"],
  ropeScalings: ["none", "linear", "longrope"],
  qkNorm: false,
  oBiasWithQkv: false,
  // peft adapts the fused modules whole: one A, B rows stacked as the weight's (q, k, v / gate, up).
  loraTargets: ["qkv", "o", "gate_up", "down"],
  readConfig(raw, src) {
    if (raw.attention_bias === true) {
      throw new ModelConfigError(`${src}: attention_bias=true is not supported for Phi-3 (its qkv_proj has no bias); set it to false`);
    }
    const err = (m: string) => new ModelConfigError(m);
    return { qkvBias: false, slidingWindow: optionalPosInt(raw, "sliding_window", src, err) };
  },
  writeConfig(cfg: ModelConfig) {
    const rs = cfg.ropeScaling;
    return {
      architectures: ["Phi3ForCausalLM"],
      model_type: "phi3",
      attention_bias: false,
      // transformers' Phi3Config defaults a missing pad_token_id to 32000, past a small vocab's rows.
      pad_token_id: cfg.padTokenId ?? null,
      sliding_window: cfg.slidingWindow ?? null,
      ...(rs.type === "longrope" ? { original_max_position_embeddings: rs.originalMaxPositionEmbeddings } : {}),
    };
  },
  storedTensors(cfg: ModelConfig, entries: ParamEntry[]): StoredTensor[] {
    const { C, qDim, kvDim, F } = dims(cfg);
    const out: StoredTensor[] = [];
    for (const e of entries) {
      const p = layerOf(e.name);
      if (p && e.name === `${p}self_attn.q_proj.weight`) out.push({ name: `${p}self_attn.qkv_proj.weight`, shape: [qDim + 2 * kvDim, C] });
      else if (p && e.name === `${p}mlp.gate_proj.weight`) out.push({ name: `${p}mlp.gate_up_proj.weight`, shape: [2 * F, C] });
      else if (p && (e.name.endsWith(".self_attn.k_proj.weight") || e.name.endsWith(".self_attn.v_proj.weight") || e.name.endsWith(".mlp.up_proj.weight"))) continue;
      else out.push({ name: e.name, shape: e.shape });
    }
    return out;
  },
  toEngine(cfg: ModelConfig, stored: TensorMap): TensorMap {
    const { C, qDim, kvDim, F } = dims(cfg);
    const out: TensorMap = new Map();
    for (const [name, t] of stored) {
      const p = layerOf(name);
      if (p && name === `${p}self_attn.qkv_proj.weight`) {
        out.set(`${p}self_attn.q_proj.weight`, rows(t, 0, qDim, C));
        out.set(`${p}self_attn.k_proj.weight`, rows(t, qDim, kvDim, C));
        out.set(`${p}self_attn.v_proj.weight`, rows(t, qDim + kvDim, kvDim, C));
      } else if (p && name === `${p}mlp.gate_up_proj.weight`) {
        out.set(`${p}mlp.gate_proj.weight`, rows(t, 0, F, C));
        out.set(`${p}mlp.up_proj.weight`, rows(t, F, F, C));
      } else out.set(name, t);
    }
    return out;
  },
  toStored(cfg: ModelConfig, engine: TensorMap): TensorMap {
    const { C } = dims(cfg);
    const out: TensorMap = new Map();
    for (const [name, t] of engine) {
      const p = layerOf(name);
      const get = (n: string): NamedTensor => {
        const x = engine.get(`${p}${n}`);
        if (!x) throw new ModelConfigError(`Phi-3 save: tensor "${p}${n}" is missing; it is fused with ${name}`);
        return x;
      };
      if (p && name === `${p}self_attn.q_proj.weight`) {
        out.set(`${p}self_attn.qkv_proj.weight`, stack([t, get("self_attn.k_proj.weight"), get("self_attn.v_proj.weight")], C));
      } else if (p && name === `${p}mlp.gate_proj.weight`) {
        out.set(`${p}mlp.gate_up_proj.weight`, stack([t, get("mlp.up_proj.weight")], C));
      } else if (p && /\.(self_attn\.[kv]_proj|mlp\.up_proj)\.weight$/.test(name)) continue;
      else out.set(name, t);
    }
    return out;
  },
};
