/**
 * Checkpoint folders in the Hugging Face layout: `config.json`, `model.safetensors` (or shards plus
 * `model.safetensors.index.json`), `generation_config.json`, and the tokenizer files passed through.
 * Loads folders written by transformers' `save_pretrained`; writes folders transformers loads. Writes are
 * atomic: everything goes to a temporary sibling folder which is then renamed into place. Beside the
 * Hugging Face files, sinkflex writes its own: `sinkflex.json` (policy version) and `sinkflex_attention.json`
 * (the sink-window mask the weights were trained with; its format is src/attention's).
 *
 * This file maps a family's stored tensors (fused or renamed ones through the family's mapping, see
 * ./families/) to the engine's parameter layout (params.ts) and back; it does not run the model, and it
 * does not parse tokenizers (it only copies their files).
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { parseSinkWindowRecord, SINK_PROFILE_FILE, SINK_WINDOW_FILE, sinkWindowRecord, type SinkWindow } from "./sink-window.js";
import { parseHfConfig, toHfConfig, type ModelConfig } from "./config.js";
import { familyOf } from "./families/index.js";
import { convertWeights, weightDtype, type ModelWeights } from "./instance.js";
import { isMatrixEntry, paramLayout, widenBf16, type ParamEntry, type WeightDtype } from "./params.js";
import {
  INDEX_FILE, readSafetensors, readSafetensorsBf16, readSafetensorsDir, readSafetensorsHeader, safetensorsFiles, SINGLE_FILE,
  writeSafetensors, writeSafetensorsDir, type StDtype, type TensorMap, type WritableTensor,
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
  /** The sink profile saved with the weights (sinkflex_sink_profile.json, JSON as written); null when the folder has none. */
  sinkProfile: Record<string, unknown> | null;
  dir: string;
}

const TOKENIZER_FILE = /^(tokenizer.*|vocab.*|merges\.txt|special_tokens_map\.json|added_tokens\.json|chat_template\.(jinja|json)|sinkflex-vocab.*)$/;

/**
 * Loads a checkpoint folder (config + safetensors) of any registered family into a flat parameter buffer.
 * `dtype` "bf16" holds the weights as bf16 (see WeightDtype): a family stored under the engine's own names
 * (Qwen2, Qwen3, Llama) is read tensor by tensor straight into bf16 (BF16 files are copied with no fp32
 * step; the norms and biases stay exact fp32); a fused family (Phi-3) is read in fp32 and then rounded.
 */
