/**
 * LoRA adapters: a rank-r update y = W x + (alpha / r) B A x on any of a decoder's q/k/v/o/gate/up/down
 * projections, with A [r, in] and B [out, r] in one flat Float32Array (the trainable parameters when an
 * engine trains an adapter: gradients and AdamW moments share this layout, not the model's). The targets
 * are the modules of the family's checkpoints as peft sees them: Phi-3's fused qkv_proj and gate_up_proj are
 * one target each (one A; B's rows stacked as the fused weight's), which the engine, holding q/k/v and
 * gate/up apart, runs as its parts: projection q gets B's first rows, k the next, and so on, all with the
 * shared A (so A's gradient sums the parts').
 *
 * How the adapter runs: the engine keeps the base weights merged with the adapter (W + s B A, s = alpha / r)
 * in its parameter buffer, so sampling and scoring run at the base model's speed; `loraBackward` gives the
 * adapter's gradients from a projection's input and output gradient, and an optimizer step un-merges the old
 * adapter and merges the new one (`mergeLora` with sign -1 then +1; fp32 rounding of the base weights is the
 * only difference from keeping them apart). Over weights held in bf16 (which cannot hold a merged update) the
 * adapter runs beside them instead: `LoraGrads.forward` adds s B A x to each adapted projection and
 * `LoraGrads.backward` adds the adapter's input gradient (the engine sets `Model.lora` for this).
 *
 * Files are PEFT's: `adapter_config.json` and `adapter_model.safetensors` with tensor names
 * `base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`, so `peft.PeftModel.from_pretrained`
 * loads what `saveLoraAdapter` writes, and `loadLoraAdapter` reads what peft saves (plain LoRA: no DoRA,
 * rsLoRA, bias or per-module ranks).
 *
 * This file does not run the model (transformer.ts) and does not own the optimizer (optimizer.ts); it reads
 * and writes adapter folders (a merged full checkpoint is lora-merge.ts's).
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { isAbsolute, join, resolve } from "node:path";
import { Rng } from "../core/index.js";
import type { Kernels } from "../kernels/index.js";
import type { ModelConfig } from "./config-types.js";
import { familyOf } from "./families/index.js";
import type { LoraTargetName } from "./families/types.js";
import type { LayerParams, ModelParams, WeightMatrix } from "./params.js";
import { readSafetensors, writeSafetensors, type NamedTensor } from "./safetensors.js";

/**
 * The modules an adapter may target, by their short names (peft's module names without "_proj"); each family
 * allows its own (`ModelFamily.loraTargets`: Phi-3's fused qkv and gate_up instead of q, k, v, gate, up).
 */
export const LORA_TARGETS = ["q", "k", "v", "qkv", "o", "gate", "up", "gate_up", "down"] as const satisfies readonly LoraTargetName[];
export type LoraTarget = (typeof LORA_TARGETS)[number];

/** The engine's projections (transformer.ts runs each as its own matrix). */
export type LoraProjection = "q" | "k" | "v" | "o" | "gate" | "up" | "down";

/** The projections a target covers, in the order a fused module stacks their rows. */
const TARGET_PARTS: Record<LoraTarget, LoraProjection[]> = {
  q: ["q"], k: ["k"], v: ["v"], qkv: ["q", "k", "v"], o: ["o"], gate: ["gate"], up: ["up"], gate_up: ["gate", "up"], down: ["down"],
};

/** Each target's module name in Hugging Face checkpoints (and peft's `target_modules`). */
export const LORA_MODULES: Record<LoraTarget, string> = {
  q: "self_attn.q_proj", k: "self_attn.k_proj", v: "self_attn.v_proj", qkv: "self_attn.qkv_proj", o: "self_attn.o_proj",
  gate: "mlp.gate_proj", up: "mlp.up_proj", gate_up: "mlp.gate_up_proj", down: "mlp.down_proj",
};

export const ADAPTER_CONFIG_FILE = "adapter_config.json";
export const ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors";

