/**
 * The reference kernels: a plain TypeScript implementation of the `Kernels` interface (src/kernels/kernels.ts).
 *
 * It is the oracle the native kernels are tested against and the fallback when the native addon is not
 * built, so it favours being obviously right over being fast (sums are accumulated in double precision).
 * It is not tuned: no blocking, no SIMD, no threads.
 */
import { documentPositions, maskKeeps, type AttentionMask, type AttentionShape, type CachedAttentionShape, type CachedPinned, type Kernels, type PackedWeight, type Q8Weight, type Trans } from "./kernels.js";

function windowOf(w: number): number {
  return w > 0 && Number.isFinite(w) ? w : 0;
}

function sgemm(
  transA: Trans, transB: Trans, M: number, N: number, K: number,
  alpha: number, A: Float32Array, lda: number, B: Float32Array, ldb: number,
  beta: number, C: Float32Array, ldc: number,
): void {
  const acc = new Float64Array(N);
  for (let i = 0; i < M; i++) {
    acc.fill(0);
    if (transB) {
      // op(B)[p, j] = B[j, p]: a dot product per output.
      for (let j = 0; j < N; j++) {
        let s = 0;
        const bRow = j * ldb;
        if (!transA) {
          const aRow = i * lda;
          for (let p = 0; p < K; p++) s += A[aRow + p] * B[bRow + p];
        } else {
          for (let p = 0; p < K; p++) s += A[p * lda + i] * B[bRow + p];
        }
        acc[j] = s;
      }
    } else {
      for (let p = 0; p < K; p++) {
        const a = transA ? A[p * lda + i] : A[i * lda + p];
        if (a === 0) continue;
        const bRow = p * ldb;
        for (let j = 0; j < N; j++) acc[j] += a * B[bRow + j];
      }
    }
    const cRow = i * ldc;
    for (let j = 0; j < N; j++) {
      C[cRow + j] = beta === 0 ? alpha * acc[j] : alpha * acc[j] + beta * C[cRow + j];
    }
  }
}

function sgemv(
  trans: Trans, M: number, N: number, alpha: number, A: Float32Array, lda: number,
  x: Float32Array, beta: number, y: Float32Array,
): void {
  if (!trans) {
    for (let i = 0; i < M; i++) {
      let s = 0;
      const row = i * lda;
      for (let j = 0; j < N; j++) s += A[row + j] * x[j];
      y[i] = beta === 0 ? alpha * s : alpha * s + beta * y[i];
    }
  } else {
    const acc = new Float64Array(N);
    for (let i = 0; i < M; i++) {
      const xi = x[i];
      const row = i * lda;
      for (let j = 0; j < N; j++) acc[j] += A[row + j] * xi;
    }
    for (let j = 0; j < N; j++) y[j] = beta === 0 ? alpha * acc[j] : alpha * acc[j] + beta * y[j];
  }
}

function softmaxInto(N: number, V: number, temperature: number, x: Float32Array, out: Float32Array, log: boolean): void {
  const invT = 1 / temperature;
  for (let n = 0; n < N; n++) {
    const o = n * V;
    let mx = -Infinity;
    for (let j = 0; j < V; j++) mx = Math.max(mx, x[o + j] * invT);
    let sum = 0;
    for (let j = 0; j < V; j++) sum += Math.exp(x[o + j] * invT - mx);
    if (log) {
      const lse = mx + Math.log(sum);
      for (let j = 0; j < V; j++) out[o + j] = x[o + j] * invT - lse;
    } else {
      for (let j = 0; j < V; j++) out[o + j] = Math.exp(x[o + j] * invT - mx) / sum;
    }
  }
}

