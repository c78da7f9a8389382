/**
 * Which kernels sinkflex computes with: the native addon by default, the TypeScript reference when the
 * addon is missing (said once per process, on stderr, with how to build it: `fallbackNotice`) or when
 * SINKFLEX_KERNELS=reference. SINKFLEX_KERNELS=native makes a missing addon an error instead of a fallback. This file chooses; it computes nothing.
 */
import { isMainThread } from "node:worker_threads";
import type { Kernels } from "./kernels.js";
import { loadNativeKernels, nativeLoadError } from "./native.js";
import { referenceKernels } from "./reference.js";

export type { AttentionMask, AttentionShape, CachedAttentionShape, CachedPinned, Kernels, PackedWeight, Q8Weight, SinkWindow, Trans } from "./kernels.js";
export { SHARED_DOC } from "./kernels.js";
export { referenceKernels } from "./reference.js";
export { bf16Available, bf16Unit, loadNativeKernels, measurePeakGflops, nativeLoadError, setMatmulPrecision, setNativeThreads } from "./native.js";
export type { MatmulPrecision } from "./native.js";

let chosen: Kernels | null = null;

/**
 * What sinkflex prints when it falls back to the reference kernels: that it is slow, why the addon is
 * missing, and the commands that build it (npm skips the install script of a package installed from a
 * path, a tarball or git until its scripts are approved).
 */
export function fallbackNotice(reason: string | null): string {
  return [
    "sinkflex: WARNING: the native kernels are not available, so sinkflex runs on the TypeScript reference kernels (many times slower).",
    `  why: ${reason ?? "unknown"}`,
    "  fix: npx sinkflex build-native    (or npm rebuild sinkflex; needs a C++17 compiler, make and python3)",
    "  (SINKFLEX_KERNELS=reference chooses the reference kernels on purpose and says nothing.)",
  ].join("\n");
}
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
    // Once per process: worker threads have their own copy of this module, and the main thread speaks for them.
    if (!warned && isMainThread) {
      warned = true;
      process.stderr.write(`${fallbackNotice(nativeLoadError())}\n`);
    }
  }
  return chosen;
}
export { documentPositions, maskKeeps } from "./kernels.js";
export { MATMUL_PRECISIONS } from "./native.js";
