/**
 * Rotary position embedding tables: the inverse frequencies of a config (with linear or llama3 scaling,
 * as transformers computes them) and cos/sin tables [P, D/2] that grow on demand for the kernels'
 * ropeForward / ropeBackward.
 *
 * This file builds tables only; the rotation itself is a kernel.
 */
import type { ModelConfig } from "./config.js";

/** The D/2 inverse frequencies of a config, scaling applied. */
export function ropeInvFreq(cfg: ModelConfig): Float64Array {
  const D = cfg.headDim;
  const half = D / 2;
  const inv = new Float64Array(half);
  for (let i = 0; i < half; i++) inv[i] = 1 / cfg.ropeTheta ** ((2 * i) / D);
  const rs = cfg.ropeScaling;
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

  constructor(cfg: ModelConfig, initialPositions = 256) {
    this.inv = ropeInvFreq(cfg);
    this.ensure(initialPositions);
  }

  /** Makes rows 0..positions-1 available. */
  ensure(positions: number): void {
    if (positions <= this.rows) return;
    let P = Math.max(this.rows, 64);
    while (P < positions) P *= 2;
    const half = this.inv.length;
    const cos = new Float32Array(P * half);
    const sin = new Float32Array(P * half);
    cos.set(this.cos);
    sin.set(this.sin);
    for (let p = this.rows; p < P; p++) {
      for (let i = 0; i < half; i++) {
        // transformers computes the angle in float32; so do we, then cos/sin in double.
        const angle = Math.fround(p * Math.fround(this.inv[i]!));
        cos[p * half + i] = Math.cos(angle);
        sin[p * half + i] = Math.sin(angle);
      }
    }
    this.cos = cos;
    this.sin = sin;
    this.rows = P;
  }
}