function attentionForward(
  shape: AttentionShape, mask: AttentionMask, q: Float32Array, k: Float32Array, v: Float32Array,
  sinkLogit: Float32Array | null, out: Float32Array, lse: Float32Array,
): void {
  const { B, T, H, KVH, D, scale } = shape;
  const group = H / KVH;
  const docPos = documentPositions(B, T, mask.docIds);
  const s = new Float64Array(T);
  const acc = new Float64Array(D);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) {
        const kvh = Math.floor(h / group);
        const qo = ((b * T + t) * H + h) * D;
        let mx = sinkLogit ? sinkLogit[h] : -Infinity;
        for (let j = 0; j <= t; j++) {
          if (!maskKeeps(mask, T, docPos, b, t, j)) {
            s[j] = -Infinity;
            continue;
          }
          const ko = ((b * T + j) * KVH + kvh) * D;
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[qo + d] * k[ko + d];
          s[j] = dot * scale;
          mx = Math.max(mx, s[j]);
        }
        acc.fill(0);
        let sum = sinkLogit && mx > -Infinity ? Math.exp(sinkLogit[h] - mx) : 0;
        for (let j = 0; j <= t; j++) {
          if (s[j] === -Infinity) continue;
          const p = Math.exp(s[j] - mx);
          sum += p;
          const vo = ((b * T + j) * KVH + kvh) * D;
          for (let d = 0; d < D; d++) acc[d] += p * v[vo + d];
        }
        for (let d = 0; d < D; d++) out[qo + d] = sum > 0 ? acc[d] / sum : 0;
        lse[(b * T + t) * H + h] = sum > 0 ? mx + Math.log(sum) : -Infinity;
      }
    }
  }
}

function attentionBackward(
  shape: AttentionShape, mask: AttentionMask, q: Float32Array, k: Float32Array, v: Float32Array,
  sinkLogit: Float32Array | null, out: Float32Array, lse: Float32Array, dOut: Float32Array,
  dQ: Float32Array, dK: Float32Array, dV: Float32Array, dSinkLogit: Float32Array | null,
): void {
  const { B, T, H, KVH, D, scale } = shape;
  const group = H / KVH;
  const docPos = documentPositions(B, T, mask.docIds);
  const dKacc = new Float64Array(B * T * KVH * D);
  const dVacc = new Float64Array(B * T * KVH * D);
  const dq = new Float64Array(D);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) {
        const kvh = Math.floor(h / group);
        const qo = ((b * T + t) * H + h) * D;
        const l = lse[(b * T + t) * H + h];
        if (l === -Infinity) {
          for (let d = 0; d < D; d++) dQ[qo + d] = 0;
          continue;
        }
        let delta = 0;
        for (let d = 0; d < D; d++) delta += dOut[qo + d] * out[qo + d];
        if (sinkLogit && dSinkLogit) dSinkLogit[h] -= Math.exp(sinkLogit[h] - l) * delta;
        dq.fill(0);
        for (let j = 0; j <= t; j++) {
          if (!maskKeeps(mask, T, docPos, b, t, j)) continue;
          const ko = ((b * T + j) * KVH + kvh) * D;
          let dot = 0;
          let dp = 0;
          for (let d = 0; d < D; d++) {
            dot += q[qo + d] * k[ko + d];
            dp += dOut[qo + d] * v[ko + d];
          }
          const p = Math.exp(dot * scale - l);
          const ds = p * (dp - delta) * scale;
          for (let d = 0; d < D; d++) {
            dq[d] += ds * k[ko + d];
            dKacc[ko + d] += ds * q[qo + d];
            dVacc[ko + d] += p * dOut[qo + d];
          }
        }
        for (let d = 0; d < D; d++) dQ[qo + d] = dq[d];
      }
    }
  }
  for (let i = 0; i < dKacc.length; i++) {
    dK[i] = dKacc[i];
    dV[i] = dVacc[i];
  }
}

