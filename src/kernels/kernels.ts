/**
 * The kernel interface: every numeric routine the model's forward and backward passes call.
 *
 * Two implementations sit behind it: the plain TypeScript reference (src/kernels/reference.ts, the oracle
 * in tests) and the native C++ addon (src/kernels/native.ts, the default). `src/kernels/index.ts` picks one.
 * This file declares types and shapes, and defines the attention mask's keep rule (`maskKeeps`, read by
 * the reference kernels and by src/attention/mask.ts); it knows nothing of models or engines.
 *
 * Conventions (apply to every method):
 * - Tensors are row-major `Float32Array`s (subarray views are fine: the view's offset is honoured).
 * - Shapes are written in brackets with these names: N rows (tokens), C channels, F MLP width, V vocabulary,
 *   B batch, T sequence length, H query heads, KVH key/value heads (H % KVH === 0), D head size.
 *   `[B, T, H, D]` means element (b, t, h, d) is at ((b * T + t) * H + h) * D + d.
 * - Calls are synchronous; native work is split across a thread pool inside the call.
 * - Outputs are overwritten unless the parameter says "accumulated" (then the result is added to what
 *   is there, which is how gradients of parameters are gathered across a batch).
 * - Gradients are named dX for the gradient of the loss with respect to X.
 * - Unless a method says so, an output must not alias an input.
 */

/** false = as stored, true = transposed (BLAS 'N' / 'T'). */
export type Trans = boolean;

/**
 * The document id of a shared prefix. Positions with this id must come first in their batch row; every
 * later query of the row keeps them, whatever its document, as if each document were the prefix followed
 * by that document alone (a packed batch of examples that share a system prompt computes it once).
 */
export const SHARED_DOC = -1;

/**
 * The canonical sink-window mask's settings, shared by every sequence of a model: K sink slots and a
 * sliding window of W tokens; { window: 0, sinks: 0 } is full causal attention. The one type for this
 * pair in sinkflex: defined here because the attention kernels are the lowest level that read it, and
 * re-exported by src/attention (which validates it and writes it into checkpoints), the model and the
 * engine.
 */
export interface SinkWindow {
  /** Sliding window W: kv is kept when pos(q) - pos(kv) < W. 0 (or Infinity) = no window (full causal). */
  window: number;
  /**
   * K: the first `sinks` positions of each document (of the shared prefix, where there is one) are sink
   * slots, kept by every later query of that document whatever the window. 0 = none.
   */
  sinks: number;
}

/**
 * Which kv positions a query may attend to: the canonical sink mask (a `SinkWindow` plus the batch's
 * document ids and pinned positions).
 * keep(q, kv) = kv <= q  AND  (doc(q) == doc(kv) OR doc(kv) == SHARED_DOC)
 *               AND  (kv is a sink slot OR kv is pinned OR pos(q) - pos(kv) < window)
 * Positions q, kv are indices along T within one batch row. pos(t) is t's index within its document,
 * counting the shared prefix: t for a prefix position, P + (t - the document's start) otherwise, where P
 * is the row's prefix length (0 without one). The sink slots are the positions with pos < sinks.
 */
export interface AttentionMask extends SinkWindow {
  /**
   * [B, T] document id of each position; null = each batch row is one document. SHARED_DOC (-1) marks
   * a shared prefix at the start of a row.
   */
  docIds: Int32Array | null;
  /** [B, T] 1 = this kv position is pinned (kept like a sink slot), 0 = not; null = none pinned. */
  pinned: Uint8Array | null;
}

/**
 * For each position of each batch row, its index within its document, counting a shared prefix (see
 * AttentionMask): a prefix position keeps its index t; a document position is P + (t - the start of its
 * run of equal docIds), P = the row's prefix length. null docIds = one document per row (index t).
 */
