/**
 * int8 sampling weights (quantizeWeight, gemmQ8): the native kernels against the reference on each SIMD
 * path, the quantization error against the unquantized product, a row's values bit for bit the same
 * whatever the call's row count, and the argument checks.
 */
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadNativeKernels, referenceKernels } from "../../src/kernels/index.js";
import { checkGemmQ8, type Q8Check } from "./gemm-q8-check.js";
import { checkAtSimdLevel, SIMD_LEVELS } from "./simd-child.js";

const native = loadNativeKernels();

function expectSound(out: Q8Check): void {
  expect(out.quantMismatches).toBe(0);
  expect(out.scaleMismatches).toBe(0);
  // the same products summed in other orders (fused multiply-adds on the SIMD paths)
  expect(out.err).toBeLessThan(1e-5);
  // int8 in blocks of 32: each weight within half a step (max |w| / 254) of its value
  expect(out.quantErr).toBeGreaterThan(1e-5);
  expect(out.quantErr).toBeLessThan(2e-2);
  expect(out.batchMismatches).toBe(0);
}

describe.skipIf(!native)("gemmQ8 (native)", () => {
  it("matches the reference in this process", () => {
    expectSound(checkGemmQ8());
  });

  for (const level of SIMD_LEVELS) {
    it(`SINKFLEX_SIMD=${level} matches the reference`, () => {
      expectSound(checkAtSimdLevel<Q8Check>(join(import.meta.dirname, "gemm-q8-check.ts"), level));
    }, 150_000);
  }

  it("refuses a weight of another kernel set, and arrays too short for the shape", () => {
    const W = new Float32Array(5 * 8);
    const q = referenceKernels.quantizeWeight(5, 8, W, 8);
    expect(() => native!.gemmQ8(1, 1, new Float32Array(8), 8, q, 0, new Float32Array(5), 5)).toThrow(/quantized by the reference kernels/);
    expect(() => native!.quantizeWeight(5, 8, new Float32Array(39), 8)).toThrow(/W has 39 elements, needs 40/);
    const qn = native!.quantizeWeight(5, 8, W, 8);
    expect(() => native!.gemmQ8(2, 1, new Float32Array(8), 8, qn, 0, new Float32Array(10), 5)).toThrow(/A has 8 elements, needs 16/);
    expect(() => referenceKernels.quantizeWeight(5, 8, W, 4)).toThrow(/ldw 4 is smaller than K 8/);
  });
});
