// A session samples the same tokens and log-probs alone as beside others, at every SIMD level of the
// native kernels (AVX-512, AVX2, portable: each in its own process), with fp32 and bf16 weights and with int8
// sampling copies. The
// decoding attention of a head size no whole-vector path fits (12) once summed its scores and its softmax
// in an order that depended on where the session's cache rows sat and which thread ran it, so on CPUs
// without AVX-512 a sequence's log-probs changed in the last bits with the batch.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadNativeKernels } from "../../src/kernels/index.js";
import type { BatchIndependence } from "./batch-independence.js";

const native = loadNativeKernels();

describe.skipIf(!native)("decoding does not depend on the batch", () => {
  for (const level of ["avx512", "avx2", "portable"]) {
    it(`SINKFLEX_SIMD=${level}: fp32, bf16 and int8 sampling, beside 1 to 4 other sessions`, () => {
      const res = spawnSync(process.execPath, ["--import", "tsx", join(import.meta.dirname, "batch-independence.ts")], {
        env: { ...process.env, SINKFLEX_SIMD: level, SINKFLEX_THREADS: "2" },
        encoding: "utf8",
        timeout: 120_000,
      });
      expect(res.status, res.stderr).toBe(0);
      const r = JSON.parse(res.stdout) as BatchIndependence;
      expect(Object.keys(r.same)).toHaveLength(12);
      expect(r.same, `at SIMD level ${r.simd}`).toEqual(Object.fromEntries(Object.keys(r.same).map((k) => [k, true])));
    }, 150_000);
  }
});