export function documentPositions(B: number, T: number, docIds: Int32Array | null): Int32Array {
  const pos = new Int32Array(B * T);
  for (let b = 0; b < B; b++) {
    let P = 0;
    if (docIds) while (P < T && docIds[b * T + P] === SHARED_DOC) P++;
    let s = 0;
    for (let t = 0; t < T; t++) {
      if (docIds && t > 0 && docIds[b * T + t] !== docIds[b * T + t - 1]) s = t;
      pos[b * T + t] = t < P ? t : P + t - s;
    }
  }
  return pos;
}

/** keep(q, kv) of the canonical sink mask for batch row b (see AttentionMask); docPos = documentPositions(). */
export function maskKeeps(
  mask: AttentionMask, T: number, docPos: Int32Array, b: number, q: number, kv: number,
): boolean {
  if (kv > q) return false;
  const { docIds, pinned } = mask;
  if (docIds && docIds[b * T + q] !== docIds[b * T + kv] && docIds[b * T + kv] !== SHARED_DOC) return false;
  const w = mask.window > 0 && Number.isFinite(mask.window) ? mask.window : 0;
  if (w === 0 || docPos[b * T + q]! - docPos[b * T + kv]! < w) return true;
  if (docPos[b * T + kv]! < mask.sinks) return true;
  return pinned !== null && pinned[b * T + kv] !== 0;
}

/** Shapes of a training-time (full-sequence) attention call. */
export interface AttentionShape {
  B: number;
  T: number;
  H: number;
  KVH: number;
  D: number;
  /** Softmax scale applied to q.k, normally 1 / sqrt(D). */
  scale: number;
}

/** Shapes of an attention call against a paged KV cache (decoding, or appending tokens to a session). */
export interface CachedAttentionShape {
  /** Number of sequences in the call. */
  B: number;
  /** New query tokens per sequence (1 when decoding). */
  Tq: number;
  H: number;
  KVH: number;
  D: number;
  scale: number;
  /** Tokens per cache block. */
  blockSize: number;
  /** Columns of `blockTable` (the most blocks one sequence may use). */
  maxBlocks: number;
}

/**
 * Pinned cache entries of each sequence in an `attentionCached` call: kept by every later query, like the
 * sink slots. Sequence b's are `positions[start[b] .. start[b] + count[b])`, ascending, each below seqLens[b].
 */
export interface CachedPinned {
  /** [B] where sequence b's pinned entries start in `positions`. */
  start: Int32Array;
  /** [B] how many pinned entries sequence b has. */
  count: Int32Array;
  /** The pinned entries of every sequence. */
  positions: Int32Array;
}

/**
 * A weight matrix W [N, K] packed once for repeated products x @ W^T (`packWeight`, `sgemmPacked`). It is a
 * snapshot: later writes to W are not seen, so whoever changes the weights drops its packed copies.
 * `data` is private to the kernel set that packed it (the native one stores W in its micro-kernel's
 * layout, the reference a plain copy); a packed weight only works with that kernel set.
 */
export interface PackedWeight {
  readonly kernels: "reference" | "native";
  readonly N: number;
  readonly K: number;
  readonly data: Float32Array;
}

/**
 * A weight matrix W [N, K] quantized to int8 for sampling (quantizeWeight): by rows, in blocks of 32 depth,
 * each block 32 int8 values `q` and one fp32 scale (w ~ q * scale, scale = max |w| / 127 of the block). Rows
 * are zero-padded to Kp = 32 * ceil(K / 32): q is [N, Kp], scales [N, Kp / 32]. 1.125 bytes per weight.
 */
export interface Q8Weight {
  readonly kernels: "reference" | "native";
  readonly N: number;
  readonly K: number;
  readonly q: Int8Array;
  readonly scales: Float32Array;
}

export interface Kernels {
  /** "reference" or "native". */
  readonly name: "reference" | "native";
  /** One line for logs, e.g. "native (avx512, 2 threads)". */
  describe(): string;

  // ---------------------------------------------------------------- BLAS

