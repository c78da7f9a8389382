/**
 * bf16 matrix products (native/src/gemm_bf16.cc): where the CPU has a bf16 unit (AMX's tiles or AVX512-BF16's
 * dot products; the one in use is named in the test titles), sgemm with the precision at bf16 equals the product of the bfloat16-rounded operands (computed here in float64) across
 * shapes, transposes, strides, alpha/beta and depth chunks; attention computed through it stays within
 * bf16's error of the reference; products of a few rows stay fp32. On any CPU: the precision switch reports
 * what is in effect and rejects unknown names, and the config names them.
 */
import { spawnSync } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { bf16Unit, loadNativeKernels, nativeAddonPath, setMatmulPrecision } from "../../src/kernels/native.js";
import type { AttentionMask, AttentionShape } from "../../src/kernels/kernels.js";
import { referenceKernels as ref } from "../../src/kernels/reference.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { expectClose, randn, rng } from "./helpers.js";

const native = loadNativeKernels();
const unit = native === null ? "none" : bf16Unit();
const bf16Here = unit !== "none";

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
/** x rounded to bfloat16 (to nearest, ties to even), as the packing rounds. */
function bf16(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  u32[0] = (((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) << 16) >>> 0;
  return f32[0]!;
}

/** alpha op(A) op(B) + beta C from bf16-rounded alpha op(A) and op(B), in float64. */
function bf16Product(ta: boolean, tb: boolean, M: number, N: number, K: number, alpha: number, A: Float32Array, lda: number, B: Float32Array, ldb: number, beta: number, C: Float32Array, ldc: number): Float64Array {
  const a = new Float64Array(M * K); // [M, K]
  const b = new Float64Array(N * K); // [N, K]
  for (let i = 0; i < M; i++) for (let p = 0; p < K; p++) a[i * K + p] = bf16(Math.fround(alpha * (ta ? A[p * lda + i]! : A[i * lda + p]!)));
  for (let j = 0; j < N; j++) for (let p = 0; p < K; p++) b[j * K + p] = bf16(tb ? B[j * ldb + p]! : B[p * ldb + j]!);
  const out = new Float64Array(M * N);
  for (let i = 0; i < M; i++) {
    for (let j = 0; j < N; j++) {
      let s = 0;
      for (let p = 0; p < K; p++) s += a[i * K + p]! * b[j * K + p]!;
      out[i * N + j] = s + (beta === 0 ? 0 : beta * C[i * ldc + j]!);
    }
  }
  return out;
}

afterEach(() => {
  setMatmulPrecision("fp32");
});

describe("matmul precision switch", () => {
  it("reports the precision in effect: bf16 only where the CPU has a bf16 unit, fp32 always", () => {
    expect(setMatmulPrecision("bf16")).toBe(bf16Here ? "bf16" : "fp32");
    expect(setMatmulPrecision("fp32")).toBe("fp32");
  });

  it.skipIf(!native)("rejects an unknown precision with the allowed names", () => {
    expect(() => setMatmulPrecision("fp16" as never)).toThrow(/precision must be "fp32" or "bf16", got "fp16"/);
  });

  it("the config takes fp32 (the default) or bf16 and names both on anything else", () => {
    const base = { name: "t", suites: [{ env: "sinkflex/arith-v0" }], model: { init: {} } };
    expect(validateConfig(base, "t").model.matmul).toBe("fp32");
    expect(validateConfig({ ...base, model: { init: {}, matmul: "bf16" } }, "t").model.matmul).toBe("bf16");
    expect(() => validateConfig({ ...base, model: { init: {}, matmul: "fp16" } }, "t")).toThrow(/model\.matmul.*"fp32".*"bf16"/s);
  });
});

describe.skipIf(!bf16Here)(`bf16 sgemm (${unit})`, () => {
  const k = native!;
  // odd sizes (edge tiles), exact multiples of the 32 x 32 blocks, one row block with many columns, and a
  // depth over 1,536 (two chunks, C loaded back between them)
  const shapes: [number, number, number][] = [[5, 7, 9], [37, 45, 70], [64, 64, 64], [33, 129, 32], [70, 20, 1700]];
  let seed = 1;
  for (const [M, N, K] of shapes) {
    for (const ta of [false, true]) {
      for (const tb of [false, true]) {
        for (const [alpha, beta] of [[1, 0], [1, 1], [0.5, -0.75]]) {
          const s = seed++;
          it(`${M}x${N}x${K} ${ta ? "T" : "N"}${tb ? "T" : "N"} alpha ${alpha} beta ${beta}: the product of the bf16-rounded operands`, () => {
            const r = rng(s);
            const pad = 3;
            const lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
            const A = randn(r, (ta ? K : M) * lda), B = randn(r, (tb ? N : K) * ldb);
            const C = randn(r, M * ldc);
            const want = bf16Product(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
            if (beta === 0) C.fill(NaN); // beta 0 must not read C
            const before = C.slice();
            expect(setMatmulPrecision("bf16")).toBe("bf16");
            k.sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
            const got = new Float64Array(M * N);
            for (let i = 0; i < M; i++) for (let j = 0; j < N; j++) got[i * N + j] = C[i * ldc + j]!;
            // fp32 accumulation of K exact bf16 products: error ~ K * 2^-24 * sum |a b|
            expectClose(got, want, `bf16 ${M}x${N}x${K}`, 1e-5, 2e-6 * K);
            // the padding between rows of C is untouched
            for (let i = 0; i < M; i++) for (let j = N; j < ldc && i * ldc + j < C.length; j++) expect(Object.is(C[i * ldc + j], before[i * ldc + j])).toBe(true);
          });
        }
      }
    }
  }

  it("SINKFLEX_BF16_UNIT=avx512-bf16 runs the dot-product kernel, which agrees with this process's unit up to fp32 rounding", () => {
    // The unit is fixed per process, so the other one runs in a child process (on an AMX CPU this compares
    // the two units; on an AVX512-BF16 CPU both are the dot products, bit for bit).
    const script = `
      const m = require(${JSON.stringify(nativeAddonPath)});
      let s = 11; const r = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
      const [M, N, K] = [70, 45, 1100];
      const A = Float32Array.from({ length: M * K }, r), B = Float32Array.from({ length: K * N }, r);
      const C = new Float32Array(M * N);
      m.setMatmulPrecision("bf16");
      m.sgemm(false, false, M, N, K, 1, A, K, B, N, 0, C, N);
      console.log(JSON.stringify({ unit: m.info().bf16Unit, C: Array.from(C) }));`;
    const res = spawnSync(process.execPath, ["-e", script], { env: { ...process.env, SINKFLEX_BF16_UNIT: "avx512-bf16" }, encoding: "utf8" });
    expect(res.status, res.stderr).toBe(0);
    const child = JSON.parse(res.stdout) as { unit: string; C: number[] };
    expect(child.unit).toBe("avx512-bf16");
    let s = 11;
    const r = () => (s = (s * 1103515245 + 12345) % 2147483648) / 2147483648 - 0.5;
    const [M, N, K] = [70, 45, 1100];
    const A = Float32Array.from({ length: M * K }, r), B = Float32Array.from({ length: K * N }, r);
    const C = new Float32Array(M * N);
    setMatmulPrecision("bf16");
    k.sgemm(false, false, M, N, K, 1, A, K, B, N, 0, C, N);
    if (unit === "avx512-bf16") expect(child.C).toEqual(Array.from(C));
    else expectClose(Float32Array.from(child.C), C, "dot products vs tiles", 1e-5, 2e-6 * K);
  });

  it("differs from the fp32 product (the bf16 unit is in use), and products of up to 4 rows stay fp32", () => {
    const r = rng(99);
    const A = randn(r, 40 * 50), B = randn(r, 50 * 30);
    const fp32 = new Float32Array(40 * 30), viaBf16 = new Float32Array(40 * 30);
    k.sgemm(false, false, 40, 30, 50, 1, A, 50, B, 30, 0, fp32, 30);
    setMatmulPrecision("bf16");
    k.sgemm(false, false, 40, 30, 50, 1, A, 50, B, 30, 0, viaBf16, 30);
    expect(viaBf16.some((v, i) => v !== fp32[i])).toBe(true);
    expectClose(viaBf16, fp32, "bf16 vs fp32", 0.05, 0.05);
    // 4 rows: the fp32 matrix-vector path, bit for bit
    const few = new Float32Array(4 * 30), fewFp32 = new Float32Array(4 * 30);
    k.sgemm(false, false, 4, 30, 50, 1, A, 50, B, 30, 0, few, 30);
    setMatmulPrecision("fp32");
    k.sgemm(false, false, 4, 30, 50, 1, A, 50, B, 30, 0, fewFp32, 30);
    expect(Array.from(few)).toEqual(Array.from(fewFp32));
  });

  // The fused bf16 attention (attention_bf16.cc) runs for head sizes that are multiples of 32 up to 128; other
  // sizes take the block-GEMM path through bf16 products. Cases: documents with a shared prefix, windows with
  // sink slots, pinned positions, a sink logit, one batch row (its query blocks split over threads), rows
  // past a 64-query block and kept columns past a multiple of 32.
  const attentionCases: { name: string; s: AttentionShape; window: number; sinks: number; pinned: boolean; sink: boolean; docs: boolean }[] = [
    { name: "D 32, documents and a shared prefix, window 48", s: { B: 2, T: 150, H: 4, KVH: 2, D: 32, scale: 1 / Math.sqrt(32) }, window: 48, sinks: 2, pinned: false, sink: false, docs: true },
    { name: "D 64, one row, pinned positions and a sink logit", s: { B: 1, T: 203, H: 4, KVH: 1, D: 64, scale: 0.125 }, window: 70, sinks: 3, pinned: true, sink: true, docs: false },
    { name: "D 128, full causal attention, a sink logit", s: { B: 2, T: 97, H: 2, KVH: 2, D: 128, scale: 0.09 }, window: 0, sinks: 0, pinned: false, sink: true, docs: true },
    { name: "D 96, one kv head for 3 query heads", s: { B: 1, T: 130, H: 3, KVH: 1, D: 96, scale: 0.1 }, window: 33, sinks: 1, pinned: false, sink: false, docs: false },
    { name: "D 48 (the block-GEMM path)", s: { B: 1, T: 90, H: 2, KVH: 1, D: 48, scale: 0.15 }, window: 40, sinks: 2, pinned: true, sink: true, docs: true },
  ];
  for (const c of attentionCases) {
    it(`attention forward and backward in bf16 stay within bf16's error of the reference: ${c.name}`, () => {
      const s = c.s;
      const docIds = new Int32Array(s.B * s.T);
      for (let t = 0; t < s.T; t++) {
        docIds[t] = t < 40 ? -1 : t < 100 ? 0 : 1;
        if (s.B > 1) docIds[s.T + t] = t < 70 ? 3 : 4;
      }
      const r = rng(5 + s.D);
      const pinned = new Uint8Array(s.B * s.T).map(() => (r() < 0.05 ? 1 : 0));
      const mask: AttentionMask = { window: c.window, sinks: c.sinks, docIds: c.docs ? docIds : null, pinned: c.pinned ? pinned : null };
      const qn = s.B * s.T * s.H * s.D, kn = s.B * s.T * s.KVH * s.D;
      const q = randn(r, qn), kk = randn(r, kn), v = randn(r, kn), dOut = randn(r, qn);
      const sink = c.sink ? randn(r, s.H) : null;
      const run = (kern: typeof ref) => {
        const out = new Float32Array(qn), lse = new Float32Array(s.B * s.T * s.H);
        kern.attentionForward(s, mask, q, kk, v, sink, out, lse);
        const dQ = new Float32Array(qn), dK = new Float32Array(kn), dV = new Float32Array(kn);
        const dSink = sink ? new Float32Array(s.H) : null;
        kern.attentionBackward(s, mask, q, kk, v, sink, out, lse, dOut, dQ, dK, dV, dSink);
        return { out, lse, dQ, dK, dV, dSink };
      };
      setMatmulPrecision("bf16");
      const a = run(k);
      const b = run(ref);
      expectClose(a.out, b.out, "out", 2e-2, 1e-2);
      expectClose(a.lse, b.lse, "lse", 1e-2, 1e-2);
      expectClose(a.dQ, b.dQ, "dQ", 3e-2, 2e-2);
      expectClose(a.dK, b.dK, "dK", 3e-2, 2e-2);
      expectClose(a.dV, b.dV, "dV", 3e-2, 2e-2);
      if (sink) expectClose(a.dSink!, b.dSink!, "dSinkLogit", 3e-2, 2e-2);
      // and it is not the fp32 path
      setMatmulPrecision("fp32");
      const f = run(k);
      expect(a.out.some((x, i) => x !== f.out[i])).toBe(true);
    });
  }
});