/** `model.lora` of a run config. */
export interface LoraConfig {
  /** r: the adapters' rank. */
  rank: number;
  /** The update is scaled by alpha / rank. */
  alpha: number;
  targets: LoraTarget[];
  /** Dropout on the adapters' input; only 0 is supported. */
  dropout?: number;
}

export class LoraError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "LoraError";
  }
}

/** Accepts a target's short name ("q") or its module name ("q_proj"); anything else is an error naming both lists. */
export function parseLoraTarget(name: string): LoraTarget {
  const short = name.replace(/_proj$/, "") as LoraTarget;
  if (!(LORA_TARGETS as readonly string[]).includes(short)) {
    throw new LoraError(`LoRA target "${name}" is not one of ${LORA_TARGETS.join(", ")} (or ${LORA_TARGETS.map((t) => `${t}_proj`).join(", ")})`);
  }
  return short;
}

/** Checks a LoRA config (`where` names it in errors) and returns it with its targets in canonical order. */
export function validateLoraConfig(raw: unknown, where = "model.lora"): LoraConfig {
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) {
    throw new LoraError(`${where} must be a mapping {rank, alpha, targets}, e.g. {rank: 16, alpha: 32, targets: [q, k, v, o]}`);
  }
  const o = raw as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!["rank", "alpha", "targets", "dropout"].includes(key)) throw new LoraError(`${where}.${key} is not a LoRA setting; use rank, alpha, targets, dropout`);
  }
  const rank = o.rank;
  if (!(typeof rank === "number" && Number.isInteger(rank) && rank >= 1)) throw new LoraError(`${where}.rank must be an integer >= 1 (got ${JSON.stringify(rank)})`);
  const alpha = o.alpha ?? rank;
  if (!(typeof alpha === "number" && Number.isFinite(alpha) && alpha > 0)) throw new LoraError(`${where}.alpha must be a number > 0 (got ${JSON.stringify(o.alpha)})`);
  if (!Array.isArray(o.targets) || o.targets.length === 0 || !o.targets.every((t) => typeof t === "string")) {
    throw new LoraError(`${where}.targets must be a non-empty list of ${LORA_TARGETS.join(", ")} (the model family's modules)`);
  }
  const set = new Set((o.targets as string[]).map(parseLoraTarget));
  const dropout = o.dropout ?? 0;
  if (dropout !== 0) throw new LoraError(`${where}.dropout must be 0 (got ${JSON.stringify(o.dropout)}); LoRA dropout is not implemented`);
  return { rank, alpha, targets: LORA_TARGETS.filter((t) => set.has(t)), dropout: 0 };
}

/** One adapted module of one layer: where A [r, in] and B [out, r] sit in the adapter buffer. */
export interface LoraEntry {
  layer: number;
  target: LoraTarget;
  inDim: number;
  outDim: number;
  aOffset: number;
  bOffset: number;
  /** The engine projections it covers: B's rows row .. row + rows - 1 update `projection` (one part unless fused). */
  parts: { projection: LoraProjection; row: number; rows: number }[];
}

/** An adapter for one model: its config, layout and parameters (`data`: every A and B, flat). */
export interface LoraAdapter {
  lora: LoraConfig;
  entries: LoraEntry[];
  data: Float32Array;
  /** alpha / rank. */
  scale: number;
}

/** [out, in] of an engine projection. */
function projectionShape(cfg: ModelConfig, p: LoraProjection): [number, number] {
  const C = cfg.hiddenSize;
  const Q = cfg.numHeads * cfg.headDim;
  const KV = cfg.numKvHeads * cfg.headDim;
  const F = cfg.intermediateSize;
  switch (p) {
    case "q": return [Q, C];
    case "k": case "v": return [KV, C];
    case "o": return [C, Q];
    case "gate": case "up": return [F, C];
    case "down": return [C, F];
  }
}

/** [out, in] of a target module (a fused one stacks its parts' rows). */
export function targetShape(cfg: ModelConfig, t: LoraTarget): [number, number] {
  const shapes = TARGET_PARTS[t].map((p) => projectionShape(cfg, p));
  return [shapes.reduce((n, [out]) => n + out, 0), shapes[0]![1]];
}

