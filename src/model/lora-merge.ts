/**
 * A LoRA adapter folder merged into its base checkpoint, written as a full checkpoint (what `sinkflex merge`
 * does): the weights W + (alpha / r) B A, the base's config, generation config, tokenizer files and mask.
 *
 * Apart from lora.ts so that the adapter code does not depend on checkpoint files; this file computes nothing
 * beyond the merge itself.
 */
import type { Kernels } from "../kernels/index.js";
import { loadCheckpoint, saveCheckpoint } from "./checkpoint.js";
import { loadLoraAdapter, mergeLora, type LoraTarget } from "./lora.js";
import { bindParams } from "./params.js";
import type { StDtype } from "./safetensors.js";
/**
 * Writes a full checkpoint at `outDir`: the base checkpoint folder with a PEFT LoRA adapter folder merged
 * into its weights (W + alpha / r B A), tokenizer files carried over, saved in `dtype` (default F32).
 */
export function mergeAdapterCheckpoint(
  k: Kernels, baseDir: string, adapterDir: string, outDir: string, opts: { dtype?: StDtype } = {},
): { merged: number; rank: number; targets: LoraTarget[] } {
  const ck = loadCheckpoint(baseDir);
  const adapter = loadLoraAdapter(adapterDir, ck.cfg);
  mergeLora(k, bindParams(ck.cfg, ck.entries, ck.data), adapter, 1);
  saveCheckpoint(outDir, ck.cfg, ck.entries, ck.data, {
    dtype: opts.dtype, tokenizerFrom: baseDir, generationConfig: ck.generationConfig, attention: ck.attention ?? undefined,
  });
  return { merged: adapter.entries.length, rank: adapter.lora.rank, targets: adapter.lora.targets };
}
