/**
 * The check the gemmW16 tests run, in this process or a child one (SINKFLEX_SIMD is read once per process):
 * native gemmW16 against the reference on shapes with edges (depth not a multiple of 32, widths not of
 * 16, one row, a depth above one chunk), both orientations, beta 0, 1 and 0.5. A is rounded to bf16 first
 * and alpha is 1, so every path computes the same exact products and differs only in fp32 summation order.
 * Then, bit for bit, that a row's values do not depend on how many rows the call has (a decoding sequence
 * must sample the same alone as beside others): the first 1..8 rows of a 32-row product, with W stored
 * [N, K] (a model's layout) and with a leading dimension above K, alpha not 1 and beta 0, 1 and 0.5.
 * Prints one JSON line with the largest error relative to the largest |C| and the count of values that
 * differ between the small calls and the 32-row one. Not a test by itself.
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

/** How many values of rows 0..m-1 of a 32-row gemmW16 (W [N, K], ldw >= K) change when the call has only m rows. */
function batchMismatches(): number {
  const k = loadNativeKernels()!;
  const r = rng(11);
  let bad = 0;
  for (const [N, K, pad] of [[37, 50, 0], [130, 896, 0], [151, 1700, 8], [64, 33, 3], [300, 64, 0]] as const) {
    const ldw = K + pad;
    const W = bf16Of(N * ldw, r).bits;
    const A = Float32Array.from({ length: 32 * K }, r); // not bf16: the kernels round it, all in one way
    for (const beta of [0, 1, 0.5]) {
      const C0 = Float32Array.from({ length: 32 * N }, r);
      const all = C0.slice();
      k.gemmW16(true, 32, N, K, 0.75, A, K, W, ldw, beta, all, N);
      for (let m = 1; m <= 8; m++) {
        const few = C0.slice(0, m * N);
        k.gemmW16(true, m, N, K, 0.75, A, K, W, ldw, beta, few, N);
        for (let i = 0; i < m * N; i++) if (!Object.is(few[i], all[i])) bad++;
      }
    }
  }
  return bad;
}

export function checkGemmW16(): { simd: string; bf16Unit: string; err: number; batchMismatches: number } {
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
  return { simd: (k.describe().match(/\((\w+)/) ?? [])[1] ?? "?", bf16Unit: bf16Unit(), err, batchMismatches: batchMismatches() };
}

if (process.argv[1]?.endsWith("gemm-w16-check.ts")) process.stdout.write(JSON.stringify(checkGemmW16()) + "\n");
