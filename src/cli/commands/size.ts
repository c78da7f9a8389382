/**
 * `sinkflex size`: what a training config (or a model alone) needs in memory, before renting hardware:
 * parameters, weights in fp32 / bf16, gradients and AdamW state (full or LoRA), the KL term's frozen
 * reference, and the KV cache at the configured context and concurrency, per device (one model copy).
 * The model's shape comes from the checkpoint's config.json when the folder is here, else from a built-in
 * shape of a published model (`--shape qwen2.5-7b`, or guessed from the checkpoint's folder name).
 *
 * This file reads options and prints a table; the arithmetic is model/sizing.ts's.
 */
import type { Command } from "commander";
import { existsSync } from "node:fs";
import { join } from "node:path";
import {
  formatBytes, MODEL_SHAPES, shapeFromPath, sizeModel, sizingConfig, validateLoraConfig, type LoraConfig, type ModelConfig, type Sizing,
} from "../../engine/index.js";
import { loadConfigFile } from "../../pipeline/index.js";
import { UsageError } from "../usage-error.js";

interface SizeOptions {
  config?: string;
  shape?: string;
  context?: string;
  concurrency?: string;
  loraRank?: string;
  loraAlpha?: string;
  loraTargets?: string;
  kl?: boolean;
  json?: boolean;
}

function positiveInt(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`${name} must be an integer >= 1 (got "${v}")`);
  return n;
}

/** The model config, LoRA settings, context, concurrency and KL of a size request. */
function resolveRequest(o: SizeOptions): { cfg: ModelConfig; from: string; lora?: LoraConfig; context: number; concurrency: number; reference: boolean } {
  let modelRef = o.shape;
  let lora: LoraConfig | undefined;
  let context = 8192;
  let concurrency = 16;
  let reference = true;
  if (o.config) {
    const run = loadConfigFile(o.config);
    context = run.grpo.maxContextTokens;
    concurrency = run.grpo.concurrency;
    reference = run.grpo.klCoef > 0;
    if (run.model.lora) lora = validateLoraConfig(run.model.lora);
    const ck = run.model.checkpoint;
    if (!modelRef) {
      if (!ck) throw new UsageError(`${o.config} builds a fresh model (model.init); size a checkpoint config, or pass --shape`);
      if (existsSync(join(ck, "config.json"))) modelRef = ck;
      else {
        modelRef = shapeFromPath(ck);
        if (!modelRef) throw new UsageError(`${o.config}: model.checkpoint ${ck} is not here and its name matches no built-in shape; pass --shape (${Object.keys(MODEL_SHAPES).join(", ")})`);
      }
    }
  }
  if (!modelRef) throw new UsageError(`pass --config FILE (a training config) or --shape (a checkpoint folder or one of ${Object.keys(MODEL_SHAPES).join(", ")})`);
  if (o.context !== undefined) context = positiveInt("--context", o.context);
  if (o.concurrency !== undefined) concurrency = positiveInt("--concurrency", o.concurrency);
  if (o.kl !== undefined) reference = o.kl;
  if (o.loraRank !== undefined) {
    const rank = positiveInt("--lora-rank", o.loraRank);
    lora = validateLoraConfig({
      rank,
      alpha: o.loraAlpha === undefined ? rank : Number(o.loraAlpha),
      targets: (o.loraTargets ?? "q,k,v,o,gate,up,down").split(",").map((t) => t.trim()),
    }, "--lora-*");
  }
  try {
    return { ...sizingConfig(modelRef), lora, context, concurrency, reference };
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** The table `sinkflex size` prints. */
export function formatSizing(s: Sizing, r: { from: string; lora?: LoraConfig; context: number; concurrency: number; reference: boolean }): string {
  const row = (what: string, fp32: number, bf16: number) => `  ${what.padEnd(44)} ${formatBytes(fp32).padStart(12)} ${formatBytes(bf16).padStart(12)}`;
  const training = r.lora ? `LoRA rank ${r.lora.rank} on ${r.lora.targets.join(",")}` : "full fine-tuning";
  return [
    `model: ${r.from}`,
    `parameters: ${s.parameters.toLocaleString("en-US")} (${(s.parameters / 1e9).toFixed(2)}B); trainable (${training}): ${s.trainable.toLocaleString("en-US")}`,
    `per device, one model copy; activations not counted`,
    `  ${"".padEnd(44)} ${"fp32 weights".padStart(12)} ${"bf16 weights".padStart(12)}`,
    row("weights", s.weightsFp32, s.weightsBf16),
    ...(r.lora ? [row("adapter weights (fp32)", s.adapter, s.adapter)] : [row("fp32 master copy (training bf16 weights)", 0, s.masterBf16)]),
    row("gradients (fp32, trainable only)", s.gradients, s.gradients),
    row("AdamW moments (2 x fp32, trainable only)", s.optimizer, s.optimizer),
    row(r.reference ? "KL reference (frozen copy)" : "KL reference (none: KL 0)", s.referenceFp32, s.referenceBf16),
    row(`KV cache (${r.context} tokens x ${r.concurrency} sequences)`, s.kvCacheFp32, s.kvCacheBf16),
    row("total", s.totalFp32, s.totalBf16),
    `KV cache per token: ${formatBytes(s.kvPerTokenFp32)} fp32, ${formatBytes(s.kvPerTokenFp32 / 2)} bf16`,
  ].join("\n");
}

export function registerSizeCommand(program: Command): void {
  program
    .command("size")
    .description("print what a training config (or a model) needs in memory: parameters, weights, gradients, optimizer state, KL reference and KV cache")
    .option("--config <file>", "a training config: its model.checkpoint (config.json when the folder is here), model.lora, grpo.maxContextTokens, grpo.concurrency and grpo.klCoef")
    .option("--shape <name-or-dir>", `the model: a checkpoint folder, or a built-in shape (${Object.keys(MODEL_SHAPES).join(", ")}); overrides the config's checkpoint`)
    .option("--context <tokens>", "tokens per sequence in the KV cache (default: the config's grpo.maxContextTokens, else 8192)")
    .option("--concurrency <n>", "sequences decoded at once (default: the config's grpo.concurrency, else 16)")
    .option("--lora-rank <r>", "size a LoRA adapter of this rank (overrides the config's model.lora)")
    .option("--lora-alpha <alpha>", "the adapter's alpha (default: the rank; does not change sizes)")
    .option("--lora-targets <list>", "comma-separated projections for --lora-rank: q,k,v,o,gate,up,down (default all)")
    .option("--kl", "count a frozen KL reference copy (default: when the config's grpo.klCoef > 0, else yes)")
    .option("--no-kl", "do not count a KL reference copy")
    .option("--json", "print the numbers as JSON (bytes)")
    .action((o: SizeOptions) => {
      const r = resolveRequest(o);
      const s = sizeModel(r.cfg, { lora: r.lora, context: r.context, concurrency: r.concurrency, reference: r.reference });
      if (o.json) console.log(JSON.stringify({ model: r.from, lora: r.lora ?? null, context: r.context, concurrency: r.concurrency, reference: r.reference, ...s }, null, 2));
      else console.log(formatSizing(s, r));
    });
}