/** Refuses targets that are not modules of the model's family, naming the family's modules. */
function checkFamilyTargets(cfg: ModelConfig, targets: readonly LoraTarget[]): void {
  const family = familyOf(cfg.arch);
  const bad = targets.filter((t) => !family.loraTargets.includes(t));
  if (bad.length === 0) return;
  const names = (ts: readonly string[]) => ts.map((t) => `${t}_proj`).join(", ");
  throw new LoraError(
    `LoRA target${bad.length > 1 ? "s" : ""} ${names(bad)} ${bad.length > 1 ? "are not modules" : "is not a module"} of ${family.label} models; ` +
      `target among their modules: ${names(family.loraTargets)} (short names ${family.loraTargets.join(", ")})`,
  );
}

/** The adapter's layout for a model: entries in layer order, then target order; returns the total floats. */
export function loraLayout(cfg: ModelConfig, lora: LoraConfig): { entries: LoraEntry[]; total: number } {
  checkFamilyTargets(cfg, lora.targets);
  const r = lora.rank;
  const entries: LoraEntry[] = [];
  let offset = 0;
  for (let layer = 0; layer < cfg.numLayers; layer++) {
    for (const target of lora.targets) {
      const [outDim, inDim] = targetShape(cfg, target);
      let row = 0;
      const parts = TARGET_PARTS[target].map((projection) => {
        const rows = projectionShape(cfg, projection)[0];
        row += rows;
        return { projection, row: row - rows, rows };
      });
      entries.push({ layer, target, inDim, outDim, aOffset: offset, bOffset: offset + r * inDim, parts });
      offset += r * (inDim + outDim);
    }
  }
  return { entries, total: offset };
}

/** The number of trainable parameters of an adapter on a model. */
export function loraParamCount(cfg: ModelConfig, lora: LoraConfig): number {
  checkFamilyTargets(cfg, lora.targets);
  let n = 0;
  for (const t of lora.targets) {
    const [outDim, inDim] = targetShape(cfg, t);
    n += lora.rank * (inDim + outDim);
  }
  return n * cfg.numLayers;
}

/**
 * A fresh adapter as peft initializes one: A ~ kaiming-uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)),
 * B = 0, so the adapted model starts equal to the base.
 */
export function createLoraAdapter(cfg: ModelConfig, lora: LoraConfig, seed: number): LoraAdapter {
  const valid = validateLoraConfig(lora);
  const { entries, total } = loraLayout(cfg, valid);
  const data = new Float32Array(total);
  const rng = new Rng(seed, "xoshiro128**");
  for (const e of entries) {
    const bound = 1 / Math.sqrt(e.inDim);
    const A = data.subarray(e.aOffset, e.aOffset + valid.rank * e.inDim);
    for (let i = 0; i < A.length; i++) A[i] = (2 * rng.uniform() - 1) * bound;
  }
  return { lora: valid, entries, data, scale: valid.alpha / valid.rank };
}

/** A [r, in] and B [out, r] of one entry inside `buf` (the adapter's data or a buffer of its layout). */
export function loraViews(a: LoraAdapter, e: LoraEntry, buf: Float32Array = a.data): { A: Float32Array; B: Float32Array } {
  const r = a.lora.rank;
  return { A: buf.subarray(e.aOffset, e.aOffset + r * e.inDim), B: buf.subarray(e.bOffset, e.bOffset + e.outDim * r) };
}

/** The base weight [out, in] of an engine projection, in a layer's parameter views. */
export function projectionWeight(layer: LayerParams, p: LoraProjection): WeightMatrix {
  return layer[p];
}

