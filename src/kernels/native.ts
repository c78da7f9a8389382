/**
 * The native kernels: loads the C++ addon (native/, built by node-gyp at install) and presents it as the
 * `Kernels` interface. Argument sizes are checked inside the addon (a wrong shape throws, it never reads
 * out of bounds). This file does not choose between native and reference kernels (see index.ts).
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Kernels, PackedWeight, Q8Weight } from "./kernels.js";

/** How the native matrix products compute (setMatmulPrecision). */
export const MATMUL_PRECISIONS = ["fp32", "bf16"] as const;
export type MatmulPrecision = (typeof MATMUL_PRECISIONS)[number];
/** The unit that computes bf16 products (see `bf16Unit`). */
export type Bf16Unit = "amx" | "avx512-bf16" | "none";

/** The raw functions the addon exports (positional arguments; see native/src/addon.cc). */
export interface NativeAddon {
  sgemm(...args: unknown[]): void;
  sgemv(...args: unknown[]): void;
  /** Absent from an addon built before bf16 weights: see nativeKernelsFrom. */
  gemmW16?(...args: unknown[]): void;
  packedWeightSize(N: number, K: number): number;
  packWeight(...args: unknown[]): void;
  sgemmPacked(...args: unknown[]): void;
  quantizeQ8?(...args: unknown[]): void;
  gemmQ8?(...args: unknown[]): void;
  axpy(...args: unknown[]): void;
  scale(...args: unknown[]): void;
  add(...args: unknown[]): void;
  sumSquares(n: number, x: Float32Array): number;
  addBias(...args: unknown[]): void;
  biasBackward(...args: unknown[]): void;
  embeddingForward(...args: unknown[]): void;
  embeddingBackward(...args: unknown[]): void;
  rmsnormForward(...args: unknown[]): void;
  rmsnormBackward(...args: unknown[]): void;
  rope(...args: unknown[]): void;
  swigluForward(...args: unknown[]): void;
  swigluBackward(...args: unknown[]): void;
  softmaxRows(...args: unknown[]): void;
  logprobsForward(...args: unknown[]): void;
  logprobsBackward(...args: unknown[]): void;
  adamwUpdate(...args: unknown[]): void;
  attentionForward(...args: unknown[]): void;
  attentionBackward(...args: unknown[]): void;
  attentionCached(...args: unknown[]): void;
  info(): { simd: "avx512" | "avx2" | "neon" | "portable"; threads: number; bf16Unit: Bf16Unit; matmul: MatmulPrecision };
  setThreads(n: number): void;
  setMatmulPrecision(p: MatmulPrecision): MatmulPrecision;
  peakGflops(seconds: number, threads: number): number;
}

const here = dirname(fileURLToPath(import.meta.url));
/** Where node-gyp puts the addon. */
export const nativeAddonPath = resolve(here, "..", "..", "native", "build", "Release", "sinkflex_native.node");

let cached: { addon: NativeAddon | null; error: string | null } | null = null;

/** Loads the addon once; returns null (and the reason in `nativeLoadError()`) if it is missing or broken. */
export function loadNativeAddon(): NativeAddon | null {
  if (cached) return cached.addon;
  if (!existsSync(nativeAddonPath)) {
    cached = {
      addon: null,
      error: `the native addon is not built (${nativeAddonPath} is missing); npm skipped the install script that builds it, or the build failed; build it with \`npx sinkflex build-native\``,
    };
    return null;
  }
  try {
    const require = createRequire(join(here, "native.ts"));
    cached = { addon: require(nativeAddonPath) as NativeAddon, error: null };
  } catch (err) {
    cached = {
      addon: null,
      error: `the native addon failed to load (${(err as Error).message}); rebuild it with \`npx sinkflex build-native\``,
    };
  }
  return cached.addon;
}

/** Why the addon could not be loaded, or null if it loaded (or was not tried yet). */
export function nativeLoadError(): string | null {
  return cached?.error ?? null;
}

