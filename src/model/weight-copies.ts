/**
 * Copies made from a model's weight matrices for faster products (packed for the GEMM micro-kernel, or
 * quantized to int8 for sampling): each is made on first use by `make` and reused while the weights stay
 * the same. A copy is a snapshot, so whoever changes the weights (an optimizer step, loading a checkpoint,
 * a direct write) calls `clear()`; the engine does this for its own updates. PackedWeights and
 * QuantizedWeights are the two kinds.
 *
 * This is not the weights' storage (instance.ts, params.ts) and it decides nothing about when products
 * run; it only remembers copies.
 */
import type { WeightMatrix } from "./params.js";

export class WeightCopies<M extends WeightMatrix, T extends { readonly N: number; readonly K: number }> {
  private readonly copies = new Map<M, T>();
  /** How many copies were made (a copy that is reused is not counted again). */
  made = 0;

  constructor(
    private readonly make: (W: M, N: number, K: number) => T,
    private readonly bytesOf: (copy: T) => number,
  ) {}

  /** The copy of W [N, K] (a parameter view, dense rows), made now if there is none of that shape. */
  get(W: M, N: number, K: number): T {
    let c = this.copies.get(W);
    if (!c || c.N !== N || c.K !== K) {
      c = this.make(W, N, K);
      this.copies.set(W, c);
      this.made++;
    }
    return c;
  }

  /** Drops every copy (call after the weights changed); the next products make them again. */
  clear(): void {
    this.copies.clear();
  }

  /** Matrices currently copied. */
  get size(): number {
    return this.copies.size;
  }

  /** Bytes held by the copies. */
  get bytes(): number {
    let n = 0;
    for (const c of this.copies.values()) n += this.bytesOf(c);
    return n;
  }
}