/** W += sign * (alpha / r) * B A for every adapted projection (sign -1 removes a merged adapter). */
export function mergeLora(k: Kernels, params: ModelParams, a: LoraAdapter, sign: 1 | -1 = 1): void {
  const r = a.lora.rank;
  for (const e of a.entries) {
    const { A, B } = loraViews(a, e);
    for (const part of e.parts) {
      const W = projectionWeight(params.layers[e.layer]!, part.projection);
      if (W instanceof Uint16Array) throw new LoraError("mergeLora: the weights are held in bf16 and cannot hold a merged adapter; run it beside them (Model.lora), or hold the weights in fp32");
      const Bp = B.subarray(part.row * r, (part.row + part.rows) * r);
      k.sgemm(false, false, part.rows, e.inDim, r, sign * a.scale, Bp, r, A, e.inDim, 1, W, e.inDim);
    }
  }
}

/** One projection's share of an entry: the shared A [r, in] and its rows of B [rows, r] (of `buf`'s layout). */
interface ProjectionLora {
  entry: LoraEntry;
  row: number;
  rows: number;
}

/** An adapter's gradient buffer (its layout) and the [N, r] scratch of `loraBackward`. */
export class LoraGrads {
  readonly data: Float32Array;
  private u = new Float32Array(0);
  private g = new Float32Array(0);
  /** each layer's adapted projections (a fused target's parts each) */
  private readonly byLayer: Map<LoraProjection, ProjectionLora>[];

  constructor(readonly adapter: LoraAdapter, layers: number) {
    this.data = new Float32Array(adapter.data.length);
    this.byLayer = Array.from({ length: layers }, () => new Map());
    for (const e of adapter.entries) {
      for (const p of e.parts) this.byLayer[e.layer]!.set(p.projection, { entry: e, row: p.row, rows: p.rows });
    }
  }

  /** A [r, in] and this projection's rows of B [rows, r], in the adapter's data or a buffer of its layout. */
  private views(pl: ProjectionLora, buf: Float32Array): { A: Float32Array; B: Float32Array } {
    const r = this.adapter.lora.rank;
    const { A, B } = loraViews(this.adapter, pl.entry, buf);
    return { A, B: B.subarray(pl.row * r, (pl.row + pl.rows) * r) };
  }

  /**
   * The adapter beside the weights: y [N, out] += s (x A^T) B^T for `projection` in `layer` (when adapted),
   * x [N, in] the projection's input.
   */
  forward(k: Kernels, layer: number, projection: LoraProjection, N: number, x: Float32Array, y: Float32Array): void {
    const pl = this.byLayer[layer]?.get(projection);
    if (!pl) return;
    const r = this.adapter.lora.rank;
    const inDim = pl.entry.inDim;
    this.ensure(N);
    const { A, B } = this.views(pl, this.adapter.data);
    k.sgemm(false, true, N, r, inDim, 1, x, inDim, A, inDim, 0, this.u, r);
    k.sgemm(false, true, N, pl.rows, r, this.adapter.scale, this.u, r, B, r, 1, y, pl.rows);
  }

  private ensure(N: number): void {
    const r = this.adapter.lora.rank;
    if (this.u.length < N * r) {
      this.u = new Float32Array(N * r);
      this.g = new Float32Array(N * r);
    }
  }

  /**
   * Accumulates the gradients of A and B of `projection` in `layer` (when adapted) from the projection's
   * input x [N, in] and output gradient dY [N, out]: with u = x A^T, dB += s dY^T u and dA += s (dY B)^T x
   * (B, dB: the projection's rows; a fused target's A gathers every part's term). With the adapter merged
   * into the weights (W + s B A) the input gradient needs no term here; with it beside them, pass the input
   * gradient dX [N, in] and s (dY B) A is added to it.
   */
  backward(k: Kernels, layer: number, projection: LoraProjection, N: number, x: Float32Array, dY: Float32Array, dX: Float32Array | null = null): void {
    const pl = this.byLayer[layer]?.get(projection);
    if (!pl) return;
    const r = this.adapter.lora.rank;
    const s = this.adapter.scale;
    const inDim = pl.entry.inDim;
    const out = pl.rows;
    this.ensure(N);
    const { A, B } = this.views(pl, this.adapter.data);
    const { A: dA, B: dB } = this.views(pl, this.data);
    k.sgemm(false, true, N, r, inDim, 1, x, inDim, A, inDim, 0, this.u, r);
    k.sgemm(true, false, out, r, N, s, dY, out, this.u, r, 1, dB, r);
    k.sgemm(false, false, N, r, out, 1, dY, out, B, r, 0, this.g, r);
    k.sgemm(true, false, r, inDim, N, s, this.g, r, x, inDim, 1, dA, inDim);
    if (dX) k.sgemm(false, false, N, inDim, r, s, this.g, r, A, inDim, 1, dX, inDim);
  }
}