function attentionCached(
  shape: CachedAttentionShape, window: number, sinks: number, q: Float32Array,
  kCache: Float32Array, vCache: Float32Array, blockTable: Int32Array, seqLens: Int32Array,
  sinkLogit: Float32Array | null, out: Float32Array, pinned: CachedPinned | null = null,
): void {
  const { B, Tq, H, KVH, D, scale, blockSize, maxBlocks } = shape;
  const group = H / KVH;
  const w = windowOf(window);
  const acc = new Float64Array(D);
  for (let b = 0; b < B; b++) {
    const len = seqLens[b];
    const isPinned = new Uint8Array(len);
    if (pinned) {
      for (let i = 0; i < pinned.count[b]; i++) {
        const p = pinned.positions[pinned.start[b] + i];
        if (!(p >= 0 && p < len)) throw new RangeError(`attentionCached: pinned entry ${p} of sequence ${b} is outside [0, ${len})`);
        isPinned[p] = 1;
      }
    }
    const s = new Float64Array(len);
    const addr = new Int32Array(len);
    for (let j = 0; j < len; j++) {
      const blk = blockTable[b * maxBlocks + Math.floor(j / blockSize)];
      addr[j] = (blk * blockSize + (j % blockSize)) * KVH * D;
    }
    for (let i = 0; i < Tq; i++) {
      const e = len - Tq + i;
      for (let h = 0; h < H; h++) {
        const kvh = Math.floor(h / group);
        const qo = ((b * Tq + i) * H + h) * D;
        let mx = sinkLogit ? sinkLogit[h] : -Infinity;
        for (let j = 0; j <= e; j++) {
          if (!(w === 0 || e - j < w || j < sinks || isPinned[j])) {
            s[j] = -Infinity;
            continue;
          }
          const ko = addr[j] + kvh * D;
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[qo + d] * kCache[ko + d];
          s[j] = dot * scale;
          mx = Math.max(mx, s[j]);
        }
        acc.fill(0);
        let sum = sinkLogit && mx > -Infinity ? Math.exp(sinkLogit[h] - mx) : 0;
        for (let j = 0; j <= e; j++) {
          if (s[j] === -Infinity) continue;
          const p = Math.exp(s[j] - mx);
          sum += p;
          const vo = addr[j] + kvh * D;
          for (let d = 0; d < D; d++) acc[d] += p * vCache[vo + d];
        }
        for (let d = 0; d < D; d++) out[qo + d] = sum > 0 ? acc[d] / sum : 0;
      }
    }
  }
}

/** bfloat16 bits to fp32 values (exact). */
export function widenBf16(W: Uint16Array): Float32Array {
  const out = new Uint32Array(W.length);
  for (let i = 0; i < W.length; i++) out[i] = W[i]! << 16;
  return new Float32Array(out.buffer);
}

/** The reference product with a bf16 weight: W widened to fp32, then `sgemm`. */
function gemmW16(
  transW: Trans, M: number, N: number, K: number, alpha: number, A: Float32Array, lda: number,
  W: Uint16Array, ldw: number, beta: number, C: Float32Array, ldc: number,
): void {
  const rows = transW ? N : K;
  const cols = transW ? K : N;
  if (ldw < cols && rows > 0) throw new RangeError(`gemmW16: ldw ${ldw} is smaller than a row of the stored W (${cols})`);
  const need = rows > 0 && cols > 0 ? (rows - 1) * ldw + cols : 0;
  if (W.length < need) throw new RangeError(`gemmW16: W has ${W.length} elements, needs ${need}`);
  sgemm(false, transW, M, N, K, alpha, A, lda, widenBf16(W.subarray(0, need)), ldw, beta, C, ldc);
}

/** The reference "packing": a dense copy of W [N, K]. */
function packWeight(N: number, K: number, W: Float32Array, ldw: number): PackedWeight {
  if (ldw < K && N > 0) throw new RangeError(`packWeight: ldw ${ldw} is smaller than K ${K}`);
  if (N > 0 && K > 0 && W.length < (N - 1) * ldw + K) throw new RangeError(`packWeight: W has ${W.length} elements, needs ${(N - 1) * ldw + K}`);
  const data = new Float32Array(N * K);
  for (let n = 0; n < N; n++) data.set(W.subarray(n * ldw, n * ldw + K), n * K);
  return { kernels: "reference", N, K, data };
}

