/**
 * The one seeded pseudo-random generator class of sinkflex, with two named generators:
 *
 * - "mulberry32" (the default): 32 bits of state. Environments, spaces, task generators, the trainer's
 *   batch draws: every `new Rng(seed)`.
 * - "xoshiro128**", seeded through splitmix32: 128 bits of state. Weight initialization and token
 *   sampling (the model and the engine ask for it by name).
 *
 * The two compute different sequences from the same seed, and each one's arithmetic is fixed: a seed gives
 * the same draws on every platform and in every version (test/core/rng.test.ts pins them). Every method
 * draws from the instance's own generator: `next`/`int`/`range`/`pick`/`shuffle`/`fork` take one 32-bit draw
 * per call, `uniform` two (53 bits), `normal` two per pair (Box-Muller). Not cryptographic.
 */

/** The generators an `Rng` can run. */
export const RNG_GENERATORS = ["mulberry32", "xoshiro128**"] as const;
export type RngGenerator = (typeof RNG_GENERATORS)[number];

export class Rng {
  readonly generator: RngGenerator;
  /** True for xoshiro128** (state s0..s3), false for mulberry32 (state s0). */
  private readonly xoshiro: boolean;
  private s0: number;
  private s1 = 0;
  private s2 = 0;
  private s3 = 0;
  private spare: number | null = null;

  constructor(seed: number, generator: RngGenerator = "mulberry32") {
    if (generator !== "mulberry32" && generator !== "xoshiro128**") {
      throw new Error(`Rng: unknown generator "${String(generator)}"; use one of ${RNG_GENERATORS.join(", ")}`);
    }
    this.generator = generator;
    this.xoshiro = generator === "xoshiro128**";
    if (!this.xoshiro) {
      this.s0 = seed >>> 0 || 0x9e3779b9;
      return;
    }
    let x = seed >>> 0 ^ Math.floor(seed / 2 ** 32) * 0x9e3779b9;
    const next = () => {
      x = (x + 0x9e3779b9) | 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
  }

  /** A uniform 32-bit unsigned integer. */
  nextU32(): number {
    if (!this.xoshiro) {
      let t = (this.s0 = (this.s0 + 0x6d2b79f5) >>> 0);
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return (t ^ (t >>> 14)) >>> 0;
    }
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** A float in [0, 1) with 32 bits (one draw). */
  next(): number {
    return this.nextU32() / 4294967296;
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** An integer in [lo, hi] inclusive. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error("Rng.pick: cannot pick from an empty list");
    return items[this.int(items.length)]!;
  }

  /** Shuffles `items` in place (Fisher-Yates) and returns it. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [items[i], items[j]] = [items[j]!, items[i]!];
    }
    return items;
  }

  /** A derived generator of the same kind, independent of this one's future draws. */
  fork(salt: number): Rng {
    return new Rng((this.int(0xffffffff) ^ Math.imul(salt + 1, 0x85ebca6b)) >>> 0, this.generator);
  }

  /** Uniform in [0, 1) with 53 bits (two draws). */
  uniform(): number {
    const hi = this.nextU32() >>> 5;
    const lo = this.nextU32() >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  /** Standard normal (Box-Muller; the second value of each pair is kept for the next call). */
  normal(): number {
    if (this.spare !== null) {
      const s = this.spare;
      this.spare = null;
      return s;
    }
    let u = 0;
    while (u === 0) u = this.uniform();
    const v = this.uniform();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}
