/**
 * Which kernels sinkflex computes with: the native addon by default, the TypeScript reference when the
 * addon is missing (said once, on stderr) or when SINKFLEX_KERNELS=reference. SINKFLEX_KERNELS=native
 * makes a missing addon an error instead of a fallback. This file chooses; it computes nothing.
 */
import type { Kernels } from "./kernels.js";
import { loadNativeKernels, nativeLoadError } from "./native.js";
import { referenceKernels } from "./reference.js";

export type { AttentionMask, AttentionShape, CachedAttentionShape, Kernels, PackedWeight, SinkWindow, Trans } from "./kernels.js";
export { SHARED_DOC } from "./kernels.js";
export { referenceKernels } from "./reference.js";
export { bf16Available, bf16Unit, loadNativeKernels, measurePeakGflops, nativeLoadError, setMatmulPrecision, setNativeThreads } from "./native.js";
export type { MatmulPrecision } from "./native.js";

let chosen: Kernels | null = null;
let warned = false;

/**
 * The kernels to use: `which` ("native" | "reference"), else SINKFLEX_KERNELS, else native with a
 * reference fallback.
 */
export function getKernels(which?: "native" | "reference"): Kernels {
  const want = which ?? process.env.SINKFLEX_KERNELS ?? "";
  if (want !== "" && want !== "native" && want !== "reference") {
    throw new Error(`SINKFLEX_KERNELS must be "native" or "reference", got "${want}"`);
  }
  if (want === "reference") return referenceKernels;
  if (want === "native") {
    const k = loadNativeKernels();
    if (!k) throw new Error(`native kernels requested but unavailable: ${nativeLoadError()}`);
    return k;
  }
  if (chosen) return chosen;
  const k = loadNativeKernels();
  if (k) {
    chosen = k;
  } else {
    chosen = referenceKernels;
    if (!warned) {
      warned = true;
      process.stderr.write(`sinkflex: using the TypeScript reference kernels (slow): ${nativeLoadError()}\n`);
    }
  }
  return chosen;
}
