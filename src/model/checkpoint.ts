/**
 * Checkpoint folders in the Hugging Face layout: `config.json`, `model.safetensors` (or shards plus
 * `model.safetensors.index.json`), `generation_config.json`, and the tokenizer files passed through.
 * Loads folders written by transformers' `save_pretrained`; writes folders transformers loads. Writes are
 * atomic: everything goes to a temporary sibling folder which is then renamed into place. Beside the
 * Hugging Face files, sinkflex writes its own: `sinkflex.json` (policy version) and `sinkflex_attention.json`
 * (the sink-window mask the weights were trained with; its format is src/attention's).
 *
 * This file maps tensors to the parameter layout (params.ts); it does not run the model, and it does not
 * parse tokenizers (it only copies their files).
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { parseSinkWindowRecord, SINK_WINDOW_FILE, sinkWindowRecord, type SinkWindow } from "../attention/index.js";
import { parseHfConfig, toHfConfig, type ModelConfig } from "./config.js";
import type { ModelWeights } from "./instance.js";
import { paramLayout, type ParamEntry } from "./params.js";
import {
  INDEX_FILE, readSafetensorsDir, readSafetensorsHeader, SINGLE_FILE, writeSafetensors, writeSafetensorsDir,
  type StDtype, type TensorMap,
} from "./safetensors.js";

export class CheckpointError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CheckpointError";
  }
}

/** sinkflex's own metadata, kept beside the Hugging Face files (ignored by transformers). */
export interface SinkflexMeta {
  policyVersion: number;
  [key: string]: unknown;
}

export const SINKFLEX_META_FILE = "sinkflex.json";

export interface LoadedCheckpoint extends ModelWeights {
  sinkLogits: boolean;
  generationConfig: Record<string, unknown> | null;
  meta: SinkflexMeta | null;
  /** The sink-window mask saved with the weights (sinkflex_attention.json); null when the folder has none. */
  attention: SinkWindow | null;
  dir: string;
}

const TOKENIZER_FILE = /^(tokenizer.*|vocab.*|merges\.txt|special_tokens_map\.json|added_tokens\.json|chat_template\.(jinja|json)|sinkflex-vocab.*)$/;

/** Loads a checkpoint folder (config + safetensors) into a flat parameter buffer. */
export function loadCheckpoint(dir: string): LoadedCheckpoint {
  const cfgPath = join(dir, "config.json");
  if (!existsSync(cfgPath)) throw new CheckpointError(`${dir}: no config.json; pass a Hugging Face checkpoint folder`);
  const config = parseHfConfig(JSON.parse(readFileSync(cfgPath, "utf8")));
  // The layout depends on whether sink logits are present: read the headers first.
  const names = tensorNames(dir);
  const sinkLogits = names.some((n) => n.endsWith(".self_attn.sinks"));
  const { entries, total } = paramLayout(config, { sinkLogits });
  const known = new Set(entries.map((e) => e.name));
  const unexpected = names.filter(
    (n) => !known.has(n) && !n.endsWith("rotary_emb.inv_freq") && !(config.tieWordEmbeddings && n === "lm_head.weight"),
  );
  if (unexpected.length > 0) {
    throw new CheckpointError(
      `${dir}: unexpected tensors ${unexpected.slice(0, 5).join(", ")}${unexpected.length > 5 ? ", ..." : ""}; ` +
        `this is not a plain Qwen2/Llama decoder checkpoint`,
    );
  }
  const data = new Float32Array(total);
  const byName = new Map(entries.map((e) => [e.name, e]));
  const tensors = readSafetensorsDir(dir, (name, shape) => {
    const e = byName.get(name);
    if (!e || shape.length !== e.shape.length || shape.some((x, i) => x !== e.shape[i])) return undefined;
    return data.subarray(e.offset, e.offset + e.size);
  });
  for (const e of entries) {
    const t = tensors.get(e.name);
    if (!t) {
      throw new CheckpointError(
        `${dir}: tensor "${e.name}" is missing; the weights do not match config.json (${config.arch}, ${config.numLayers} layers)`,
      );
    }
    if (t.shape.length !== e.shape.length || t.shape.some((s, i) => s !== e.shape[i])) {
      throw new CheckpointError(
        `${dir}: tensor "${e.name}" has shape ${JSON.stringify(t.shape)}, config.json implies ${JSON.stringify(e.shape)}`,
      );
    }
    if (t.data.buffer !== data.buffer) data.set(t.data, e.offset);
  }
  const genPath = join(dir, "generation_config.json");
  const metaPath = join(dir, SINKFLEX_META_FILE);
  const attentionPath = join(dir, SINK_WINDOW_FILE);
  let attention: SinkWindow | null = null;
  if (existsSync(attentionPath)) {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(attentionPath, "utf8"));
    } catch (e) {
      throw new CheckpointError(`${attentionPath}: not valid JSON (${(e as Error).message}); rewrite it or remove it to load with full attention`);
    }
    attention = parseSinkWindowRecord(json, attentionPath);
  }
  return {
    cfg: config,
    entries,
    data,
    sinkLogits,
    generationConfig: existsSync(genPath) ? JSON.parse(readFileSync(genPath, "utf8")) : null,
    meta: existsSync(metaPath) ? JSON.parse(readFileSync(metaPath, "utf8")) : null,
    attention,
    dir,
  };
}

