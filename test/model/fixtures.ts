/**
 * Test helpers: the committed transformers fixtures (test/fixtures/models/<name>/) and the kernel sets
 * every model test runs on.
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Kernels } from "../../src/kernels/kernels.js";
import { loadNativeKernels, referenceKernels } from "../../src/kernels/index.js";
import { readSafetensors, type TensorMap } from "../../src/model/safetensors.js";

export const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "models");
export const FIXTURE_MODELS = ["qwen2-tiny", "qwen3-tiny", "llama-tiny", "llama-bias-mqa"];

export interface Fixture {
  name: string;
  checkpoint: string;
  expected: TensorMap;
  meta: {
    batch: [number, number];
    loss: number;
    adamw: { lr: number; beta1: number; beta2: number; eps: number; weightDecay: number; maxGradNorm: number; steps: number };
    adamwLosses: number[];
    adamwGradNorms: number[];
    adamwFinalLoss: number;
    finalWeights: Record<string, { sum: number; sumsq: number }>;
  };
  inputIds: number[][];
}

export function loadFixture(name: string): Fixture {
  const dir = join(FIXTURES, name);
  const expected = readSafetensors(join(dir, "expected.safetensors"));
  const meta = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8"));
  const ids = expected.get("input_ids")!;
  const [B, T] = ids.shape as [number, number];
  const inputIds = Array.from({ length: B }, (_, b) => Array.from(ids.data.subarray(b * T, b * T + T), (x) => Math.round(x)));
  return { name, checkpoint: join(dir, "checkpoint"), expected, meta, inputIds };
}

/** The kernel sets to test: the reference always, the native one when it loads. */
export async function kernelSets(): Promise<Kernels[]> {
  const native = loadNativeKernels();
  return native ? [referenceKernels, native] : [referenceKernels];
}