/** Sets the native thread pool size (default: SINKFLEX_THREADS, else the number of cores). */
export function setNativeThreads(n: number): void {
  const addon = loadNativeAddon();
  if (!addon) throw new Error(`setNativeThreads: ${nativeLoadError()}`);
  addon.setThreads(n);
}

/**
 * How the native matrix products compute: "fp32" (the default), or "bf16": operands rounded to bfloat16,
 * products accumulated in fp32, on the CPU's AMX tile unit (Intel Xeon 4th generation and later) or with its
 * AVX512-BF16 dot products (AMD Zen 4 and later): see `bf16Unit`. Applies process-wide to sgemm (every product
 * of more than 4 rows, attention's included); decoding's products of a few rows and packed weights stay
 * fp32. Returns the precision in effect: "fp32" where the CPU or OS has neither unit, whatever was asked. The
 * environment variable SINKFLEX_MATMUL sets the starting value.
 */
export function setMatmulPrecision(p: MatmulPrecision): MatmulPrecision {
  const addon = loadNativeAddon();
  if (!addon) return "fp32";
  return addon.setMatmulPrecision(p);
}

/**
 * What computes bf16 products here: "amx" (Intel's tile unit), "avx512-bf16" (the dot-product instruction),
 * or "none" (no such unit, or no native addon). The two units give the same values up to fp32 rounding
 * (each accumulates the exact products in fp32, in its own order). SINKFLEX_BF16_UNIT=avx512-bf16 makes
 * an AMX CPU use the dot products.
 */
export function bf16Unit(): Bf16Unit {
  return loadNativeAddon()?.info().bf16Unit ?? "none";
}

/** Whether the native kernels can compute in bf16 here (the addon is loaded and the CPU and OS run AMX or AVX512-BF16). */
export function bf16Available(): boolean {
  return bf16Unit() !== "none";
}

/** GFLOP/s of a tight FMA loop on `threads` threads (0 = all): the machine's compute limit. */
export function measurePeakGflops(seconds = 0.5, threads = 0): number {
  const addon = loadNativeAddon();
  if (!addon) throw new Error(`measurePeakGflops: ${nativeLoadError()}`);
  return addon.peakGflops(seconds, threads);
}