function tensorNames(dir: string): string[] {
  const indexPath = join(dir, INDEX_FILE);
  if (existsSync(indexPath)) {
    const index = JSON.parse(readFileSync(indexPath, "utf8")) as { weight_map?: Record<string, string> };
    return Object.keys(index.weight_map ?? {});
  }
  const single = join(dir, SINGLE_FILE);
  return existsSync(single) ? [...readSafetensorsHeader(single).entries.keys()] : [];
}

export interface SaveOptions {
  /** On-disk dtype of the weights. Default F32. */
  dtype?: StDtype;
  /** Split into shards of at most this many bytes (with an index). Default: one file. */
  maxShardBytes?: number;
  /** Copy tokenizer files (tokenizer.json, tokenizer_config.json, ...) from this folder when present. */
  tokenizerFrom?: string;
  generationConfig?: Record<string, unknown> | null;
  meta?: SinkflexMeta;
  /** The sink-window mask the weights were trained with, written to sinkflex_attention.json ({0, 0} = full attention). */
  attention?: SinkWindow;
  /** Extra tensors written to `name` (e.g. optimizer state) as safetensors in the same folder. */
  extraFiles?: { name: string; tensors: TensorMap }[];
}

/** Writes a checkpoint folder atomically (a temporary sibling folder renamed over `dir`). */
export function saveCheckpoint(
  dir: string, config: ModelConfig, entries: ParamEntry[], data: Float32Array, opts: SaveOptions = {},
): void {
  const target = resolve(dir);
  const parent = dirname(target);
  mkdirSync(parent, { recursive: true });
  const tmp = join(parent, `.${basename(target)}.tmp-${process.pid}-${Date.now()}`);
  mkdirSync(tmp);
  try {
    const tensors: TensorMap = new Map();
    for (const e of entries) tensors.set(e.name, { shape: e.shape, data: data.subarray(e.offset, e.offset + e.size) });
    writeSafetensorsDir(tmp, tensors, { dtype: opts.dtype, maxShardBytes: opts.maxShardBytes });
    const hf = toHfConfig(config);
    if (opts.dtype && opts.dtype !== "F32") hf.torch_dtype = opts.dtype === "BF16" ? "bfloat16" : "float16";
    writeFileSync(join(tmp, "config.json"), JSON.stringify(hf, null, 2) + "\n");
    const gen = opts.generationConfig ?? {
      _from_model_config: true,
      ...(config.bosTokenId !== undefined ? { bos_token_id: config.bosTokenId } : {}),
      ...(config.eosTokenId !== undefined ? { eos_token_id: config.eosTokenId } : {}),
    };
    writeFileSync(join(tmp, "generation_config.json"), JSON.stringify(gen, null, 2) + "\n");
    if (opts.meta) writeFileSync(join(tmp, SINKFLEX_META_FILE), JSON.stringify(opts.meta, null, 2) + "\n");
    if (opts.attention) writeFileSync(join(tmp, SINK_WINDOW_FILE), JSON.stringify(sinkWindowRecord(opts.attention), null, 2) + "\n");
    if (opts.tokenizerFrom && existsSync(opts.tokenizerFrom)) {
      for (const f of readdirSync(opts.tokenizerFrom)) {
        if (TOKENIZER_FILE.test(f)) copyFileSync(join(opts.tokenizerFrom, f), join(tmp, f));
      }
    }
    for (const x of opts.extraFiles ?? []) writeSafetensors(join(tmp, x.name), x.tensors);
    const old = existsSync(target) ? `${tmp}.old` : null;
    if (old) renameSync(target, old);
    renameSync(tmp, target);
    if (old) rmSync(old, { recursive: true, force: true });
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
}
