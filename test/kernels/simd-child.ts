/**
 * Runs a check script in a child process at one SIMD level of the native kernels (SINKFLEX_SIMD is read once
 * per process), on 2 threads, and returns the JSON line it prints; asserts the child exited cleanly and ran
 * at that level or a lower one (a CPU without the level runs a lower one, never a higher). The tests that
 * check every path on one machine (avx512, avx2, portable) share it. Not a test itself.
 */
import { spawnSync } from "node:child_process";
import { expect } from "vitest";

/** The SIMD levels a test runs its check at, highest first. */
export const SIMD_LEVELS = ["avx512", "avx2", "portable"] as const;

export function checkAtSimdLevel<T extends { simd: string }>(script: string, level: (typeof SIMD_LEVELS)[number]): T {
  const res = spawnSync(process.execPath, ["--import", "tsx", script], {
    env: { ...process.env, SINKFLEX_SIMD: level, SINKFLEX_THREADS: "2" },
    encoding: "utf8",
    timeout: 120_000,
  });
  expect(res.status, res.stderr).toBe(0);
  const out = JSON.parse(res.stdout) as T;
  expect(SIMD_LEVELS.indexOf(out.simd as (typeof SIMD_LEVELS)[number])).toBeGreaterThanOrEqual(SIMD_LEVELS.indexOf(level));
  return out;
}