/** peft's name of an entry's A or B in adapter_model.safetensors. */
export function peftTensorName(e: LoraEntry, which: "A" | "B"): string {
  return `base_model.model.model.layers.${e.layer}.${LORA_MODULES[e.target]}.lora_${which}.weight`;
}

/** Writes an adapter folder peft loads: adapter_config.json and adapter_model.safetensors (F32). */
export function saveLoraAdapter(
  dir: string, a: LoraAdapter, opts: { baseModel?: string; meta?: Record<string, unknown>; tokenizerFrom?: string } = {},
): void {
  mkdirSync(dir, { recursive: true });
  // The base's tokenizer files too, so the folder serves and trains like a checkpoint folder.
  if (opts.tokenizerFrom && existsSync(opts.tokenizerFrom) && resolve(opts.tokenizerFrom) !== resolve(dir)) {
    for (const f of readdirSync(opts.tokenizerFrom)) {
      if (/^(tokenizer.*\.json|vocab\.json|merges\.txt|special_tokens_map\.json|added_tokens\.json|chat_template\.jinja|sinkflex-vocab.*)$/.test(f)) {
        copyFileSync(join(opts.tokenizerFrom, f), join(dir, f));
      }
    }
  }
  const r = a.lora.rank;
  const tensors: [string, NamedTensor][] = [];
  for (const e of a.entries) {
    const { A, B } = loraViews(a, e);
    tensors.push([peftTensorName(e, "A"), { shape: [r, e.inDim], data: A }]);
    tensors.push([peftTensorName(e, "B"), { shape: [e.outDim, r], data: B }]);
  }
  writeSafetensors(join(dir, ADAPTER_WEIGHTS_FILE), tensors);
  const config = {
    peft_type: "LORA",
    task_type: "CAUSAL_LM",
    base_model_name_or_path: opts.baseModel ?? null,
    r,
    lora_alpha: a.lora.alpha,
    lora_dropout: 0,
    target_modules: a.lora.targets.map((t) => `${t}_proj`),
    bias: "none",
    fan_in_fan_out: false,
    use_rslora: false,
    use_dora: false,
    init_lora_weights: true,
    modules_to_save: null,
    inference_mode: true,
    ...(opts.meta ? { sinkflex: opts.meta } : {}),
  };
  writeFileSync(join(dir, ADAPTER_CONFIG_FILE), JSON.stringify(config, null, 2) + "\n");
}

/**
 * The base checkpoint folder an adapter folder names (`base_model_name_or_path`, relative to the adapter
 * folder or absolute); an error saying what to do when it is not a folder here.
 */
export function loraBaseDir(dir: string): string {
  const raw = JSON.parse(readFileSync(join(dir, ADAPTER_CONFIG_FILE), "utf8")) as Record<string, unknown>;
  const base = raw.base_model_name_or_path;
  const fix = `set base_model_name_or_path in ${join(dir, ADAPTER_CONFIG_FILE)} to the base checkpoint folder, or write a full checkpoint with \`sinkflex merge <base> ${dir} --out DIR\``;
  if (typeof base !== "string" || base === "") throw new LoraError(`${dir}: the adapter does not name its base model; ${fix}`);
  const path = isAbsolute(base) ? base : resolve(dir, base);
  if (!existsSync(join(path, "config.json"))) throw new LoraError(`${dir}: its base model "${base}" is not a checkpoint folder here (no ${join(path, "config.json")}); ${fix}`);
  return path;
}

