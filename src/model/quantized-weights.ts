/**
 * int8 copies of a model's weight matrices for sampling only (`samplingWeights: "int8"`): each matrix is
 * quantized by the kernels on first use (rows in blocks of 32, one scale a block; see Q8Weight) and reused
 * while the weights stay the same. Sessions decode and prefill with them; training, teacher-forced scoring
 * and the KL reference never do, so the sampler's log-probs differ a little from the trainer's, and GRPO's
 * truncated importance weights correct for that. A copy is a snapshot (see WeightCopies): whoever changes the
 * weights calls `clear()`, as the engine does for its own updates.
 */
import type { Kernels, Q8Weight } from "../kernels/index.js";
import type { WeightMatrix } from "./params.js";
import { WeightCopies } from "./weight-copies.js";

/** What sampling sessions multiply by: the weights themselves ("same") or int8 copies of them ("int8"). */
export const SAMPLING_WEIGHTS = ["same", "int8"] as const;
export type SamplingWeights = (typeof SAMPLING_WEIGHTS)[number];

export class QuantizedWeights extends WeightCopies<WeightMatrix, Q8Weight> {
  constructor(kernels: Kernels) {
    super((W, N, K) => kernels.quantizeWeight(N, K, W, K), (q) => q.q.byteLength + q.scales.byteLength);
  }

  /** How many times a matrix was quantized (a copy that is reused is not counted again). */
  get quantizations(): number {
    return this.made;
  }
}