function sgemmPacked(
  M: number, alpha: number, A: Float32Array, lda: number, W: PackedWeight, beta: number, C: Float32Array, ldc: number,
): void {
  if (W.kernels !== "reference") throw new Error(`sgemmPacked: this weight was packed by the ${W.kernels} kernels; pack it with the reference kernels`);
  sgemm(false, true, M, W.N, W.K, alpha, A, lda, W.data, W.K, beta, C, ldc);
}

/** Q8Weight's block depth. */
const Q8_BLOCK = 32;

/** The reference int8 quantization (the native kernels' rule: scale = max |w| / 127, round to nearest even). */
function quantizeWeight(N: number, K: number, W: Float32Array | Uint16Array, ldw: number): Q8Weight {
  if (ldw < K && N > 0) throw new RangeError(`quantizeWeight: ldw ${ldw} is smaller than K ${K}`);
  if (N > 0 && K > 0 && W.length < (N - 1) * ldw + K) throw new RangeError(`quantizeWeight: W has ${W.length} elements, needs ${(N - 1) * ldw + K}`);
  const values = W instanceof Uint16Array ? widenBf16(W) : W;
  const Kp = Math.ceil(K / Q8_BLOCK) * Q8_BLOCK;
  const nb = Kp / Q8_BLOCK;
  const q = new Int8Array(N * Kp);
  const scales = new Float32Array(N * nb);
  for (let n = 0; n < N; n++) {
    for (let b = 0; b < nb; b++) {
      let amax = 0;
      for (let i = 0; i < Q8_BLOCK; i++) {
        const k = b * Q8_BLOCK + i;
        if (k < K) amax = Math.max(amax, Math.abs(values[n * ldw + k]!));
      }
      const s = Math.fround(amax / 127);
      scales[n * nb + b] = s;
      for (let i = 0; i < Q8_BLOCK; i++) {
        const k = b * Q8_BLOCK + i;
        if (k >= K || s === 0) continue;
        q[n * Kp + k] = Math.max(-127, Math.min(127, roundEven(Math.fround(values[n * ldw + k]! / s))));
      }
    }
  }
  return { kernels: "reference", N, K, q, scales };
}

/** Rounds v to the nearest integer, ties to even (C's nearbyint in the default rounding mode). */
function roundEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v - Math.trunc(v)) === 0.5 ? 2 * Math.round(v / 2) : r;
}

/**
 * The reference int8 product, in the native portable order: each row of A (times alpha) quantized by
 * blocks of 32 (scale max |x| / 127); per block, 8 lanes of 4 exact integer products each, lane l adding
 * its sum times (s_w * s_x) into float lane l + 8 (b % 2); then a fixed tree over the 16 lanes.
 */
function gemmQ8(M: number, alpha: number, A: Float32Array, lda: number, W: Q8Weight, beta: number, C: Float32Array, ldc: number): void {
  if (W.kernels !== "reference") throw new Error(`gemmQ8: this weight was quantized by the ${W.kernels} kernels; quantize it with the reference kernels`);
  const { N, K, q, scales } = W;
  const Kp = Math.ceil(K / Q8_BLOCK) * Q8_BLOCK;
  const nb = Kp / Q8_BLOCK;
  const f = Math.fround;
  const lanes = new Float32Array(16);
  const xq = new Int8Array(Kp);
  const sx = new Float32Array(nb);
  for (let m = 0; m < M; m++) {
    xq.fill(0);
    for (let b = 0; b < nb; b++) {
      const block = Array.from({ length: Q8_BLOCK }, (_, i) => (b * Q8_BLOCK + i < K ? f(A[m * lda + b * Q8_BLOCK + i]! * alpha) : 0));
      const s = f(Math.max(...block.map(Math.abs)) / 127);
      sx[b] = s;
      if (s !== 0) block.forEach((v, i) => (xq[b * Q8_BLOCK + i] = Math.max(-127, Math.min(127, roundEven(f(v / s))))));
    }
    for (let n = 0; n < N; n++) {
      lanes.fill(0);
      for (let b = 0; b < nb; b++) {
        const scale = f(scales[n * nb + b]! * sx[b]!);
        for (let l = 0; l < 8; l++) {
          let p = 0;
          for (let i = 0; i < 4; i++) {
            const k = b * Q8_BLOCK + 4 * l + i;
            p += xq[k]! * q[n * Kp + k]!;
          }
          const L = l + 8 * (b % 2);
          lanes[L] = f(lanes[L]! + f(p * scale));
        }
      }
      const a8 = Array.from({ length: 8 }, (_, l) => f(lanes[l]! + lanes[l + 8]!));
      const a4 = Array.from({ length: 4 }, (_, l) => f(a8[l]! + a8[l + 4]!));
      const a2 = [f(a4[0]! + a4[2]!), f(a4[1]! + a4[3]!)];
      const dot = f(a2[0]! + a2[1]!);
      const i = m * ldc + n;
      C[i] = beta === 0 ? dot : f(dot + f(beta * C[i]!));
    }
  }
}