  /**
   * C = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T.
   * op(A) is [M, K], op(B) is [K, N], C is [M, N] with row stride ldc.
   * A is stored [M, K] with row stride lda (transA false) or [K, M] (transA true); same for B
   * ([K, N] or [N, K] with row stride ldb). beta = 0 means C is not read (NaNs in C are overwritten).
   * Typical use with Hugging Face weights W [out, in]: y = x @ W^T is sgemm(false, true, ...);
   * dX = dY @ W is sgemm(false, false, ...); dW += dY^T @ X is sgemm(true, false, ..., beta = 1, ...).
   */
  sgemm(
    transA: Trans, transB: Trans, M: number, N: number, K: number,
    alpha: number, A: Float32Array, lda: number, B: Float32Array, ldb: number,
    beta: number, C: Float32Array, ldc: number,
  ): void;

  /**
   * C [M, N] = alpha * A [M, K] @ op(W) + beta * C with W a weight matrix held as bfloat16 (each value the
   * upper 16 bits of its fp32 pattern, in a Uint16Array), products accumulated in fp32. transW true: W is
   * stored [N, K] and op(W) = W^T (y = x @ W^T with a Hugging Face weight); false: W is stored [K, N] and
   * op(W) = W (dX = dY @ W). ldw is W's row stride; beta = 0 means C is not read. The native kernels round A
   * to bf16 and use the CPU's bf16 dot products where it has them (AVX512-BF16, AMX) and SIMD is at AVX-512;
   * elsewhere they widen blocks of W to fp32 for the fp32 kernels. The reference widens W.
   */
  gemmW16(
    transW: Trans, M: number, N: number, K: number, alpha: number, A: Float32Array, lda: number,
    W: Uint16Array, ldw: number, beta: number, C: Float32Array, ldc: number,
  ): void;

  /** Packs W [N, K] (row stride ldw) for `sgemmPacked`; the result holds its own copy of the values. */
  packWeight(N: number, K: number, W: Float32Array, ldw: number): PackedWeight;

  /**
   * C [M, N] = alpha * A [M, K] @ W^T + beta * C with W packed by `packWeight` (N, K are the packed
   * weight's): the same result as sgemm(false, true, M, N, K, alpha, A, lda, W, K, beta, C, ldc), without
   * re-reading W in its stored layout. Throws on a weight packed by another kernel set.
   */
  sgemmPacked(
    M: number, alpha: number, A: Float32Array, lda: number, W: PackedWeight, beta: number, C: Float32Array, ldc: number,
  ): void;

  /** Quantizes W [N, K] (fp32 values, or bf16 bits; row stride ldw) to int8 blocks (see Q8Weight). */
  quantizeWeight(N: number, K: number, W: Float32Array | Uint16Array, ldw: number): Q8Weight;

  /**
   * C [M, N] = alpha * A [M, K] @ W^T + beta * C with W quantized by `quantizeWeight`. Each element is one
   * dot product summed in a fixed order (16 lanes over the depth, then a fixed tree), so a row of C is the
   * same whatever M is. Throws on a weight quantized by another kernel set.
   */
  gemmQ8(M: number, alpha: number, A: Float32Array, lda: number, W: Q8Weight, beta: number, C: Float32Array, ldc: number): void;

  /**
   * y = alpha * op(A) @ x + beta * y, A stored [M, N] with row stride lda.
   * trans false: x is [N], y is [M]. trans true: x is [M], y is [N]. beta = 0 means y is not read.
   */
  sgemv(
    trans: Trans, M: number, N: number, alpha: number, A: Float32Array, lda: number,
    x: Float32Array, beta: number, y: Float32Array,
  ): void;

  // ------------------------------------------------------- elementwise and rows

  /** y[i] += alpha * x[i] for i < n. */
  axpy(n: number, alpha: number, x: Float32Array, y: Float32Array): void;
  /** x[i] *= alpha for i < n (in place). */
  scale(n: number, alpha: number, x: Float32Array): void;
  /** out[i] = a[i] + b[i] for i < n; out may alias a or b. */
  add(n: number, a: Float32Array, b: Float32Array, out: Float32Array): void;
  /** Sum of x[i]^2 for i < n, accumulated in double precision. */
  sumSquares(n: number, x: Float32Array): number;