export function loadCheckpoint(dir: string, opts: { dtype?: WeightDtype } = {}): LoadedCheckpoint {
  const cfgPath = join(dir, "config.json");
  if (!existsSync(cfgPath)) throw new CheckpointError(`${dir}: no config.json; pass a Hugging Face checkpoint folder`);
  let rawConfig: unknown;
  try {
    rawConfig = JSON.parse(readFileSync(cfgPath, "utf8"));
  } catch (e) {
    throw new CheckpointError(`${cfgPath}: not valid JSON (${(e as Error).message})`);
  }
  const config = parseHfConfig(rawConfig, cfgPath);
  const family = familyOf(config.arch);
  // The layout depends on whether sink logits are present: read the headers first.
  const fileOf = tensorFiles(dir);
  const names = [...fileOf.keys()];
  const sinkLogits = names.some((n) => n.endsWith(".self_attn.sinks"));
  const { entries, total } = paramLayout(config, { sinkLogits });
  const stored = family.storedTensors(config, entries);
  const storedNames = new Set(stored.map((t) => t.name));
  const unexpected = names.filter(
    (n) => !storedNames.has(n) && !n.endsWith("rotary_emb.inv_freq") && !(config.tieWordEmbeddings && n === "lm_head.weight"),
  );
  if (unexpected.length > 0) {
    throw new CheckpointError(
      `${dir}: unexpected tensors ${unexpected.slice(0, 5).join(", ")}${unexpected.length > 5 ? ", ..." : ""} (in ${fileOf.get(unexpected[0]!)}); ` +
        `this is not a plain ${family.label} decoder checkpoint matching its config.json`,
    );
  }
  const byName = new Map(entries.map((e) => [e.name, e]));
  const missing = (name: string) => new CheckpointError(
    `${dir}: tensor "${name}" is missing from ${fileOf.size > 0 ? `${[...new Set(fileOf.values())].join(", ")}` : "the safetensors files"}; ` +
      `the weights do not match config.json (${family.label}, ${config.numLayers} layers${sinkLogits ? ", sink logits" : ""})`,
  );
  const badShape = (name: string, shape: number[], want: number[]) => new CheckpointError(
    `${join(dir, fileOf.get(name) ?? SINGLE_FILE)}: tensor "${name}" has shape ${JSON.stringify(shape)}, ` +
      `config.json implies ${JSON.stringify(want)}; the weights do not belong to this config.json`,
  );
  const sameNames = stored.length === entries.length && stored.every((t) => byName.has(t.name));
  const weights = opts.dtype === "bf16" && sameNames
    ? readBf16(dir, config, entries, total, stored.map((t) => t.name), missing, badShape)
    : convertWeights(readFp32(), opts.dtype ?? "fp32");

  function readFp32(): ModelWeights {
    const data = new Float32Array(total);
    // Tensors stored under the engine's own names are read straight into the buffer; fused ones are read
    // whole and split by the family's mapping.
    const read = readSafetensorsDir(dir, (name, shape) => {
      const e = byName.get(name);
      if (!e || !storedNames.has(name) || shape.length !== e.shape.length || shape.some((x, i) => x !== e.shape[i])) return undefined;
      return data.subarray(e.offset, e.offset + e.size);
    });
    const storedMap: TensorMap = new Map();
    for (const want of stored) {
      const t = read.get(want.name);
      if (!t) throw missing(want.name);
      if (t.shape.length !== want.shape.length || t.shape.some((x, i) => x !== want.shape[i])) throw badShape(want.name, t.shape, want.shape);
      storedMap.set(want.name, t);
    }
    const tensors = family.toEngine(config, storedMap);
    for (const e of entries) {
      const t = tensors.get(e.name);
      if (!t || t.data.length !== e.size) {
        throw new CheckpointError(`${dir}: the ${family.label} mapping gave no tensor of ${e.size} values for "${e.name}"; this is a bug in its family file`);
      }
      if (t.data.buffer !== data.buffer) data.set(t.data, e.offset);
    }
    return { cfg: config, entries, data };
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
  const profilePath = join(dir, SINK_PROFILE_FILE);
  let sinkProfile: Record<string, unknown> | null = null;
  if (existsSync(profilePath)) {
    try {
      sinkProfile = JSON.parse(readFileSync(profilePath, "utf8")) as Record<string, unknown>;
    } catch (e) {
      throw new CheckpointError(`${profilePath}: not valid JSON (${(e as Error).message}); rewrite it with \`sinkflex sinks probe ${dir} --out ${profilePath}\` or remove it`);
    }
  }
  return {
    ...weights,
    sinkLogits,
    generationConfig: existsSync(genPath) ? JSON.parse(readFileSync(genPath, "utf8")) : null,
    meta: existsSync(metaPath) ? JSON.parse(readFileSync(metaPath, "utf8")) : null,
    attention,
    sinkProfile,
    dir,
  };
}

/**
 * A checkpoint stored under the engine's names, held as bf16: every tensor read into its slot of one
 * bfloat16 buffer (the matrices kept only there), the vectors (norms, biases, sink logits) read again as
 * exact fp32.
 */
function readBf16(
  dir: string, cfg: ModelConfig, entries: ParamEntry[], total: number, names: string[],
  missing: (name: string) => Error, badShape: (name: string, shape: number[], want: number[]) => Error,
): ModelWeights {
  const data16 = new Uint16Array(total);
  const byName = new Map(entries.map((e) => [e.name, e]));
  const wanted = new Set(names);
  const got = new Set<string>();
  const vectors = new Map<string, Float32Array>();
  for (const f of safetensorsFiles(dir)) {
    const read = readSafetensorsBf16(f.path, (name, shape) => {
      const e = byName.get(name);
      if (!e || !wanted.has(name)) return undefined;
      if (shape.length !== e.shape.length || shape.some((x, i) => x !== e.shape[i])) throw badShape(name, shape, e.shape);
      return data16.subarray(e.offset, e.offset + e.size);
    }, f.names ?? undefined);
    for (const n of read.keys()) got.add(n);
    const small = (f.names ?? [...read.keys()]).filter((n) => byName.has(n) && wanted.has(n) && !isMatrixEntry(byName.get(n)!));
    for (const [n, t] of readSafetensors(f.path, small)) vectors.set(n, t.data);
  }
  for (const n of names) if (!got.has(n)) throw missing(n);
  return { cfg, entries, data: new Float32Array(0), dtype: "bf16", data16, vectors };
}

/** Every tensor name of a checkpoint folder with the file (relative to the folder) holding it. */
function tensorFiles(dir: string): Map<string, string> {
  const indexPath = join(dir, INDEX_FILE);
  if (existsSync(indexPath)) {
    const index = JSON.parse(readFileSync(indexPath, "utf8")) as { weight_map?: Record<string, string> };
    return new Map(Object.entries(index.weight_map ?? {}));
  }
  const single = join(dir, SINGLE_FILE);
  return new Map(existsSync(single) ? [...readSafetensorsHeader(single).entries.keys()].map((n) => [n, SINGLE_FILE]) : []);
}

export interface SaveOptions {
  /** On-disk dtype of the weights. Default: BF16 for weights held in bf16, else F32. */
  dtype?: StDtype;
  /** Split into shards of at most this many bytes (with an index). Default: one file. */
  maxShardBytes?: number;
  /** Copy tokenizer files (tokenizer.json, tokenizer_config.json, ...) from this folder when present. */
  tokenizerFrom?: string;
  generationConfig?: Record<string, unknown> | null;
  meta?: SinkflexMeta;
  /** The sink-window mask the weights were trained with, written to sinkflex_attention.json ({0, 0} = full attention). */
  attention?: SinkWindow;
  /** The sink profile the policy was laid out with, written as is to sinkflex_sink_profile.json. */
  sinkProfile?: Record<string, unknown> | null;
  /** Extra tensors written to `name` (e.g. optimizer state) as safetensors in the same folder. */
  extraFiles?: { name: string; tensors: TensorMap }[];
}

/** fp32 tensors (by name) of bfloat16 bits in the layout of `entries`. */
function widenedTensors(entries: ParamEntry[], data16: Uint16Array): TensorMap {
  return new Map(entries.map((e) => [e.name, { shape: e.shape, data: widenBf16(data16.subarray(e.offset, e.offset + e.size)) }]));
}

/** The data `saveCheckpoint` writes for weights as held: the fp32 buffer, or the bf16 one. */
export function heldData(w: ModelWeights): Float32Array | Uint16Array {
  return weightDtype(w) === "bf16" ? w.data16! : w.data;
}

/**
 * Writes a checkpoint folder atomically (a temporary sibling folder renamed over `dir`). `data`: fp32
 * parameters, or bfloat16 bits (weights held in bf16, written as they are under the default BF16).
 */
export function saveCheckpoint(
  dir: string, config: ModelConfig, entries: ParamEntry[], data: Float32Array | Uint16Array, opts: SaveOptions = {},
): void {
  const dtype = opts.dtype ?? (data instanceof Uint16Array ? "BF16" : "F32");
  const target = resolve(dir);
  const parent = dirname(target);
  mkdirSync(parent, { recursive: true });
  const tmp = join(parent, `.${basename(target)}.tmp-${process.pid}-${Date.now()}`);
  mkdirSync(tmp);
  try {
    const family = familyOf(config.arch);
    const held: Map<string, WritableTensor> = new Map();
    for (const e of entries) held.set(e.name, { shape: e.shape, data: data.subarray(e.offset, e.offset + e.size) });
    const stored = family.storedTensors(config, entries);
    const sameNames = stored.length === entries.length && stored.every((t) => held.has(t.name));
    // In the family's own names and fused layout (Phi-3's qkv_proj, gate_up_proj); bf16 bits go as they are
    // when the family stores the engine's tensors unchanged.
    const tensors = data instanceof Uint16Array && sameNames
      ? held
      : family.toStored(config, data instanceof Uint16Array ? widenedTensors(entries, data) : (held as TensorMap));
    writeSafetensorsDir(tmp, tensors, { dtype, maxShardBytes: opts.maxShardBytes });
    const hf = toHfConfig(config);
    if (dtype !== "F32") hf.torch_dtype = dtype === "BF16" ? "bfloat16" : "float16";
    writeFileSync(join(tmp, "config.json"), JSON.stringify(hf, null, 2) + "\n");
    const gen = opts.generationConfig ?? {
      _from_model_config: true,
      ...(config.bosTokenId !== undefined ? { bos_token_id: config.bosTokenId } : {}),
      ...(config.eosTokenId !== undefined ? { eos_token_id: config.eosTokenId } : {}),
    };
    writeFileSync(join(tmp, "generation_config.json"), JSON.stringify(gen, null, 2) + "\n");
    if (opts.meta) writeFileSync(join(tmp, SINKFLEX_META_FILE), JSON.stringify(opts.meta, null, 2) + "\n");
    if (opts.attention) writeFileSync(join(tmp, SINK_WINDOW_FILE), JSON.stringify(sinkWindowRecord(opts.attention), null, 2) + "\n");
    if (opts.sinkProfile) writeFileSync(join(tmp, SINK_PROFILE_FILE), JSON.stringify(opts.sinkProfile, null, 2) + "\n");
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
