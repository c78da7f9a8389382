/**
 * AdamW (decoupled weight decay, bias correction, as PyTorch's torch.optim.AdamW) with global-norm
 * gradient clipping (as torch.nn.utils.clip_grad_norm_), over one flat parameter buffer.
 *
 * Weight decay applies to every parameter (PyTorch's default with a single parameter group). Gradients
 * are whatever the caller accumulated (gradient accumulation = several backward passes before a step);
 * this file does not compute them and does not zero them.
 */
import type { Kernels } from "../kernels/index.js";

/** The hyperparameters of one AdamW step (the engine's `optimStep` takes them as they are). */
export interface OptimHparams {
  lr: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  weightDecay?: number;
  /** Clip the global gradient norm to this value; 0 = off. */
  maxGradNorm?: number;
}

export interface ResolvedHparams {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  maxGradNorm: number;
}

export class OptimizerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "OptimizerError";
  }
}

/** Fills defaults (beta1 0.9, beta2 0.999, eps 1e-8, weight decay 0.01, no clipping) and validates. */
export function resolveHparams(h: OptimHparams): ResolvedHparams {
  const r: ResolvedHparams = {
    lr: h.lr,
    beta1: h.beta1 ?? 0.9,
    beta2: h.beta2 ?? 0.999,
    eps: h.eps ?? 1e-8,
    weightDecay: h.weightDecay ?? 0.01,
    maxGradNorm: h.maxGradNorm ?? 0,
  };
  const bad = (what: string) => new OptimizerError(`AdamW: ${what}`);
  if (!(Number.isFinite(r.lr) && r.lr >= 0)) throw bad(`lr must be a finite number >= 0 (got ${h.lr})`);
  if (!(r.beta1 >= 0 && r.beta1 < 1)) throw bad(`beta1 must be in [0, 1) (got ${r.beta1})`);
  if (!(r.beta2 >= 0 && r.beta2 < 1)) throw bad(`beta2 must be in [0, 1) (got ${r.beta2})`);
  if (!(r.eps > 0)) throw bad(`eps must be > 0 (got ${r.eps})`);
  if (!(r.weightDecay >= 0)) throw bad(`weightDecay must be >= 0 (got ${r.weightDecay})`);
  if (!(r.maxGradNorm >= 0)) throw bad(`maxGradNorm must be >= 0, 0 = no clipping (got ${r.maxGradNorm})`);
  return r;
}

export class AdamW {
  /** First and second moments, same layout as the parameters. */
  readonly m: Float32Array;
  readonly v: Float32Array;
  /** Steps taken so far. */
  step = 0;

  constructor(readonly size: number) {
    this.m = new Float32Array(size);
    this.v = new Float32Array(size);
  }

  /**
   * One step: measures the global gradient norm, clips it to maxGradNorm (scale = max / (norm + 1e-6) when
   * above), updates params in place. Returns the pre-clip norm. A non-finite norm skips the update.
   */
  update(k: Kernels, params: Float32Array, grads: Float32Array, hp: OptimHparams): { gradNorm: number; skipped: boolean } {
    const h = resolveHparams(hp);
    const gradNorm = Math.sqrt(k.sumSquares(this.size, grads));
    if (!Number.isFinite(gradNorm)) return { gradNorm, skipped: true };
    const scale = h.maxGradNorm > 0 ? Math.min(1, h.maxGradNorm / (gradNorm + 1e-6)) : 1;
    this.step++;
    k.adamwUpdate(this.size, params, grads, this.m, this.v, h.lr, h.beta1, h.beta2, h.eps, h.weightDecay, this.step, scale);
    return { gradNorm, skipped: false };
  }
}
