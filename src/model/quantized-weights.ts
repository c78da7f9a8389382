/**
 * int8 copies of a model's weight matrices for sampling only (`samplingWeights: "int8"`): each matrix is
 * quantized by the kernels on first use (rows in blocks of 32, one scale a block; see Q8Weight) and reused
 * while the weights stay the same. Sessions decode and prefill with them; training, teacher-forced scoring
 * and the KL reference never do, so the sampler's log-probs differ a little from the trainer's, and GRPO's
 * truncated importance weights correct for that. A copy is a snapshot: whoever changes the weights calls
 * `clear()` (the engine does for its own updates), as for PackedWeights.
 *
 * This is not the weights' storage (instance.ts, params.ts) and it computes nothing itself.
 */
import type { Kernels, Q8Weight } from "../kernels/index.js";
import type { WeightMatrix } from "./params.js";

/** What sampling sessions multiply by: the weights themselves ("same") or int8 copies of them ("int8"). */
export const SAMPLING_WEIGHTS = ["same", "int8"] as const;
export type SamplingWeights = (typeof SAMPLING_WEIGHTS)[number];

export class QuantizedWeights {
  private readonly quantized = new Map<WeightMatrix, Q8Weight>();
  /** How many times a matrix was quantized (a copy that is reused is not counted again). */
  quantizations = 0;

  constructor(private readonly kernels: Kernels) {}

  /** The int8 form of W [N, K] (a parameter view, dense rows), quantized now if it is not cached. */
  get(W: WeightMatrix, N: number, K: number): Q8Weight {
    let q = this.quantized.get(W);
    if (!q || q.N !== N || q.K !== K) {
      q = this.kernels.quantizeWeight(N, K, W, K);
      this.quantized.set(W, q);
      this.quantizations++;
    }
    return q;
  }

  /** Drops every copy (call after the weights changed); the next products quantize again. */
  clear(): void {
    this.quantized.clear();
  }

  /** Bytes held by the copies (int8 values and scales). */
  get bytes(): number {
    let n = 0;
    for (const q of this.quantized.values()) n += q.q.byteLength + q.scales.byteLength;
    return n;
  }
}