  /** x [N, C] += bias [C] on every row (in place). */
  addBias(N: number, C: number, x: Float32Array, bias: Float32Array): void;
  /** dBias [C] (accumulated) += sum over rows of dY [N, C]. */
  biasBackward(N: number, C: number, dY: Float32Array, dBias: Float32Array): void;

  /** out [N, C] = table[ids[n], :], table [V, C]. Throws on an id outside [0, V). */
  embeddingForward(N: number, C: number, V: number, ids: Int32Array, table: Float32Array, out: Float32Array): void;
  /** dTable [V, C] (accumulated): dTable[ids[n], :] += dOut[n, :]. */
  embeddingBackward(N: number, C: number, V: number, ids: Int32Array, dOut: Float32Array, dTable: Float32Array): void;

  /**
   * RMSNorm: out [N, C] = x / sqrt(mean(x^2) + eps) * weight [C]; rstd [N] receives 1 / sqrt(mean(x^2) + eps)
   * (kept for the backward pass).
   */
  rmsnormForward(
    N: number, C: number, eps: number, x: Float32Array, weight: Float32Array, out: Float32Array, rstd: Float32Array,
  ): void;
  /** dX [N, C] (overwritten) and dWeight [C] (accumulated) from dOut [N, C], x, weight and the saved rstd [N]. */
  rmsnormBackward(
    N: number, C: number, dOut: Float32Array, x: Float32Array, weight: Float32Array, rstd: Float32Array,
    dX: Float32Array, dWeight: Float32Array,
  ): void;

  /**
   * Rotary embedding, in place on x [N, H, D] (Hugging Face "rotate_half" layout: pairs (i, i + D/2)):
   *   x1' = x1 * cos - x2 * sin,  x2' = x2 * cos + x1 * sin,  with cos/sin = table[positions[n], i].
   * cos, sin: [P, D/2] tables built by the caller (so any RoPE scaling is the caller's choice);
   * positions [N] index their rows. Apply to q with H heads and to k with KVH heads.
   */
  ropeForward(
    N: number, H: number, D: number, positions: Int32Array, cos: Float32Array, sin: Float32Array, x: Float32Array,
  ): void;
  /** The backward of ropeForward, in place on dX [N, H, D] (rotation by -angle). */
  ropeBackward(
    N: number, H: number, D: number, positions: Int32Array, cos: Float32Array, sin: Float32Array, dX: Float32Array,
  ): void;

  /** SwiGLU: out[i] = silu(gate[i]) * up[i] for i < n (n = N * F), silu(g) = g / (1 + exp(-g)); out may alias gate or up. */
  swigluForward(n: number, gate: Float32Array, up: Float32Array, out: Float32Array): void;
  /** dGate, dUp (overwritten) from dOut and the forward inputs gate, up. dGate may alias gate, dUp may alias up. */
  swigluBackward(
    n: number, dOut: Float32Array, gate: Float32Array, up: Float32Array, dGate: Float32Array, dUp: Float32Array,
  ): void;

  /** out [N, V] = softmax(x [N, V] / temperature) per row; out may alias x. temperature > 0. */
  softmaxRows(N: number, V: number, temperature: number, x: Float32Array, out: Float32Array): void;
  /** out [N, V] = log_softmax(x [N, V] / temperature) per row; out may alias x. temperature > 0. */
  logSoftmaxRows(N: number, V: number, temperature: number, x: Float32Array, out: Float32Array): void;

  /**
   * Teacher-forced log-probs of target tokens (cross-entropy = -logprob):
   * logprob[n] = logits[n, targets[n]] - logsumexp(logits[n, :]); lse [N] receives logsumexp (for the backward).
   * logits [N, V]. A target < 0 means "no target": logprob[n] = 0 (lse is still written).
   */
  logprobsForward(
    N: number, V: number, logits: Float32Array, targets: Int32Array, logprob: Float32Array, lse: Float32Array,
  ): void;
  /**
   * dLogits [N, V] (overwritten) = dLogprob[n] * (onehot(targets[n]) - softmax(logits[n, :])), using the
   * saved lse [N]. Rows with target < 0 or dLogprob[n] = 0 get zeros. dLogits may alias logits (in place,
   * so the [N, V] logits buffer is reused for its gradient).
   */
  logprobsBackward(
    N: number, V: number, logits: Float32Array, targets: Int32Array, lse: Float32Array, dLogprob: Float32Array,
    dLogits: Float32Array,
  ): void;

