/**
 * Rotary position embedding tables: the inverse frequencies of a config (with linear, llama3 or
 * longrope scaling, as transformers computes them) and cos/sin tables that grow on demand for the
 * kernels' ropeForward / ropeBackward, indexed by a row per position (`rowsOf`: longrope keeps its short-
 * and long-factor rows side by side). A table refuses positions past what the engine computes exactly for
 * the config (`exactPositionLimit`), with a message saying why.
 *
 * This file builds tables only; the rotation itself is a kernel.
 */
import { ModelConfigError, type ModelConfig } from "./config.js";

/**
 * The most positions (sequence length) the engine computes exactly for a config, and why; Infinity when
 * there is no limit beyond max_position_embeddings. A sliding window masks keys once a sequence outgrows
 * it (not done yet). (Longrope sets no limit: past its original length a sequence takes the long factors.)
 */
export function exactPositionLimit(cfg: ModelConfig): { positions: number; reason: string } {
  const w = cfg.slidingWindow;
  if (w === undefined || w === null) return { positions: Infinity, reason: "" };
  return {
    positions: w,
    reason:
      `the model's sliding_window (${w}) masks keys once a sequence is longer than it, which sinkflex's decoder does ` +
      `not do yet; keep sequences within ${w} tokens`,
  };
}

/**
 * The D/2 inverse frequencies of a config, scaling applied. Longrope has two sets: the short factors'
 * (the default, for sequences up to original_max_position_embeddings) and, with `long`, the long factors'.
 */
export function ropeInvFreq(cfg: ModelConfig, long = false): Float64Array {
  const D = cfg.headDim;
  const half = D / 2;
  const inv = new Float64Array(half);
  const rs = cfg.ropeScaling;
  for (let i = 0; i < half; i++) {
    // longrope: the base frequencies divided by the short (or long) factors.
    const ext = rs.type === "longrope" ? (long ? rs.longFactor : rs.shortFactor)[i]! : 1;
    inv[i] = 1 / (ext * cfg.ropeTheta ** ((2 * i) / D));
  }
  if (rs.type === "linear") {
    for (let i = 0; i < half; i++) inv[i]! /= rs.factor;
  } else if (rs.type === "llama3") {
    const old = rs.originalMaxPositionEmbeddings;
    const lowWavelen = old / rs.lowFreqFactor;
    const highWavelen = old / rs.highFreqFactor;
    for (let i = 0; i < half; i++) {
      const f = inv[i]!;
      const wavelen = (2 * Math.PI) / f;
      if (wavelen > lowWavelen) inv[i] = f / rs.factor;
      else if (wavelen >= highWavelen) {
        const smooth = (old / wavelen - rs.lowFreqFactor) / (rs.highFreqFactor - rs.lowFreqFactor);
        inv[i] = (1 - smooth) * (f / rs.factor) + smooth * f;
      }
    }
  }
  return inv;
}

/**
 * cos/sin tables [rows, D/2], grown (doubling) when a larger position is needed. Row p is position p, except
 * under longrope, which has two sets of frequencies and picks one per sequence as transformers does: a
 * sequence of at most original_max_position_embeddings (O) tokens takes the short factors, a longer one
 * the long factors at every position. Rows 0..O-1 then hold the short factors' positions 0..O-1, and rows
 * O.. the long factors' positions 0..; `rowOffset(length)` says where a sequence's positions start.
 */
export class RopeTable {
  cos: Float32Array = new Float32Array(0);
  sin: Float32Array = new Float32Array(0);
  private rows = 0;
  private readonly inv: Float64Array;
  /** Longrope: the long factors' frequencies and the length past which a sequence takes them. */
  private readonly long: { inv: Float64Array; after: number } | null;
  /** cos and sin are multiplied by this (longrope's attention factor, the same for both sets; 1 otherwise). */
  private readonly scale: number;
  private readonly limit: { positions: number; reason: string };

  constructor(cfg: ModelConfig, initialPositions = 256) {
    const rs = cfg.ropeScaling;
    this.inv = ropeInvFreq(cfg);
    this.long = rs.type === "longrope" ? { inv: ropeInvFreq(cfg, true), after: rs.originalMaxPositionEmbeddings } : null;
    this.scale = rs.type === "longrope" ? rs.attentionFactor : 1;
    this.limit = exactPositionLimit(cfg);
    if (this.long) this.grow(this.long.after); // the short factors' rows, all of them
    this.ensure(Math.min(initialPositions, this.limit.positions));
  }

  /** The table row of position 0 of a sequence of `length` tokens: 0, or O when longrope takes its long factors. */
  rowOffset(length: number): number {
    return this.long && length > this.long.after ? this.long.after : 0;
  }

  /**
   * Makes a sequence of `length` tokens computable (rows rowOffset(length) .. + length - 1); past the config's
   * exact limit, an error saying why.
   */
  ensure(length: number, offset = this.rowOffset(length)): void {
    if (length > this.limit.positions) {
      throw new ModelConfigError(`position ${length - 1} is out of range: ${this.limit.reason}`);
    }
    const need = offset + length;
    if (need <= this.rows) return;
    let P = Math.max(this.rows, 64);
    while (P < need) P *= 2;
    this.grow(P);
  }

  /** Computes rows this.rows .. P-1. */
  private grow(P: number): void {
    const half = this.inv.length;
    const cos = new Float32Array(P * half);
    const sin = new Float32Array(P * half);
    cos.set(this.cos);
    sin.set(this.sin);
    for (let row = this.rows; row < P; row++) {
      const longRow = this.long !== null && row >= this.long.after;
      const inv = longRow ? this.long!.inv : this.inv;
      const p = longRow ? row - this.long!.after : row;
      for (let i = 0; i < half; i++) {
        // transformers computes the angle in float32; so do we, then cos/sin in double.
        const angle = Math.fround(p * Math.fround(inv[i]!));
        cos[row * half + i] = Math.cos(angle) * this.scale;
        sin[row * half + i] = Math.sin(angle) * this.scale;
      }
    }
    this.cos = cos;
    this.sin = sin;
    this.rows = P;
  }

  /**
   * The table row of each of `positions` (the kernels' rope index), for runs of rows that are one sequence
   * each: run j is rows bounds[j] .. bounds[j+1]-1. A run's rows start at `offsets[j]` when given (a
   * rowOffset the caller keeps for a sequence computed in pieces), else at the rowOffset of its length,
   * its largest position + 1 (a whole sequence in one forward, as transformers picks the frequencies per
   * forward). Makes those rows available. Without longrope the rows are the positions themselves (returned
   * as given).
   */
  rowsOf(positions: Int32Array, bounds: ArrayLike<number>, offsets?: ArrayLike<number>): Int32Array {
    let max = 0;
    for (let i = 0; i < positions.length; i++) max = Math.max(max, positions[i]! + 1);
    if (!this.long) {
      this.ensure(max);
      return positions;
    }
    const rows = new Int32Array(positions.length);
    for (let j = 0; j + 1 < bounds.length; j++) {
      const r0 = bounds[j]!;
      const r1 = bounds[j + 1]!;
      let len = 0;
      for (let r = r0; r < r1; r++) len = Math.max(len, positions[r]! + 1);
      const off = offsets ? offsets[j]! : this.rowOffset(len);
      if (off !== 0 && off !== this.long.after) throw new RangeError(`rowsOf: row offset ${off} is neither 0 nor ${this.long.after} (RopeTable.rowOffset)`);
      this.ensure(len, off);
      for (let r = r0; r < r1; r++) rows[r] = positions[r]! + off;
    }
    return rows;
  }
}