/** Whether a folder holds a PEFT adapter. */
export function isLoraAdapterDir(dir: string): boolean {
  return existsSync(join(dir, ADAPTER_CONFIG_FILE));
}

/** Reads a PEFT LoRA folder (ours or peft's) for a model of config `cfg`; anything it cannot represent is an error. */
export function loadLoraAdapter(dir: string, cfg: ModelConfig): LoraAdapter & { meta: Record<string, unknown> | null } {
  const cfgPath = join(dir, ADAPTER_CONFIG_FILE);
  if (!existsSync(cfgPath)) throw new LoraError(`${dir}: no ${ADAPTER_CONFIG_FILE}; pass a PEFT LoRA adapter folder`);
  const raw = JSON.parse(readFileSync(cfgPath, "utf8")) as Record<string, unknown>;
  const bad = (what: string) => new LoraError(`${cfgPath}: ${what}`);
  if (raw.peft_type !== "LORA") throw bad(`peft_type is ${JSON.stringify(raw.peft_type)}; only LORA adapters load`);
  if (raw.use_dora || raw.use_rslora) throw bad("DoRA and rsLoRA adapters are not supported; train a plain LoRA");
  if (raw.bias && raw.bias !== "none") throw bad(`bias "${raw.bias}" is not supported; only bias "none"`);
  if (raw.fan_in_fan_out) throw bad("fan_in_fan_out adapters are not supported");
  for (const key of ["rank_pattern", "alpha_pattern"]) {
    if (raw[key] && Object.keys(raw[key] as object).length > 0) throw bad(`${key} (per-module ranks) is not supported`);
  }
  let targets = raw.target_modules;
  if (typeof targets === "string") throw bad(`target_modules is a pattern ("${targets}"); list the modules instead`);
  targets = (targets as string[]).map((t) => t.split(".").pop()!);
  const lora = validateLoraConfig({ rank: raw.r, alpha: raw.lora_alpha, targets }, cfgPath);
  const { entries, total } = loraLayout(cfg, lora);
  const data = new Float32Array(total);
  const wp = join(dir, ADAPTER_WEIGHTS_FILE);
  if (!existsSync(wp)) throw new LoraError(`${dir}: no ${ADAPTER_WEIGHTS_FILE}`);
  const tensors = readSafetensors(wp);
  const seen = new Set<string>();
  const r = lora.rank;
  for (const e of entries) {
    const views = { A: data.subarray(e.aOffset, e.aOffset + r * e.inDim), B: data.subarray(e.bOffset, e.bOffset + e.outDim * r) };
    for (const which of ["A", "B"] as const) {
      const name = peftTensorName(e, which);
      // peft writes the adapter name into the key when saving with a non-default one: accept ".lora_A.default.weight" too.
      const t = tensors.get(name) ?? tensors.get(name.replace(/\.weight$/, ".default.weight"));
      const want = which === "A" ? [r, e.inDim] : [e.outDim, r];
      if (!t) throw new LoraError(`${wp}: tensor ${name} is missing; the adapter does not match this model (layers ${cfg.numLayers}, targets ${lora.targets.join(",")})`);
      if (t.shape.join(",") !== want.join(",")) throw new LoraError(`${wp}: ${name} has shape [${t.shape}], this model needs [${want}]`);
      views[which].set(t.data);
      seen.add(name);
    }
  }
  if (seen.size !== tensors.size) {
    const extra = [...tensors.keys()].filter((n) => !seen.has(n) && !seen.has(n.replace(/\.default\.weight$/, ".weight")));
    if (extra.length > 0) throw new LoraError(`${wp}: tensors this adapter layout does not use (${extra.slice(0, 3).join(", ")}${extra.length > 3 ? ", ..." : ""}); is it for another model?`);
  }
  return { lora, entries, data, scale: lora.alpha / lora.rank, meta: (raw.sinkflex as Record<string, unknown>) ?? null };
}
