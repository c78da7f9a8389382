/**
 * Packed copies of a model's weight matrices for the batched decoding products (x @ W^T with several
 * rows): each matrix is packed by the kernels on first use and reused while the weights stay the same
 * (see WeightCopies: cleared by whoever changes the weights).
 */
import type { Kernels, PackedWeight } from "../kernels/index.js";
import { WeightCopies } from "./weight-copies.js";

export class PackedWeights extends WeightCopies<Float32Array, PackedWeight> {
  constructor(kernels: Kernels) {
    super((W, N, K) => kernels.packWeight(N, K, W, K), (p) => p.data.byteLength);
  }

  /** How many times a matrix was packed (a packed copy that is reused is not counted again). */
  get packs(): number {
    return this.made;
  }
}
