/**
 * The check the int8 product tests run, in this process or a child one (SINKFLEX_SIMD is read once per
 * process): native quantizeWeight against the reference (the same int8 values and scales, from fp32 and
 * from bf16 weights), native gemmQ8 against the reference on shapes with edges (depth not a multiple of
 * 32, row counts not of 4, one row, beta 0, 1 and 0.5), and bit for bit that a row's values do not depend
 * on the call's row count. Prints one JSON line. Not a test by itself.
 */
import { loadNativeKernels, referenceKernels } from "../../src/kernels/index.js";

function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => ((x = (Math.imul(x, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
}

export interface Q8Check {
  simd: string;
  /** int8 values that differ between the native and reference quantization (fp32 and bf16 inputs). */
  quantMismatches: number;
  /** Scales that differ. */
  scaleMismatches: number;
  /** Largest |native - reference| of gemmQ8 relative to the largest |C|. */
  err: number;
  /** Largest |gemmQ8 - exact product with the unquantized W| relative to the largest |C| (quantization error). */
  quantErr: number;
  /** Values of rows 0..m-1 of a 20-row product that change when the call has m rows (m = 1..8). */
  batchMismatches: number;
}

export function checkGemmQ8(): Q8Check {
  const k = loadNativeKernels();
  if (!k) throw new Error("the native kernels are not built");
  const r = rng(5);
  let quantMismatches = 0;
  let scaleMismatches = 0;
  let err = 0;
  let quantErr = 0;
  let batchMismatches = 0;
  for (const [M, N, K, pad] of [[1, 37, 50, 0], [3, 130, 70, 2], [20, 41, 896, 0], [5, 9, 1, 0], [7, 64, 33, 5]] as const) {
    const ldw = K + pad;
    const Wf = Float32Array.from({ length: N * ldw }, r);
    for (let i = 0; i < Wf.length; i += 13) Wf[i] = 0; // zero blocks and values
    const Wb = new Uint16Array(Wf.length);
    const u = new Uint32Array(Wf.buffer);
    for (let i = 0; i < Wf.length; i++) Wb[i] = u[i]! >>> 16;
    for (const W of [Wf, Wb]) {
      const qn = k.quantizeWeight(N, K, W, ldw);
      const qr = referenceKernels.quantizeWeight(N, K, W, ldw);
      for (let i = 0; i < qn.q.length; i++) if (qn.q[i] !== qr.q[i]) quantMismatches++;
      for (let i = 0; i < qn.scales.length; i++) if (!Object.is(qn.scales[i], qr.scales[i])) scaleMismatches++;
      const A = Float32Array.from({ length: M * K }, r);
      for (const beta of [0, 1, 0.5]) {
        const C0 = Float32Array.from({ length: M * N }, r);
        const got = C0.slice();
        const want = C0.slice();
        const exact = C0.slice();
        k.gemmQ8(M, 0.75, A, K, qn, beta, got, N);
        referenceKernels.gemmQ8(M, 0.75, A, K, qr, beta, want, N);
        const Wv = W instanceof Uint16Array ? new Float32Array(Uint32Array.from(W, (b) => b << 16).buffer) : W;
        referenceKernels.sgemm(false, true, M, N, K, 0.75, A, K, Wv, ldw, beta, exact, N);
        let scale = 0;
        let worst = 0;
        let worstQ = 0;
        for (let i = 0; i < M * N; i++) {
          scale = Math.max(scale, Math.abs(want[i]!));
          worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
          worstQ = Math.max(worstQ, Math.abs(got[i]! - exact[i]!));
        }
        err = Math.max(err, worst / scale);
        quantErr = Math.max(quantErr, worstQ / scale);
      }
    }
    // batch independence: the first m rows of a 20-row call
    const q = k.quantizeWeight(N, K, Wf, ldw);
    const A = Float32Array.from({ length: 20 * K }, r);
    const C0 = Float32Array.from({ length: 20 * N }, r);
    for (const beta of [0, 1]) {
      const all = C0.slice();
      k.gemmQ8(20, 1, A, K, q, beta, all, N);
      for (let m = 1; m <= 8; m++) {
        const few = C0.slice(0, m * N);
        k.gemmQ8(m, 1, A, K, q, beta, few, N);
        for (let i = 0; i < m * N; i++) if (!Object.is(few[i], all[i])) batchMismatches++;
      }
    }
  }
  return { simd: (k.describe().match(/\((\w+)/) ?? [])[1] ?? "?", quantMismatches, scaleMismatches, err, quantErr, batchMismatches };
}

if (process.argv[1]?.endsWith("gemm-q8-check.ts")) process.stdout.write(JSON.stringify(checkGemmQ8()) + "\n");
