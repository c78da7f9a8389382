/**
 * `sinkflex merge <base> <adapter> --out DIR`: writes a full checkpoint folder with a PEFT LoRA adapter
 * (one sinkflex trained, or peft's) merged into its base checkpoint's weights, for serving or training on
 * without the adapter.
 *
 * This file parses arguments and reports; the merge is model/lora-merge.ts's.
 */
import type { Command } from "commander";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { mergeAdapterCheckpoint, type StDtype } from "../../engine/index.js";
import { getKernels } from "../../kernels/index.js";
import { UsageError } from "../usage-error.js";

const DTYPES: Record<string, StDtype> = { f32: "F32", bf16: "BF16", f16: "F16" };

export function registerMergeCommand(program: Command): void {
  program
    .command("merge <base> <adapter>")
    .description("write a full checkpoint: a LoRA adapter folder (PEFT format) merged into its base checkpoint folder")
    .requiredOption("--out <dir>", "the folder to write the merged checkpoint to (replaced atomically if it exists)")
    .option("--dtype <dtype>", "on-disk dtype of the merged weights: f32, bf16 or f16", "f32")
    .action((base: string, adapter: string, opts: { out: string; dtype: string }) => {
      const dtype = DTYPES[opts.dtype.toLowerCase()];
      if (!dtype) throw new UsageError(`--dtype must be f32, bf16 or f16 (got "${opts.dtype}")`);
      if (!existsSync(resolve(base, "config.json"))) throw new UsageError(`${base} is not a checkpoint folder (no config.json); pass the base model the adapter was trained on`);
      if (!existsSync(resolve(adapter, "adapter_config.json"))) throw new UsageError(`${adapter} is not a LoRA adapter folder (no adapter_config.json)`);
      if (resolve(opts.out) === resolve(base) || resolve(opts.out) === resolve(adapter)) throw new UsageError("--out must be a new folder, not the base or the adapter");
      const r = mergeAdapterCheckpoint(getKernels(), base, adapter, opts.out, { dtype });
      console.log(`merged a rank-${r.rank} adapter on ${r.targets.join(", ")} (${r.merged} matrices) into ${base}: ${opts.out} (${opts.dtype})`);
    });
}
