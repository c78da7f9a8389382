/**
 * Rotary position embedding tables: the inverse frequencies of a config (with linear, llama3 or
 * longrope scaling, as transformers computes them) and cos/sin tables [P, D/2] that grow on demand for
 * the kernels' ropeForward / ropeBackward. A table refuses positions past what the engine computes
 * exactly for the config (`exactPositionLimit`), with a message saying why.
 *
 * This file builds tables only; the rotation itself is a kernel.
 */
import { ModelConfigError, type ModelConfig } from "./config.js";

/**
 * The most positions (sequence length) the engine computes exactly for a config, and why; Infinity when
 * there is no limit beyond max_position_embeddings. Longrope switches to its long factors past the
 * original length (not done yet); a sliding window masks keys once a sequence outgrows it (not done yet).
 */
export function exactPositionLimit(cfg: ModelConfig): { positions: number; reason: string } {
  let limit = { positions: Infinity, reason: "" };
  const rs = cfg.ropeScaling;
  if (rs.type === "longrope") {
    limit = {
      positions: rs.originalMaxPositionEmbeddings,
      reason:
        `longrope uses its long factors past original_max_position_embeddings (${rs.originalMaxPositionEmbeddings}), ` +
        `which sinkflex does not compute yet; keep sequences within ${rs.originalMaxPositionEmbeddings} tokens`,
    };
  }
  const w = cfg.slidingWindow;
  if (w !== undefined && w !== null && w < limit.positions) {
    limit = {
      positions: w,
      reason:
        `the model's sliding_window (${w}) masks keys once a sequence is longer than it, which sinkflex's decoder does ` +
        `not do yet; keep sequences within ${w} tokens`,
    };
  }
  return limit;
}

/** The D/2 inverse frequencies of a config, scaling applied. */
export function ropeInvFreq(cfg: ModelConfig): Float64Array {
  const D = cfg.headDim;
  const half = D / 2;
  const inv = new Float64Array(half);
  const rs = cfg.ropeScaling;
  for (let i = 0; i < half; i++) {
    // longrope (up to the original length): the base frequencies divided by the short factors.
    const ext = rs.type === "longrope" ? rs.shortFactor[i]! : 1;
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

/** cos/sin tables [P, D/2] for positions 0..P-1, grown (doubling) when a larger position is needed. */
export class RopeTable {
  cos: Float32Array = new Float32Array(0);
  sin: Float32Array = new Float32Array(0);
  private rows = 0;
  private readonly inv: Float64Array;
  /** cos and sin are multiplied by this (longrope's attention factor; 1 otherwise). */
  private readonly scale: number;
  private readonly limit: { positions: number; reason: string };

  constructor(cfg: ModelConfig, initialPositions = 256) {
    this.inv = ropeInvFreq(cfg);
    this.scale = cfg.ropeScaling.type === "longrope" ? cfg.ropeScaling.attentionFactor : 1;
    this.limit = exactPositionLimit(cfg);
    this.ensure(Math.min(initialPositions, this.limit.positions));
  }

  /** Makes rows 0..positions-1 available; past the config's exact limit, an error saying why. */
  ensure(positions: number): void {
    if (positions <= this.rows) return;
    if (positions > this.limit.positions) {
      throw new ModelConfigError(`position ${positions - 1} is out of range: ${this.limit.reason}`);
    }
    let P = Math.max(this.rows, 64);
    while (P < positions) P *= 2;
    P = Math.min(P, this.limit.positions);
    const half = this.inv.length;
    const cos = new Float32Array(P * half);
    const sin = new Float32Array(P * half);
    cos.set(this.cos);
    sin.set(this.sin);
    for (let p = this.rows; p < P; p++) {
      for (let i = 0; i < half; i++) {
        // transformers computes the angle in float32; so do we, then cos/sin in double.
        const angle = Math.fround(p * Math.fround(this.inv[i]!));
        cos[p * half + i] = Math.cos(angle) * this.scale;
        sin[p * half + i] = Math.sin(angle) * this.scale;
      }
    }
    this.cos = cos;
    this.sin = sin;
    this.rows = P;
  }
}
