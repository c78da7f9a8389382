/**
 * gemmW16, the product with a weight matrix held as bf16: the native kernels against the reference on each
 * SIMD path (AVX512-BF16 dot products at avx512, bf16 widened to fp32 at avx2 and portable), a row's values
 * bit for bit the same whatever the call's row count (decoding streams W for a few rows), and its argument
 * checks.
 */
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadNativeKernels, referenceKernels } from "../../src/kernels/index.js";
import { checkGemmW16 } from "./gemm-w16-check.js";
import { checkAtSimdLevel, SIMD_LEVELS } from "./simd-child.js";

const native = loadNativeKernels();

describe.skipIf(!native)("gemmW16 (native)", () => {
  it("matches the reference in this process", () => {
    const out = checkGemmW16();
    expect(out.err).toBeLessThan(1e-5);
    expect(out.batchMismatches).toBe(0);
  });

  for (const level of SIMD_LEVELS) {
    it(`SINKFLEX_SIMD=${level} matches the reference`, () => {
      const out = checkAtSimdLevel<{ simd: string; bf16Unit: string; err: number; batchMismatches: number }>(join(import.meta.dirname, "gemm-w16-check.ts"), level);
      if (level !== "avx512") expect(out.bf16Unit).toBe("none");
      expect(out.err).toBeLessThan(1e-5);
      expect(out.batchMismatches).toBe(0);
    }, 150_000);
  }

  it("refuses a W too short for its shape, and a W that is not a Uint16Array", () => {
    const A = new Float32Array(4 * 8);
    const C = new Float32Array(4 * 5);
    expect(() => native!.gemmW16(true, 4, 5, 8, 1, A, 8, new Uint16Array(39), 8, 0, C, 5)).toThrow(/W has 39 elements, needs 40/);
    expect(() => native!.gemmW16(true, 4, 5, 8, 1, A, 8, new Float32Array(40) as unknown as Uint16Array, 8, 0, C, 5)).toThrow(/W must be a Uint16Array/);
    expect(() => referenceKernels.gemmW16(false, 4, 5, 8, 1, A, 8, new Uint16Array(39), 5, 0, C, 5)).toThrow(/W has 39 elements, needs 40/);
  });
});
