// A session samples the same tokens and log-probs alone as beside others, at every SIMD level of the
// native kernels (AVX-512, AVX2, portable: each in its own process), with fp32 and bf16 weights and with int8
// sampling copies. The
// decoding attention of a head size no whole-vector path fits (12) once summed its scores and its softmax
// in an order that depended on where the session's cache rows sat and which thread ran it, so on CPUs
// without AVX-512 a sequence's log-probs changed in the last bits with the batch.
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadNativeKernels } from "../../src/kernels/index.js";
import { checkAtSimdLevel, SIMD_LEVELS } from "../kernels/simd-child.js";
import type { BatchIndependence } from "./batch-independence.js";

const native = loadNativeKernels();

describe.skipIf(!native)("decoding does not depend on the batch", () => {
  for (const level of SIMD_LEVELS) {
    it(`SINKFLEX_SIMD=${level}: fp32, bf16 and int8 sampling, beside 1 to 4 other sessions`, () => {
      const r = checkAtSimdLevel<BatchIndependence>(join(import.meta.dirname, "batch-independence.ts"), level);
      expect(Object.keys(r.same)).toHaveLength(12);
      expect(r.same, `at SIMD level ${r.simd}`).toEqual(Object.fromEntries(Object.keys(r.same).map((k) => [k, true])));
    }, 150_000);
  }
});
