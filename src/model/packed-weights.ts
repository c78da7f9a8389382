/**
 * Packed copies of a model's weight matrices for the batched decoding products (x @ W^T with several
 * rows): each matrix is packed by the kernels on first use and reused while the weights stay the same.
 * A packed copy is a snapshot, so whoever changes the weights (an optimizer step, loading a checkpoint,
 * a direct write) calls `clear()`; the engine does this for its own updates.
 *
 * This is not the weights' storage (instance.ts, params.ts) and it decides nothing about when products
 * run; it only remembers packed matrices.
 */
import type { Kernels, PackedWeight } from "../kernels/index.js";

export class PackedWeights {
  private readonly packed = new Map<Float32Array, PackedWeight>();
  /** How many times a matrix was packed (a packed copy that is reused is not counted again). */
  packs = 0;

  constructor(private readonly kernels: Kernels) {}

  /** The packed form of W [N, K] (a parameter view, dense rows), packed now if it is not cached. */
  get(W: Float32Array, N: number, K: number): PackedWeight {
    let p = this.packed.get(W);
    if (!p || p.N !== N || p.K !== K) {
      p = this.kernels.packWeight(N, K, W, K);
      this.packed.set(W, p);
      this.packs++;
    }
    return p;
  }

  /** Drops every packed copy (call after the weights changed); the next products pack again. */
  clear(): void {
    this.packed.clear();
  }

  /** Matrices currently packed. */
  get size(): number {
    return this.packed.size;
  }

  /** Bytes held by the packed copies. */
  get bytes(): number {
    let n = 0;
    for (const p of this.packed.values()) n += p.data.byteLength;
    return n;
  }
}
