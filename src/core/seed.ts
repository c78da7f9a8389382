/**
 * Seed mixing: deriving one 32-bit seed from several numbers, so that each step, task, group or turn gets
 * its own reproducible random stream. Two functions with different arithmetic, each fixed (their outputs
 * are pinned in test/core/seed.test.ts; changing either changes every run that uses it):
 *
 * - `mixSeed(a, b)`: two numbers (the trainer's seed and a step);
 * - `mixSeedParts(...parts)`: any number of parts, folded one after another (the rollout's seed, task seed,
 *   group index and turn).
 *
 * This file draws no random numbers (src/core/rng.ts does).
 */

/** A 32-bit seed from two numbers (a run's seed and a step): one multiply-xor round over both. */
export function mixSeed(a: number, b: number): number {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + 1, 0xc2b2ae35);
  h ^= h >>> 15;
  return (Math.imul(h, 0x27d4eb2f) ^ (h >>> 13)) >>> 0;
}

/** A 32-bit seed from any number of parts, each folded in with a murmur3-style finalizer round. */
export function mixSeedParts(...parts: number[]): number {
  let h = 0x9e3779b9;
  for (const p of parts) {
    h = Math.imul(h ^ (p >>> 0), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
  }
  return h >>> 0;
}
