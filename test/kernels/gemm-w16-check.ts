/**
 * The check the gemmW16 tests run, in this process or a child one (SINKFLEX_SIMD is read once per process):
 * native gemmW16 against the reference on shapes with edges (depth not a multiple of 32, widths not of
 * 16, one row, a depth above one chunk), both orientations, beta 0, 1 and 0.5. A is rounded to bf16 first
 * and alpha is 1, so every path computes the same exact products and differs only in fp32 summation order.
 * Prints one JSON line with the largest error relative to the largest |C|. Not a test by itself.
 */
import { bf16Unit, loadNativeKernels, referenceKernels } from "../../src/kernels/index.js";

function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
}

/** bf16 bits of values, and the values they hold. */
function bf16Of(n: number, r: () => number): { bits: Uint16Array; values: Float32Array } {
  const values = Float32Array.from({ length: n }, r);
  const u = new Uint32Array(values.buffer);
  const bits = new Uint16Array(n);
  for (let i = 0; i < n; i++) {
    u[i] = u[i]! & 0xffff0000;
    bits[i] = u[i]! >>> 16;
  }
  return { bits, values };
}

export function checkGemmW16(): { simd: string; bf16Unit: string; err: number } {
  const k = loadNativeKernels();
  if (!k) throw new Error("the native kernels are not built");
  const r = rng(3);
  let err = 0;
  for (const [M, N, K] of [[1, 37, 50], [3, 130, 70], [40, 300, 1100], [70, 129, 1700], [5, 16, 1], [33, 17, 33]] as const) {
    for (const transW of [true, false]) {
      for (const beta of [0, 1, 0.5]) {
        const A = bf16Of(M * K, r).values;
        const W = bf16Of(N * K, r).bits;
        const C0 = Float32Array.from({ length: M * N }, r);
        const got = C0.slice();
        const want = C0.slice();
        const ldw = transW ? K : N;
        k.gemmW16(transW, M, N, K, 1, A, K, W, ldw, beta, got, N);
        referenceKernels.gemmW16(transW, M, N, K, 1, A, K, W, ldw, beta, want, N);
        let scale = 0;
        let worst = 0;
        for (let i = 0; i < M * N; i++) {
          scale = Math.max(scale, Math.abs(want[i]!));
          worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
        }
        err = Math.max(err, worst / scale);
      }
    }
  }
  return { simd: (k.describe().match(/\((\w+)/) ?? [])[1] ?? "?", bf16Unit: bf16Unit(), err };
}

if (process.argv[1]?.endsWith("gemm-w16-check.ts")) process.stdout.write(JSON.stringify(checkGemmW16()) + "\n");
