/**
 * Mimetic initialization of attention (after Trockman & Kolter, "Mimetic Initialization of
 * Self-Attention Layers", 2023): the weights of a fresh model's attention are drawn so that each head's
 * query-key product W_q^T W_k and value-output product W_o W_v start close to a multiple of a
 * projection (a pattern trained attention layers show), instead of near zero. A head then starts by
 * attending to positions whose hidden state resembles its own (the same token, at the first layer) and
 * by passing on what it reads, which a model trained from scratch otherwise has to discover first.
 *
 * Per key/value group g (shared by the query heads of a grouped-query model): W_k[g] and W_v[g] keep
 * their random N(0, std) draw; each query head h of the group takes W_q[h] = a W_k[g] + noise, and its
 * columns of W_o are c W_v[g]^T + noise. `a` and `c` are set from the shapes so that, for an
 * RMS-normalized input x, the same-token attention logit x^T W_q^T W_k x / sqrt(D) is about `qkLogit`
 * and W_o W_v x carries about `ovGain` of x's component in the head's subspace.
 */
import type { ModelConfig } from "./config.js";
import type { ModelParams } from "./params.js";
import { Rng } from "../core/index.js";

export interface MimeticOptions {
  /** The same-token attention logit a head starts with (before RoPE's rotation), about. Default 3. */
  qkLogit?: number;
  /** The share of the input (in the head's subspace) a head's output starts by passing on. Default 0.2. */
  ovGain?: number;
  /** The std of the random part added to W_q and W_o, relative to their mimetic part. Default 0.25. */
  noise?: number;
}

export function applyMimeticAttention(cfg: ModelConfig, params: ModelParams, std: number, seed: number, options: MimeticOptions = {}): void {
  const qkLogit = options.qkLogit ?? 3;
  const ovGain = options.ovGain ?? 0.2;
  const noise = options.noise ?? 0.25;
  if (!(qkLogit >= 0) || !(ovGain >= 0) || !(noise >= 0)) throw new RangeError("mimetic init: qkLogit, ovGain and noise must be >= 0");
  const C = cfg.hiddenSize;
  const D = cfg.headDim;
  const perGroup = cfg.numHeads / cfg.numKvHeads;
  // |W_k x|^2 is about D std^2 C for unit-variance x, so W_q = a W_k gives a logit of a sqrt(D) std^2 C.
  const a = qkLogit / (Math.sqrt(D) * std * std * C);
  // W_v^T W_v x has a component of about D std^2 |x| along x, so W_o = c W_v^T passes on c D std^2 of x.
  const c = ovGain / (D * std * std);
  const rng = new Rng((seed ^ 0x6d696d65) >>> 0, "xoshiro128**");
  for (const layer of params.layers) {
    const H = cfg.numHeads * D;
    for (let h = 0; h < cfg.numHeads; h++) {
      const g = Math.floor(h / perGroup);
      for (let d = 0; d < D; d++) {
        const qRow = (h * D + d) * C;
        const kRow = (g * D + d) * C;
        for (let i = 0; i < C; i++) layer.q[qRow + i] = a * (layer.k[kRow + i]! + noise * std * rng.normal());
      }
      // W_o is [C, H*D]: head h's columns h*D..h*D+D-1 take c * W_v[g]^T.
      for (let i = 0; i < C; i++) {
        for (let d = 0; d < D; d++) {
          const vAt = (g * D + d) * C + i;
          layer.o[i * H + h * D + d] = c * (layer.v[vAt]! + noise * std * rng.normal());
        }
      }
    }
  }
}