  /**
   * One AdamW step on n parameters, in place on param, m, v (decoupled weight decay, PyTorch's AdamW):
   *   g = grad * gradScale (gradScale carries gradient clipping and accumulation averaging)
   *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
   *   param -= lr * (weightDecay * param + (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps))
   * step counts from 1.
   */
  adamwUpdate(
    n: number, param: Float32Array, grad: Float32Array, m: Float32Array, v: Float32Array,
    lr: number, beta1: number, beta2: number, eps: number, weightDecay: number, step: number, gradScale: number,
  ): void;

  // ------------------------------------------------------------ attention

  /**
   * Causal grouped-query attention with the canonical sink mask, over whole sequences (training, scoring).
   * q [B, T, H, D]; k, v [B, T, KVH, D] (query head h reads kv head floor(h / (H / KVH))).
   * out [B, T, H, D]; lse [B, T, H] receives each row's log-sum-exp of the scaled, masked scores (including
   * the sink logit), kept for the backward pass.
   * sinkLogit [H] or null: a learnable per-head logit added to each softmax denominator (it attends to
   * nothing: p_j = exp(s_j) / (exp(sinkLogit[h]) + sum_k exp(s_k))). A query row with no kept kv (cannot
   * happen with kv = q always kept) would get out = 0.
   */
  attentionForward(
    shape: AttentionShape, mask: AttentionMask, q: Float32Array, k: Float32Array, v: Float32Array,
    sinkLogit: Float32Array | null, out: Float32Array, lse: Float32Array,
  ): void;

  /**
   * The backward of attentionForward. Inputs: the forward's q, k, v, out, lse and dOut [B, T, H, D].
   * dQ [B, T, H, D], dK, dV [B, T, KVH, D] are overwritten; dSinkLogit [H] is accumulated (pass null when
   * sinkLogit is null).
   */
  attentionBackward(
    shape: AttentionShape, mask: AttentionMask, q: Float32Array, k: Float32Array, v: Float32Array,
    sinkLogit: Float32Array | null, out: Float32Array, lse: Float32Array, dOut: Float32Array,
    dQ: Float32Array, dK: Float32Array, dV: Float32Array, dSinkLogit: Float32Array | null,
  ): void;

  /**
   * Attention of new query tokens against a paged KV cache (decoding and session prefill).
   * q [B, Tq, H, D]; out [B, Tq, H, D].
   * kCache, vCache: [numBlocks, blockSize, KVH, D]. Sequence b's cache entry j (its j-th kept token) lives in
   * block blockTable[b * maxBlocks + floor(j / blockSize)], row j % blockSize. blockTable [B, maxBlocks].
   * seqLens [B]: cached entries of sequence b, INCLUDING its Tq new tokens, which the caller has already
   * written at entries seqLens[b] - Tq .. seqLens[b] - 1.
   * New token i of sequence b is at entry e = seqLens[b] - Tq + i and attends entries j <= e with
   *   j < sinks  OR  j is pinned  OR  e - j < window   (window 0 = no window),
   * so with an append-only cache this is the canonical mask of one document. Entries the mask drops are never
   * read, so the caller may evict their blocks (any valid block id may stand in the table for them).
   * sinkLogit [H] or null, as in attentionForward. pinned: sequence b's pinned entries (`CachedPinned`), or
   * null / absent = none.
   */
  attentionCached(
    shape: CachedAttentionShape, window: number, sinks: number, q: Float32Array,
    kCache: Float32Array, vCache: Float32Array, blockTable: Int32Array, seqLens: Int32Array,
    sinkLogit: Float32Array | null, out: Float32Array, pinned?: CachedPinned | null,
  ): void;
}
