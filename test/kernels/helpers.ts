/**
 * Test helpers for the kernel suites: a seeded generator of random tensors and a closeness check that
 * reports the worst element. Not a test itself.
 */
import { expect } from "vitest";

/** A small seeded generator (mulberry32), so every failing case can be replayed. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n uniform values in [-scale, scale). */
export function randn(r: () => number, n: number, scale = 1): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = (r() * 2 - 1) * scale;
  return x;
}

/** Expects |a - b| <= atol + rtol * |b| elementwise; the message names the case and the worst index. */
export function expectClose(a: ArrayLike<number>, b: ArrayLike<number>, what: string, rtol = 1e-4, atol = 1e-5): void {
  expect(a.length, `${what}: length`).toBe(b.length);
  let worst = -1;
  let worstExcess = 0;
  for (let i = 0; i < a.length; i++) {
    const err = Math.abs(a[i] - b[i]);
    const excess = err - (atol + rtol * Math.abs(b[i]));
    if (!(excess <= 0) && (worst < 0 || !(excess <= worstExcess))) {
      worst = i;
      worstExcess = excess;
      if (Number.isNaN(excess)) break;
    }
  }
  if (worst >= 0) {
    expect.fail(`${what}: element ${worst} is ${a[worst]}, expected ${b[worst]} (rtol ${rtol}, atol ${atol})`);
  }
}