/** The reference implementation of every kernel. */
export const referenceKernels: Kernels = {
  name: "reference",
  describe: () => "reference (TypeScript, 1 thread)",
  sgemm,
  gemmW16,
  sgemv,
  packWeight,
  sgemmPacked,
  quantizeWeight,
  gemmQ8,

  axpy(n, alpha, x, y) {
    for (let i = 0; i < n; i++) y[i] += alpha * x[i];
  },
  scale(n, alpha, x) {
    for (let i = 0; i < n; i++) x[i] *= alpha;
  },
  add(n, a, b, out) {
    for (let i = 0; i < n; i++) out[i] = a[i] + b[i];
  },
  sumSquares(n, x) {
    let s = 0;
    for (let i = 0; i < n; i++) s += x[i] * x[i];
    return s;
  },

  addBias(N, C, x, bias) {
    for (let r = 0; r < N; r++) for (let c = 0; c < C; c++) x[r * C + c] += bias[c];
  },
  biasBackward(N, C, dY, dBias) {
    const acc = new Float64Array(C);
    for (let r = 0; r < N; r++) for (let c = 0; c < C; c++) acc[c] += dY[r * C + c];
    for (let c = 0; c < C; c++) dBias[c] += acc[c];
  },

  embeddingForward(N, C, V, ids, table, out) {
    for (let n = 0; n < N; n++) {
      const id = ids[n];
      if (id < 0 || id >= V) throw new RangeError(`embeddingForward: token id ${id} at row ${n} is outside [0, ${V}); check the tokenizer and vocabulary size.`);
      out.set(table.subarray(id * C, id * C + C), n * C);
    }
  },
  embeddingBackward(N, C, V, ids, dOut, dTable) {
    for (let n = 0; n < N; n++) {
      const id = ids[n];
      if (id < 0 || id >= V) throw new RangeError(`embeddingBackward: token id ${id} at row ${n} is outside [0, ${V}).`);
      for (let c = 0; c < C; c++) dTable[id * C + c] += dOut[n * C + c];
    }
  },

  rmsnormForward(N, C, eps, x, weight, out, rstd) {
    for (let n = 0; n < N; n++) {
      const o = n * C;
      let ss = 0;
      for (let c = 0; c < C; c++) ss += x[o + c] * x[o + c];
      const r = 1 / Math.sqrt(ss / C + eps);
      rstd[n] = r;
      for (let c = 0; c < C; c++) out[o + c] = x[o + c] * r * weight[c];
    }
  },
  rmsnormBackward(N, C, dOut, x, weight, rstd, dX, dWeight) {
    const dw = new Float64Array(C);
    for (let n = 0; n < N; n++) {
      const o = n * C;
      const r = rstd[n];
      let dot = 0;
      for (let c = 0; c < C; c++) dot += dOut[o + c] * weight[c] * x[o + c];
      const k = (r * r * r * dot) / C;
      for (let c = 0; c < C; c++) {
        dw[c] += dOut[o + c] * x[o + c] * r;
        dX[o + c] = r * weight[c] * dOut[o + c] - k * x[o + c];
      }
    }
    for (let c = 0; c < C; c++) dWeight[c] += dw[c];
  },

  ropeForward(N, H, D, positions, cos, sin, x) {
    const half = D / 2;
    for (let n = 0; n < N; n++) {
      const t = positions[n] * half;
      for (let h = 0; h < H; h++) {
        const o = (n * H + h) * D;
        for (let i = 0; i < half; i++) {
          const c = cos[t + i];
          const s = sin[t + i];
          const x1 = x[o + i];
          const x2 = x[o + i + half];
          x[o + i] = x1 * c - x2 * s;
          x[o + i + half] = x2 * c + x1 * s;
        }
      }
    }
  },
  ropeBackward(N, H, D, positions, cos, sin, dX) {
    const half = D / 2;
    for (let n = 0; n < N; n++) {
      const t = positions[n] * half;
      for (let h = 0; h < H; h++) {
        const o = (n * H + h) * D;
        for (let i = 0; i < half; i++) {
          const c = cos[t + i];
          const s = sin[t + i];
          const d1 = dX[o + i];
          const d2 = dX[o + i + half];
          dX[o + i] = d1 * c + d2 * s;
          dX[o + i + half] = d2 * c - d1 * s;
        }
      }
    }
  },

  swigluForward(n, gate, up, out) {
    for (let i = 0; i < n; i++) {
      const g = gate[i];
      out[i] = (g / (1 + Math.exp(-g))) * up[i];
    }
  },
  swigluBackward(n, dOut, gate, up, dGate, dUp) {
    for (let i = 0; i < n; i++) {
      const g = gate[i];
      const u = up[i];
      const sig = 1 / (1 + Math.exp(-g));
      const d = dOut[i];
      dUp[i] = d * g * sig;
      dGate[i] = d * u * sig * (1 + g * (1 - sig));
    }
  },

  softmaxRows(N, V, temperature, x, out) {
    softmaxInto(N, V, temperature, x, out, false);
  },
  logSoftmaxRows(N, V, temperature, x, out) {
    softmaxInto(N, V, temperature, x, out, true);
  },

  logprobsForward(N, V, logits, targets, logprob, lse) {
    for (let n = 0; n < N; n++) {
      const o = n * V;
      let mx = -Infinity;
      for (let j = 0; j < V; j++) mx = Math.max(mx, logits[o + j]);
      let sum = 0;
      for (let j = 0; j < V; j++) sum += Math.exp(logits[o + j] - mx);
      const l = mx + Math.log(sum);
      lse[n] = l;
      const t = targets[n];
      logprob[n] = t >= 0 ? logits[o + t] - l : 0;
    }
  },
  logprobsBackward(N, V, logits, targets, lse, dLogprob, dLogits) {
    for (let n = 0; n < N; n++) {
      const o = n * V;
      const t = targets[n];
      const g = t >= 0 ? dLogprob[n] : 0;
      if (g === 0) {
        dLogits.fill(0, o, o + V);
        continue;
      }
      const l = lse[n];
      for (let j = 0; j < V; j++) dLogits[o + j] = -g * Math.exp(logits[o + j] - l);
      dLogits[o + t] += g;
    }
  },

  adamwUpdate(n, param, grad, m, v, lr, beta1, beta2, eps, weightDecay, step, gradScale) {
    const bc1 = 1 - Math.pow(beta1, step);
    const bc2 = 1 - Math.pow(beta2, step);
    for (let i = 0; i < n; i++) {
      const g = grad[i] * gradScale;
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const upd = m[i] / bc1 / (Math.sqrt(v[i] / bc2) + eps);
      param[i] -= lr * (weightDecay * param[i] + upd);
    }
  },

  attentionForward,
  attentionBackward,
  attentionCached,
};