/** Wraps a loaded addon into the Kernels interface. */
export function nativeKernelsFrom(a: NativeAddon): Kernels {
  return {
    name: "native",
    describe() {
      const i = a.info();
      return `native (${i.simd}${i.matmul === "bf16" ? `, bf16 products on ${i.bf16Unit === "amx" ? "AMX" : "AVX512-BF16"}` : ""}, ${i.threads} thread${i.threads === 1 ? "" : "s"})`;
    },
    sgemm: (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) =>
      a.sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc),
    sgemv: (tr, M, N, alpha, A, lda, x, beta, y) => a.sgemv(tr, M, N, alpha, A, lda, x, beta, y),
    gemmW16(tw, M, N, K, alpha, A, lda, W, ldw, beta, C, ldc) {
      if (!a.gemmW16) throw new Error("gemmW16: the native addon predates bf16 weights; rebuild it with `npx sinkflex build-native`");
      a.gemmW16(tw, M, N, K, alpha, A, lda, W, ldw, beta, C, ldc);
    },
    packWeight(N, K, W, ldw): PackedWeight {
      const data = new Float32Array(a.packedWeightSize(N, K));
      a.packWeight(N, K, W, ldw, data);
      return { kernels: "native", N, K, data };
    },
    quantizeWeight(N, K, W, ldw): Q8Weight {
      if (!a.quantizeQ8) throw new Error("quantizeWeight: the native addon predates int8 sampling weights; rebuild it with `npx sinkflex build-native`");
      const Kp = Math.ceil(K / 32) * 32;
      const q = new Int8Array(N * Kp);
      const scales = new Float32Array(N * (Kp / 32));
      a.quantizeQ8(N, K, W, ldw, q, scales);
      return { kernels: "native", N, K, q, scales };
    },
    gemmQ8(M, alpha, A, lda, W, beta, C, ldc) {
      if (W.kernels !== "native") throw new Error(`gemmQ8: this weight was quantized by the ${W.kernels} kernels; quantize it with the native kernels`);
      a.gemmQ8!(M, W.N, W.K, alpha, A, lda, W.q, W.scales, beta, C, ldc);
    },
    sgemmPacked(M, alpha, A, lda, W, beta, C, ldc) {
      if (W.kernels !== "native") throw new Error(`sgemmPacked: this weight was packed by the ${W.kernels} kernels; pack it with the native kernels`);
      a.sgemmPacked(M, W.N, W.K, alpha, A, lda, W.data, beta, C, ldc);
    },
    axpy: (n, alpha, x, y) => a.axpy(n, alpha, x, y),
    scale: (n, alpha, x) => a.scale(n, alpha, x),
    add: (n, x, y, out) => a.add(n, x, y, out),
    sumSquares: (n, x) => a.sumSquares(n, x),
    addBias: (N, C, x, bias) => a.addBias(N, C, x, bias),
    biasBackward: (N, C, dY, dBias) => a.biasBackward(N, C, dY, dBias),
    embeddingForward: (N, C, V, ids, table, out) => a.embeddingForward(N, C, V, ids, table, out),
    embeddingBackward: (N, C, V, ids, dOut, dTable) => a.embeddingBackward(N, C, V, ids, dOut, dTable),
    rmsnormForward: (N, C, eps, x, w, out, rstd) => a.rmsnormForward(N, C, eps, x, w, out, rstd),
    rmsnormBackward: (N, C, dOut, x, w, rstd, dX, dW) => a.rmsnormBackward(N, C, dOut, x, w, rstd, dX, dW),
    ropeForward: (N, H, D, pos, cos, sin, x) => a.rope(N, H, D, pos, cos, sin, x, false),
    ropeBackward: (N, H, D, pos, cos, sin, dX) => a.rope(N, H, D, pos, cos, sin, dX, true),
    swigluForward: (n, gate, up, out) => a.swigluForward(n, gate, up, out),
    swigluBackward: (n, dOut, gate, up, dGate, dUp) => a.swigluBackward(n, dOut, gate, up, dGate, dUp),
    softmaxRows: (N, V, t, x, out) => a.softmaxRows(N, V, t, x, out, false),
    logSoftmaxRows: (N, V, t, x, out) => a.softmaxRows(N, V, t, x, out, true),
    logprobsForward: (N, V, logits, targets, logprob, lse) => a.logprobsForward(N, V, logits, targets, logprob, lse),
    logprobsBackward: (N, V, logits, targets, lse, dLogprob, dLogits) =>
      a.logprobsBackward(N, V, logits, targets, lse, dLogprob, dLogits),
    adamwUpdate: (n, p, g, m, v, lr, b1, b2, eps, wd, step, gs) => a.adamwUpdate(n, p, g, m, v, lr, b1, b2, eps, wd, step, gs),
    attentionForward: (s, m, q, k, v, sink, out, lse) =>
      a.attentionForward(s.B, s.T, s.H, s.KVH, s.D, s.scale, m.window, m.sinks, m.docIds, m.pinned, q, k, v, sink, out, lse),
    attentionBackward: (s, m, q, k, v, sink, out, lse, dOut, dQ, dK, dV, dSink) =>
      a.attentionBackward(
        s.B, s.T, s.H, s.KVH, s.D, s.scale, m.window, m.sinks, m.docIds, m.pinned,
        q, k, v, sink, out, lse, dOut, dQ, dK, dV, dSink,
      ),
    attentionCached: (s, window, sinks, q, kCache, vCache, blockTable, seqLens, sink, out, pinned) =>
      a.attentionCached(
        s.B, s.Tq, s.H, s.KVH, s.D, s.scale, s.blockSize, s.maxBlocks, window, sinks,
        q, kCache, vCache, blockTable, seqLens, sink, out,
        ...(pinned ? [pinned.start, pinned.count, pinned.positions] : []),
      ),
  };
}

/** The native kernels, or null if the addon is unavailable (see nativeLoadError()). */
export function loadNativeKernels(): Kernels | null {
  const addon = loadNativeAddon();
  return addon ? nativeKernelsFrom(addon) : null;
}
