/**
 * The Qwen2 / Qwen3 / Llama decoder, forward and backward written out layer by layer (as in llm.c): embedding,
 * RMSNorm, attention with RoPE and grouped-query heads (Qwen3: per-head q/k RMSNorm), SwiGLU MLP, LM head with log-softmax.
 *
 * Two passes live here:
 * - `trainForward` / `trainBackward`: whole packed sequences (training and teacher-forced scoring), with
 *   every activation the backward needs kept in a preallocated `TrainWorkspace`, or (activation
 *   checkpointing, `{ checkpoint: true }`) only each layer's input, the backward recomputing one layer's
 *   activations at a time from it (the same kernel calls on the same inputs: the same gradients);
 * - `cachedForward`: new tokens of several sequences against a paged KV cache (prefill and decoding).
 *
 * Every number is computed by a `Kernels` implementation, so native and reference kernels are
 * interchangeable. A weight matrix may be fp32 or bf16 (params.ts): every product with one goes through
 * `xWT` (y = x W^T) or `dyW` (dX = dY W), which read either; a LoRA adapter is either merged into fp32
 * weights or, over bf16 weights, run beside them (`Model.lora`). This file is not the optimizer (optimizer.ts), not the KV-cache bookkeeping (the
 * engine's), and not a general autograd: each forward step has its backward step written beside it.
 *
 * Shapes: N packed tokens, C hidden, H query heads, KVH kv heads, D head size, Q = H*D, KV = KVH*D,
 * F MLP width, V vocabulary, L layers.
 */
import { documentPositions, SHARED_DOC, type AttentionMask, type CachedPinned, type Kernels, type SinkWindow } from "../kernels/index.js";
import type { ModelConfig } from "./config.js";
import type { PackedWeights } from "./packed-weights.js";
import type { QuantizedWeights } from "./quantized-weights.js";
import type { LoraGrads, LoraProjection } from "./lora.js";
import { hasQkNorm, type ModelParams, type WeightMatrix } from "./params.js";
import { RopeTable } from "./rope.js";

/**
 * The former name of the sink-window mask's settings: the same type as `SinkWindow` (src/kernels, re-exported
 * by src/attention), kept for importers not yet switched. New code names `SinkWindow`.
 */
export type AttentionSettings = SinkWindow;

/** A model ready to run: config, parameters, kernels, RoPE tables and mask settings. */
export interface Model {
  cfg: ModelConfig;
  params: ModelParams;
  kernels: Kernels;
  rope: RopeTable;
  /** The canonical sink-window mask every sequence of this model attends with ({0, 0} = full attention). */
  attention: SinkWindow;
  /**
   * Packed weight matrices reused by `cachedForward`'s products with several rows; absent = every product
   * reads the weights as stored. Must be cleared whenever the weights change.
   */
  packed?: PackedWeights;
  /**
   * int8 copies of the weight matrices that `cachedForward` (sampling sessions) multiplies by instead of the
   * weights, the LM head included; absent = sessions use the weights. Must be cleared whenever the weights
   * change. Training and teacher-forced scoring never read them.
   */
  sampling?: QuantizedWeights;
  /**
   * A LoRA adapter run beside the weights rather than merged into them (over bf16 weights, which cannot
   * hold a merged update): every adapted projection adds s B A x in the forward passes, and its input
   * gradient s A^T B^T dY in `trainBackward`. Absent: no adapter, or one merged into the weights.
   */
  lora?: LoraGrads;
}

/** Several sequences packed one after another into N rows. */
export interface PackedBatch {
  /** [N] token ids. */
  ids: Int32Array;
  /**
   * [N] positions: restarting at 0 for each sequence; in a sequence that starts with a shared prefix
   * (doc id SHARED_DOC), each document's positions continue from the prefix's end, as if it were the
   * prefix followed by that document alone.
   */
  positions: Int32Array;
  /** [N] the next token of each row, -1 at the end of a sequence. */
  targets: Int32Array;
  /** Start row and length of each sequence. */
  starts: number[];
  lengths: number[];
  /** [N] document ids / pinned flags for the canonical mask, or null. */
  docIds: Int32Array | null;
  pinned: Uint8Array | null;
  /**
   * The rows whose log-probs are wanted, ascending, or null = every row. The LM head (the largest
   * product of a small model) runs on these rows only; the others' log-probs read 0 and take no gradient.
   */
  scored: Int32Array | null;
}

/**
 * Packs token sequences (each of length >= 1) into one batch. `scored[i]`, when given, has one flag per
 * prediction of sequence i (length - 1): 1 = its log-prob is wanted.
 */
export function packSequences(seqs: number[][], docIds?: Int32Array[] | null, pinned?: Uint8Array[] | null, scored?: Uint8Array[] | null): PackedBatch {
  const N = seqs.reduce((a, s) => a + s.length, 0);
  const ids = new Int32Array(N);
  const positions = new Int32Array(N);
  const targets = new Int32Array(N);
  const d = docIds ? new Int32Array(N) : null;
  const p = pinned ? new Uint8Array(N) : null;
  const starts: number[] = [];
  const lengths: number[] = [];
  let o = 0;
  seqs.forEach((s, i) => {
    if (s.length === 0) throw new RangeError(`sequence ${i} is empty; every sequence needs at least one token`);
    starts.push(o);
    lengths.push(s.length);
    const shared = docIds && docIds[i]![0] === SHARED_DOC ? documentPositions(1, s.length, docIds[i]!) : null;
    for (let t = 0; t < s.length; t++) {
      ids[o + t] = s[t]!;
      positions[o + t] = shared ? shared[t]! : t;
      targets[o + t] = t + 1 < s.length ? s[t + 1]! : -1;
    }
    if (d) d.set(docIds![i]!, o);
    if (p) p.set(pinned![i]!, o);
    o += s.length;
  });
  let rows: Int32Array | null = null;
  if (scored) {
    const list: number[] = [];
    scored.forEach((flags, i) => {
      for (let t = 0; t < flags.length; t++) if (flags[t]) list.push(starts[i]! + t);
    });
    rows = Int32Array.from(list);
  }
  return { ids, positions, targets, starts, lengths, docIds: d, pinned: p, scored: rows };
}

/** Runs of consecutive sequences of equal length: each is one [B, T] attention call. */
function attentionGroups(b: PackedBatch): { start: number; B: number; T: number }[] {
  const groups: { start: number; B: number; T: number }[] = [];
  for (let i = 0; i < b.lengths.length; i++) {
    const last = groups[groups.length - 1];
    if (last && last.T === b.lengths[i]) last.B++;
    else groups.push({ start: b.starts[i]!, B: 1, T: b.lengths[i]! });
  }
  return groups;
}

/** The largest logits block kept at once ([rows, V] floats); longer batches recompute the LM head in chunks. */
const LOGITS_BUDGET = 1 << 25;

interface LayerActs {
  /** [N, C] */ ln1: Float32Array;
  /** [N] */ rstd1: Float32Array;
  /** [N, Q] after RoPE */ q: Float32Array;
  /** [N, Q] / [N, KV] projections before the per-head norm (Qwen3; empty otherwise) */ qRaw: Float32Array;
  kRaw: Float32Array;
  /** [N, H] / [N, KVH] per-head norm rstd (Qwen3; empty otherwise) */ qRstd: Float32Array;
  kRstd: Float32Array;
  /** [N, KV] after RoPE */ k: Float32Array;
  /** [N, KV] */ v: Float32Array;
  /** [N, Q] */ att: Float32Array;
  /** [N, H] */ lse: Float32Array;
  /** [N, C] */ residMid: Float32Array;
  /** [N, C] */ ln2: Float32Array;
  /** [N] */ rstd2: Float32Array;
  /** [N, F] */ gate: Float32Array;
  /** [N, F] */ up: Float32Array;
  /** [N, F] */ act: Float32Array;
}

/** Bytes of one layer's kept activations (`LayerActs`) per token. */
function layerActFloats(cfg: ModelConfig): number {
  const { hiddenSize: C, numHeads: H, numKvHeads: KVH, headDim: D, intermediateSize: F } = cfg;
  const qkNorm = hasQkNorm(cfg) ? H * D + KVH * D + H + KVH : 0;
  return 3 * C + 2 + 2 * H * D + 2 * KVH * D + H + 3 * F + qkNorm;
}

/**
 * Bytes of the activations a training forward over N tokens keeps when it keeps every layer's (without
 * activation checkpointing): what checkpointing saves, less one layer's.
 */
export function layerActivationBytes(cfg: ModelConfig, N: number): number {
  return 4 * N * cfg.numLayers * layerActFloats(cfg);
}

function allocLayerActs(cfg: ModelConfig, cap: number): LayerActs {
  const { hiddenSize: C, numHeads: H, numKvHeads: KVH, headDim: D, intermediateSize: F } = cfg;
  const Q = H * D;
  const KV = KVH * D;
  const qkNorm = hasQkNorm(cfg);
  return {
    ln1: new Float32Array(cap * C),
    rstd1: new Float32Array(cap),
    q: new Float32Array(cap * Q),
    qRaw: new Float32Array(qkNorm ? cap * Q : 0),
    kRaw: new Float32Array(qkNorm ? cap * KV : 0),
    qRstd: new Float32Array(qkNorm ? cap * H : 0),
    kRstd: new Float32Array(qkNorm ? cap * KVH : 0),
    k: new Float32Array(cap * KV),
    v: new Float32Array(cap * KV),
    att: new Float32Array(cap * Q),
    lse: new Float32Array(cap * H),
    residMid: new Float32Array(cap * C),
    ln2: new Float32Array(cap * C),
    rstd2: new Float32Array(cap),
    gate: new Float32Array(cap * F),
    up: new Float32Array(cap * F),
    act: new Float32Array(cap * F),
  };
}

/** Preallocated activations and gradient scratch for packed batches of up to `capacity` tokens. */
export class TrainWorkspace {
  capacity = 0;
  /** resid[l] [N, C] is layer l's input; resid[L] the last layer's output. */
  resid: Float32Array[] = [];
  /**
   * Layer activations: layers[l] is layer l's after a forward that keeps every layer's; after a
   * checkpointed forward (`checkpointed`) only layers[0] is meaningful, a scratch slot the forward ran
   * every layer through and the backward recomputes each layer into.
   */
  layers: LayerActs[] = [];
  /** Tokens each slot of `layers` holds. */
  layerCapacity = 0;
  /** [N] the RoPE table row of each token of the last forward's batch (RopeTable.rowsOf). */
  ropeRows: Int32Array = new Int32Array(0);
  /** Whether the last forward kept only the layers' inputs (activation checkpointing). */
  checkpointed = false;
  /** Whether the last forward was run for a backward (`trainBackward` refuses to follow one that was not). */
  forBackward = false;
  /** [N, C] */ lnf = new Float32Array(0);
  /** [N] */ rstdf = new Float32Array(0);
  /** [R, V], R = logitRows */ logits = new Float32Array(0);
  logitRows = 0;
  /** [N] log p(target) per row (0 where no target). */ logprob = new Float32Array(0);
  /** [N] */ lse = new Float32Array(0);
  /** Scored rows' scratch, R rows a chunk: final-norm outputs [R, C], their gradients [R, C], targets, log-probs, lse, dLogprob. */
  scoredLn = new Float32Array(0);
  scoredDLn = new Float32Array(0);
  scoredTargets = new Int32Array(0);
  scoredLogprob = new Float32Array(0);
  scoredLse = new Float32Array(0);
  scoredDLogprob = new Float32Array(0);
  // backward scratch
  dResid = new Float32Array(0);
  dTmp = new Float32Array(0);
  dLn = new Float32Array(0);
  dAtt = new Float32Array(0);
  dQ = new Float32Array(0);
  dK = new Float32Array(0);
  dV = new Float32Array(0);
  /** [N, KV] gradient of the k projection before its per-head norm (Qwen3) */ dKRaw = new Float32Array(0);
  dAct = new Float32Array(0);
  /** Whether `logits` holds all rows of the last forward (no recompute needed in backward). */
  logitsComplete = false;

  /** `logitsBudget`: the most logits floats kept at once ([rows, V]); longer batches go in row chunks. */
  constructor(private readonly cfg: ModelConfig, private readonly logitsBudget = LOGITS_BUDGET) {}

  /**
   * Grows (never shrinks) the buffers to hold N tokens, with `slots` layer-activation slots (L to keep
   * every layer's, 1 for a checkpointed or scoring forward). `dropExtra` frees slots beyond `slots` (a
   * checkpointed training forward, whose point is to hold one layer's activations).
   */
  ensure(N: number, withBackward: boolean, slots = this.cfg.numLayers, dropExtra = false): void {
    const { hiddenSize: C, numHeads: H, intermediateSize: F, vocabSize: V } = this.cfg;
    const Q = H * this.cfg.headDim;
    const KV = this.cfg.numKvHeads * this.cfg.headDim;
    const qkNorm = hasQkNorm(this.cfg);
    if (N > this.capacity) {
      const cap = Math.max(N, Math.ceil(this.capacity * 1.25));
      this.capacity = cap;
      this.resid = Array.from({ length: this.cfg.numLayers + 1 }, () => new Float32Array(cap * C));
      this.lnf = new Float32Array(cap * C);
      this.rstdf = new Float32Array(cap);
      this.logprob = new Float32Array(cap);
      this.lse = new Float32Array(cap);
      this.logitRows = Math.max(1, Math.min(cap, Math.floor(this.logitsBudget / V)));
      this.logits = new Float32Array(this.logitRows * V);
      this.scoredLn = new Float32Array(this.logitRows * C);
      this.scoredDLn = new Float32Array(this.logitRows * C);
      this.scoredTargets = new Int32Array(this.logitRows);
      this.scoredLogprob = new Float32Array(this.logitRows);
      this.scoredLse = new Float32Array(this.logitRows);
      this.scoredDLogprob = new Float32Array(this.logitRows);
      this.dResid = new Float32Array(0);
    }
    if (N > this.layerCapacity) {
      // every slot is reallocated: drop the old ones first so both sets are never held at once
      const cap = Math.max(N, Math.ceil(this.layerCapacity * 1.25));
      const count = Math.max(slots, dropExtra ? 0 : this.layers.length);
      this.layers = [];
      this.layerCapacity = cap;
      this.layers = Array.from({ length: count }, () => allocLayerActs(this.cfg, cap));
    } else if (this.layers.length < slots) {
      // more slots than held: sized for this batch, not for the largest one a single slot held
      const cap = Math.max(N, 1);
      this.layers = [];
      this.layerCapacity = cap;
      this.layers = Array.from({ length: slots }, () => allocLayerActs(this.cfg, cap));
    } else if (dropExtra && this.layers.length > slots) {
      this.layers.length = slots;
    }
    if (withBackward && this.dResid.length < this.capacity * C) {
      const cap = this.capacity;
      this.dResid = new Float32Array(cap * C);
      this.dTmp = new Float32Array(cap * C);
      this.dLn = new Float32Array(cap * C);
      this.dAtt = new Float32Array(cap * Q);
      this.dQ = new Float32Array(cap * Q);
      this.dK = new Float32Array(cap * KV);
      this.dV = new Float32Array(cap * KV);
      this.dKRaw = new Float32Array(qkNorm ? cap * KV : 0);
      this.dAct = new Float32Array(cap * F);
    }
  }
}

function maskFor(m: Model, b: PackedBatch, start: number, n: number): AttentionMask {
  return {
    window: m.attention.window,
    sinks: m.attention.sinks,
    docIds: b.docIds ? b.docIds.subarray(start, start + n) : null,
    pinned: b.pinned ? b.pinned.subarray(start, start + n) : null,
  };
}

/** y [N, out] = x [N, in] @ W^T (W [out, in], Hugging Face layout) (+ bias). */
function linear(k: Kernels, N: number, outDim: number, inDim: number, x: Float32Array, W: WeightMatrix, bias: Float32Array | null, y: Float32Array): void {
  if (W instanceof Uint16Array) k.gemmW16(true, N, outDim, inDim, 1, x, inDim, W, inDim, 0, y, outDim);
  else if (N === 1) k.sgemv(false, outDim, inDim, 1, W, inDim, x, 0, y); // one token: matrix-vector
  else k.sgemm(false, true, N, outDim, inDim, 1, x, inDim, W, inDim, 0, y, outDim);
  if (bias) k.addBias(N, outDim, y, bias);
}

/** y [N, out] = x [N, in] @ W^T + beta * y, W [out, in] fp32 or bf16; x, y dense rows (strides in, out). */
export function xWT(k: Kernels, N: number, outDim: number, inDim: number, x: Float32Array, W: WeightMatrix, beta: number, y: Float32Array): void {
  if (W instanceof Uint16Array) k.gemmW16(true, N, outDim, inDim, 1, x, inDim, W, inDim, beta, y, outDim);
  else k.sgemm(false, true, N, outDim, inDim, 1, x, inDim, W, inDim, beta, y, outDim);
}

/** dX [N, in] = dY [N, out] @ W + beta * dX, W [out, in] fp32 or bf16 (the input gradient of y = x W^T). */
function dyW(k: Kernels, N: number, outDim: number, inDim: number, dY: Float32Array, W: WeightMatrix, beta: number, dX: Float32Array): void {
  if (W instanceof Uint16Array) k.gemmW16(false, N, inDim, outDim, 1, dY, outDim, W, inDim, beta, dX, inDim);
  else k.sgemm(false, false, N, inDim, outDim, 1, dY, outDim, W, inDim, beta, dX, inDim);
}

/** out [N, C] = table[ids[n], :] for a table [V, C] held fp32 or bf16. */
function embedRows(k: Kernels, N: number, C: number, V: number, ids: Int32Array, table: WeightMatrix, out: Float32Array): void {
  if (!(table instanceof Uint16Array)) {
    k.embeddingForward(N, C, V, ids, table, out);
    return;
  }
  const o = new Uint32Array(out.buffer, out.byteOffset, N * C);
  for (let n = 0; n < N; n++) {
    const id = ids[n]!;
    if (!(id >= 0 && id < V)) throw new RangeError(`embedding: token id ${id} at row ${n} is outside [0, ${V})`);
    for (let c = 0, s = id * C, d = n * C; c < C; c++) o[d + c] = table[s + c]! << 16;
  }
}

/** LM head over rows [r0, r0 + R): logits [R, V] = lnf @ lmHead^T. */
function lmHeadRows(m: Model, ws: TrainWorkspace, r0: number, R: number): void {
  const { hiddenSize: C, vocabSize: V } = m.cfg;
  xWT(m.kernels, R, V, C, ws.lnf.subarray(r0 * C), m.params.lmHead, 0, ws.logits);
}

/** Options of `trainForward`. */
export interface TrainForwardOptions {
  /**
   * Activation checkpointing: keep only each layer's input (`ws.resid`) and run every layer through one
   * scratch slot; `trainBackward` then recomputes each layer's activations from its input before its
   * backward. Holds one layer's activations instead of L, for one more forward of the layers; the
   * gradients are the same (the same kernel calls on the same inputs). A forward without a backward
   * (scoring) may use it too. Default false: every layer's activations are kept (`ws.layers[l]`).
   */
  checkpoint?: boolean;
}

/** The per-batch facts every layer's forward and backward read. */
interface BatchLayout {
  groups: { start: number; B: number; T: number }[];
  scale: number;
}

/**
 * One layer's forward from its input `ws.resid[l]`: fills the activations `a` and, when `y` is given, writes
 * the layer's output there (a recompute in the backward passes null: the output is already kept).
 */
function layerForward(m: Model, ws: TrainWorkspace, b: PackedBatch, lay: BatchLayout, l: number, a: LayerActs, y: Float32Array | null): void {
  const { cfg, params: P, kernels: k, lora } = m;
  const N = b.ids.length;
  const { hiddenSize: C, numHeads: H, numKvHeads: KVH, headDim: D, intermediateSize: F } = cfg;
  const Q = H * D;
  const KV = KVH * D;
  const { cos, sin } = m.rope;
  const { groups, scale } = lay;
  const W = P.layers[l]!;
  const x = ws.resid[l]!;
  k.rmsnormForward(N, C, cfg.rmsNormEps, x, W.inputNorm, a.ln1, a.rstd1);
  if (W.qNorm && W.kNorm) {
    linear(k, N, Q, C, a.ln1, W.q, W.qBias, a.qRaw);
    lora?.forward(k, l, "q", N, a.ln1, a.qRaw);
    linear(k, N, KV, C, a.ln1, W.k, W.kBias, a.kRaw);
    lora?.forward(k, l, "k", N, a.ln1, a.kRaw);
    k.rmsnormForward(N * H, D, cfg.rmsNormEps, a.qRaw, W.qNorm, a.q, a.qRstd);
    k.rmsnormForward(N * KVH, D, cfg.rmsNormEps, a.kRaw, W.kNorm, a.k, a.kRstd);
  } else {
    linear(k, N, Q, C, a.ln1, W.q, W.qBias, a.q);
    lora?.forward(k, l, "q", N, a.ln1, a.q);
    linear(k, N, KV, C, a.ln1, W.k, W.kBias, a.k);
    lora?.forward(k, l, "k", N, a.ln1, a.k);
  }
  linear(k, N, KV, C, a.ln1, W.v, W.vBias, a.v);
  lora?.forward(k, l, "v", N, a.ln1, a.v);
  k.ropeForward(N, H, D, ws.ropeRows, cos, sin, a.q);
  k.ropeForward(N, KVH, D, ws.ropeRows, cos, sin, a.k);
  for (const g of groups) {
    const n = g.B * g.T;
    k.attentionForward(
      { B: g.B, T: g.T, H, KVH, D, scale }, maskFor(m, b, g.start, n),
      a.q.subarray(g.start * Q), a.k.subarray(g.start * KV), a.v.subarray(g.start * KV), W.sinks,
      a.att.subarray(g.start * Q), a.lse.subarray(g.start * H),
    );
  }
  a.residMid.set(x.subarray(0, N * C));
  xWT(k, N, C, Q, a.att, W.o, 1, a.residMid);
  lora?.forward(k, l, "o", N, a.att, a.residMid);
  if (W.oBias) k.addBias(N, C, a.residMid, W.oBias);
  k.rmsnormForward(N, C, cfg.rmsNormEps, a.residMid, W.postNorm, a.ln2, a.rstd2);
  linear(k, N, F, C, a.ln2, W.gate, null, a.gate);
  lora?.forward(k, l, "gate", N, a.ln2, a.gate);
  linear(k, N, F, C, a.ln2, W.up, null, a.up);
  lora?.forward(k, l, "up", N, a.ln2, a.up);
  k.swigluForward(N * F, a.gate, a.up, a.act);
  if (!y) return;
  y.set(a.residMid.subarray(0, N * C));
  xWT(k, N, C, F, a.act, W.down, 1, y);
  lora?.forward(k, l, "down", N, a.act, y);
}

/**
 * Forward over a packed batch: fills ws.logprob[n] = log p(targets[n] | tokens <= n) (0 where target -1)
 * and keeps every activation for `trainBackward` (or, with `checkpoint`, every layer's input).
 */
export function trainForward(m: Model, ws: TrainWorkspace, b: PackedBatch, withBackward = true, opts: TrainForwardOptions = {}): void {
  const { cfg, params: P, kernels: k } = m;
  const N = b.ids.length;
  const { hiddenSize: C, vocabSize: V } = cfg;
  const checkpoint = opts.checkpoint ?? false;
  ws.ensure(N, withBackward, checkpoint ? 1 : cfg.numLayers, checkpoint && withBackward);
  ws.checkpointed = checkpoint;
  ws.forBackward = withBackward;
  ws.ropeRows = m.rope.rowsOf(b.positions, [...b.starts, N]);
  const lay: BatchLayout = { groups: attentionGroups(b), scale: 1 / Math.sqrt(cfg.headDim) };

  embedRows(k, N, C, V, b.ids, P.embed, ws.resid[0]!);
  for (let l = 0; l < cfg.numLayers; l++) {
    layerForward(m, ws, b, lay, l, checkpoint ? ws.layers[0]! : ws.layers[l]!, ws.resid[l + 1]!);
  }
  k.rmsnormForward(N, C, cfg.rmsNormEps, ws.resid[cfg.numLayers]!, P.finalNorm, ws.lnf, ws.rstdf);
  const R = ws.logitRows;
  if (b.scored) {
    // Only the scored rows, gathered R at a time; the others read 0.
    const rows = b.scored;
    ws.logprob.fill(0, 0, N);
    for (let c0 = 0; c0 < rows.length; c0 += R) {
      const n = gatherScored(ws, b, C, c0, Math.min(R, rows.length - c0));
      xWT(k, n, V, C, ws.scoredLn, P.lmHead, 0, ws.logits);
      k.logprobsForward(n, V, ws.logits, ws.scoredTargets, ws.scoredLogprob, ws.scoredLse);
      for (let r = 0; r < n; r++) {
        ws.logprob[rows[c0 + r]!] = ws.scoredLogprob[r]!;
        ws.lse[rows[c0 + r]!] = ws.scoredLse[r]!;
      }
    }
    ws.logitsComplete = rows.length <= R;
    return;
  }
  for (let r0 = 0; r0 < N; r0 += R) {
    const rows = Math.min(R, N - r0);
    lmHeadRows(m, ws, r0, rows);
    k.logprobsForward(rows, V, ws.logits, b.targets.subarray(r0), ws.logprob.subarray(r0), ws.lse.subarray(r0));
  }
  ws.logitsComplete = N <= R;
}

/** Copies scored rows c0 .. c0+n-1 (their final-norm outputs and targets) to the front of the scratch; returns n. */
function gatherScored(ws: TrainWorkspace, b: PackedBatch, C: number, c0: number, n: number): number {
  const rows = b.scored!;
  for (let r = 0; r < n; r++) {
    const row = rows[c0 + r]!;
    ws.scoredLn.set(ws.lnf.subarray(row * C, row * C + C), r * C);
    ws.scoredTargets[r] = b.targets[row]!;
  }
  return n;
}

/**
 * Backward of `trainForward` for dLoss/dLogprob [N]; parameter gradients are accumulated into `G`
 * (same layout as the parameters). With `G` null the base weights are frozen (no gradient is computed for
 * them); `lora`, when given, accumulates the gradients of its adapters' A and B (the model's weights
 * hold the adapters merged, see lora.ts, or `m.lora` is this adapter, run beside bf16 weights: then the
 * adapters' input gradients are added too). Weights held in bf16 take fp32 gradients in `G` like fp32 ones
 * (the optimizer updates an fp32 master copy of them: the engine's).
 */
export function trainBackward(m: Model, ws: TrainWorkspace, b: PackedBatch, dLogprob: Float32Array, G: ModelParams<Float32Array> | null, lora?: LoraGrads): void {
  const { cfg, params: P, kernels: k } = m;
  if (m.lora && m.lora !== lora) throw new RangeError("trainBackward: the model runs a LoRA adapter beside its weights; pass that adapter's gradients as `lora`");
  // With the adapter beside the weights, its input gradients join each projection's.
  const side = m.lora !== undefined;
  const N = b.ids.length;
  const { hiddenSize: C, numHeads: H, numKvHeads: KVH, headDim: D, intermediateSize: F, vocabSize: V } = cfg;
  const Q = H * D;
  const KV = KVH * D;
  if (!ws.forBackward || ws.capacity < N) {
    throw new RangeError("trainBackward: the workspace's last forward was not run for a backward; call trainForward with withBackward true on this batch first");
  }
  const { cos, sin } = m.rope;
  const lay: BatchLayout = { groups: attentionGroups(b), scale: 1 / Math.sqrt(D) };
  const { groups, scale } = lay;
  const dLn = ws.dLn;
  // Frozen weights: their norm and sink gradients go to a throwaway [max(C, D, H)] scratch.
  const scratch = G ? null : new Float32Array(Math.max(C, D, H));

  // LM head and log-softmax: dLnf [N, C] (in ws.dLn), dLmHead accumulated.
  const R = ws.logitRows;
  if (b.scored) {
    // The scored rows only (the others have no gradient), gathered R at a time as in the forward.
    const rows = b.scored;
    dLn.fill(0, 0, N * C);
    for (let c0 = 0; c0 < rows.length; c0 += R) {
      const n = Math.min(R, rows.length - c0);
      // With one chunk, the forward's gathered rows and logits are still in the scratch.
      if (!ws.logitsComplete) {
        gatherScored(ws, b, C, c0, n);
        xWT(k, n, V, C, ws.scoredLn, P.lmHead, 0, ws.logits);
      }
      for (let r = 0; r < n; r++) {
        ws.scoredLse[r] = ws.lse[rows[c0 + r]!]!;
        ws.scoredDLogprob[r] = dLogprob[rows[c0 + r]!]!;
      }
      k.logprobsBackward(n, V, ws.logits, ws.scoredTargets, ws.scoredLse, ws.scoredDLogprob, ws.logits);
      dyW(k, n, V, C, ws.logits, P.lmHead, 0, ws.scoredDLn);
      if (G) k.sgemm(true, false, V, C, n, 1, ws.logits, V, ws.scoredLn, C, 1, G.lmHead, C);
      for (let r = 0; r < n; r++) dLn.set(ws.scoredDLn.subarray(r * C, r * C + C), rows[c0 + r]! * C);
    }
  } else {
    for (let r0 = 0; r0 < N; r0 += R) {
      const rows = Math.min(R, N - r0);
      if (!ws.logitsComplete) lmHeadRows(m, ws, r0, rows);
      k.logprobsBackward(rows, V, ws.logits, b.targets.subarray(r0), ws.lse.subarray(r0), dLogprob.subarray(r0), ws.logits);
      dyW(k, rows, V, C, ws.logits, P.lmHead, 0, dLn.subarray(r0 * C));
      if (G) k.sgemm(true, false, V, C, rows, 1, ws.logits, V, ws.lnf.subarray(r0 * C), C, 1, G.lmHead, C);
    }
  }
  ws.logitsComplete = false; // the logits buffer now holds gradients
  k.rmsnormBackward(N, C, dLn, ws.resid[cfg.numLayers]!, P.finalNorm, ws.rstdf, ws.dResid, G ? G.finalNorm : scratch!);

  const dResid = ws.dResid;
  for (let l = cfg.numLayers - 1; l >= 0; l--) {
    const W = P.layers[l]!;
    const dW = G ? G.layers[l]! : null;
    const a = ws.checkpointed ? ws.layers[0]! : ws.layers[l]!;
    if (ws.checkpointed) layerForward(m, ws, b, lay, l, a, null); // this layer's activations, recomputed from its input
    // MLP: y = residMid + act @ Wd^T, act = silu(gate) * up, gate/up = ln2 @ Wg^T / Wu^T
    dyW(k, N, C, F, dResid, W.down, 0, ws.dAct);
    if (dW) k.sgemm(true, false, C, F, N, 1, dResid, C, a.act, F, 1, dW.down, F);
    lora?.backward(k, l, "down", N, a.act, dResid, side ? ws.dAct : null);
    k.swigluBackward(N * F, ws.dAct, a.gate, a.up, a.gate, a.up); // a.gate/a.up now hold dGate/dUp
    dyW(k, N, F, C, a.gate, W.gate, 0, dLn);
    dyW(k, N, F, C, a.up, W.up, 1, dLn);
    if (dW) {
      k.sgemm(true, false, F, C, N, 1, a.gate, F, a.ln2, C, 1, dW.gate, C);
      k.sgemm(true, false, F, C, N, 1, a.up, F, a.ln2, C, 1, dW.up, C);
    }
    lora?.backward(k, l, "gate", N, a.ln2, a.gate, side ? dLn : null);
    lora?.backward(k, l, "up", N, a.ln2, a.up, side ? dLn : null);
    k.rmsnormBackward(N, C, dLn, a.residMid, W.postNorm, a.rstd2, ws.dTmp, dW ? dW.postNorm : scratch!);
    k.add(N * C, dResid, ws.dTmp, dResid);
    // Attention: residMid = x + att @ Wo^T
    dyW(k, N, C, Q, dResid, W.o, 0, ws.dAtt);
    if (dW) k.sgemm(true, false, C, Q, N, 1, dResid, C, a.att, Q, 1, dW.o, Q);
    lora?.backward(k, l, "o", N, a.att, dResid, side ? ws.dAtt : null);
    if (dW?.oBias) k.biasBackward(N, C, dResid, dW.oBias);
    for (const g of groups) {
      const n = g.B * g.T;
      k.attentionBackward(
        { B: g.B, T: g.T, H, KVH, D, scale }, maskFor(m, b, g.start, n),
        a.q.subarray(g.start * Q), a.k.subarray(g.start * KV), a.v.subarray(g.start * KV), W.sinks,
        a.att.subarray(g.start * Q), a.lse.subarray(g.start * H), ws.dAtt.subarray(g.start * Q),
        ws.dQ.subarray(g.start * Q), ws.dK.subarray(g.start * KV), ws.dV.subarray(g.start * KV), dW ? dW.sinks : W.sinks && scratch,
      );
    }
    k.ropeBackward(N, H, D, ws.ropeRows, cos, sin, ws.dQ);
    k.ropeBackward(N, KVH, D, ws.ropeRows, cos, sin, ws.dK);
    // dQp / dKp: gradients of the q / k projections (before Qwen3's per-head norm, if any)
    let dQp = ws.dQ;
    let dKp = ws.dK;
    if (W.qNorm && W.kNorm) {
      dQp = ws.dAtt; // free again: attentionBackward has consumed it
      dKp = ws.dKRaw;
      k.rmsnormBackward(N * H, D, ws.dQ, a.qRaw, W.qNorm, a.qRstd, dQp, dW?.qNorm ?? scratch!);
      k.rmsnormBackward(N * KVH, D, ws.dK, a.kRaw, W.kNorm, a.kRstd, dKp, dW?.kNorm ?? scratch!);
    }
    if (dW?.qBias) k.biasBackward(N, Q, dQp, dW.qBias);
    if (dW?.kBias) k.biasBackward(N, KV, dKp, dW.kBias);
    if (dW?.vBias) k.biasBackward(N, KV, ws.dV, dW.vBias);
    dyW(k, N, Q, C, dQp, W.q, 0, dLn);
    dyW(k, N, KV, C, dKp, W.k, 1, dLn);
    dyW(k, N, KV, C, ws.dV, W.v, 1, dLn);
    if (dW) {
      k.sgemm(true, false, Q, C, N, 1, dQp, Q, a.ln1, C, 1, dW.q, C);
      k.sgemm(true, false, KV, C, N, 1, dKp, KV, a.ln1, C, 1, dW.k, C);
      k.sgemm(true, false, KV, C, N, 1, ws.dV, KV, a.ln1, C, 1, dW.v, C);
    }
    lora?.backward(k, l, "q", N, a.ln1, dQp, side ? dLn : null);
    lora?.backward(k, l, "k", N, a.ln1, dKp, side ? dLn : null);
    lora?.backward(k, l, "v", N, a.ln1, ws.dV, side ? dLn : null);
    k.rmsnormBackward(N, C, dLn, ws.resid[l]!, W.inputNorm, a.rstd1, ws.dTmp, dW ? dW.inputNorm : scratch!);
    k.add(N * C, dResid, ws.dTmp, dResid);
  }
  if (G) k.embeddingBackward(N, C, V, b.ids, dResid, G.embed);
}

// ---- incremental forward against a paged KV cache ------------------------------------------------------

/** Per-layer paged KV storage: kCache[l], vCache[l] are [numBlocks, blockSize, KVH, D]. */
export interface KvStorage {
  blockSize: number;
  kCache: Float32Array[];
  vCache: Float32Array[];
}

/** Preallocated buffers of `cachedForward` for up to `capacity` new tokens. */
export class CachedWorkspace {
  capacity = 0;
  x = new Float32Array(0);
  ln = new Float32Array(0);
  q = new Float32Array(0);
  k = new Float32Array(0);
  v = new Float32Array(0);
  att = new Float32Array(0);
  /** [M, F] the gate projection, then (in place) the MLP activation */ gate = new Float32Array(0);
  up = new Float32Array(0);
  rstd = new Float32Array(0);
  /** [M, KV] the k projection before Qwen3's per-head norm */ kRaw = new Float32Array(0);
  /** [M, H] per-head norm scratch */ headRstd = new Float32Array(0);
  rows = new Float32Array(0);

  constructor(private readonly cfg: ModelConfig) {}

  ensure(M: number): void {
    if (M <= this.capacity) return;
    const { hiddenSize: C, intermediateSize: F } = this.cfg;
    const Q = this.cfg.numHeads * this.cfg.headDim;
    const KV = this.cfg.numKvHeads * this.cfg.headDim;
    const cap = Math.max(M, Math.ceil(this.capacity * 1.5));
    this.capacity = cap;
    this.x = new Float32Array(cap * C);
    this.ln = new Float32Array(cap * C);
    this.q = new Float32Array(cap * Q);
    this.k = new Float32Array(cap * KV);
    this.v = new Float32Array(cap * KV);
    this.att = new Float32Array(cap * Q);
    this.gate = new Float32Array(cap * F);
    this.up = new Float32Array(cap * F);
    this.rstd = new Float32Array(cap);
    this.rows = new Float32Array(cap * C);
    if (hasQkNorm(this.cfg)) {
      this.kRaw = new Float32Array(cap * KV);
      this.headRstd = new Float32Array(cap * this.cfg.numHeads);
    }
  }
}

/**
 * One `cachedForward` call: B sequences with new tokens, M rows in all. Either every sequence has Tq new
 * tokens (rows b*Tq .. b*Tq+Tq-1, M = B*Tq), or `newTokens` gives each its own count (ragged: the rows of
 * sequence b follow those of b-1, M = the sum; `Tq` is then ignored).
 */
export interface CachedStep {
  B: number;
  Tq: number;
  /** [B] new tokens of each sequence (each >= 1); absent = Tq for every sequence. */
  newTokens?: Int32Array;
  /** [M] new token ids. */
  ids: Int32Array;
  /** [M] their positions. */
  positions: Int32Array;
  /** [B, maxBlocks] block ids of each sequence. */
  blockTable: Int32Array;
  maxBlocks: number;
  /** [B] cache entries of each sequence including its new ones. */
  seqLens: Int32Array;
  /** Rows (indices into the M new tokens) whose logits are wanted, in order. */
  logitRows: Int32Array;
  /** [logitRows.length, V] receives those rows' logits. */
  logits: Float32Array;
  /** Pinned cache entries of each sequence (kept by every later query, like sink slots); absent = none. */
  pinned?: CachedPinned;
  /**
   * [B] each sequence's RoPE table offset (RopeTable.rowOffset; under longrope it says short or long
   * factors), the same for every piece of a sequence: its cached keys were rotated with it. Absent = each
   * sequence's new rows take the offset of their largest position + 1 (right for a whole sequence in one
   * call; a caller that computes a longrope sequence in pieces keeps the offset of its full length, and
   * recomputes the sequence when that changes, as transformers' generate recomputes its cache).
   */
  ropeOffsets?: Int32Array;
}

/**
 * Runs the new tokens of B sequences through the model, writing their keys and values into the cache
 * (at entries seqLens[b]-n .. seqLens[b]-1 for its n new tokens) and the requested rows' logits into
 * `step.logits`.
 *
 * The last layer computes keys and values for every new token (the cache needs them) but queries,
 * attention and MLP only for the rows whose logits are wanted, when each of those is the last new row of
 * its sequence (a prefill wants one row per sequence, or none).
 */
export function cachedForward(m: Model, ws: CachedWorkspace, kv: KvStorage, step: CachedStep): void {
  const { cfg, params: P, kernels: k } = m;
  const B = step.B;
  // rowStart[b]: first row of sequence b; runs of sequences with equal counts share one attention call
  const rowStart = new Int32Array(B + 1);
  for (let b = 0; b < B; b++) {
    const n = step.newTokens ? step.newTokens[b]! : step.Tq;
    if (!(n >= 1)) throw new RangeError(`cachedForward: sequence ${b} has ${n} new tokens; each needs at least 1`);
    rowStart[b + 1] = rowStart[b]! + n;
  }
  const M = rowStart[B]!;
  const runs: AttentionRun[] = [];
  for (let b = 0; b < B; b++) {
    const n = rowStart[b + 1]! - rowStart[b]!;
    const last = runs[runs.length - 1];
    if (last && last.Tq === n) last.B++;
    else runs.push({ b0: b, B: 1, Tq: n, r0: rowStart[b]! });
  }
  const { hiddenSize: C, numHeads: H, numKvHeads: KVH, headDim: D, intermediateSize: F, vocabSize: V, numLayers: L } = cfg;
  const Q = H * D;
  const KVD = KVH * D;
  const R = step.logitRows.length;
  const lastRows = R < M ? lastRowsOf(step.logitRows, rowStart) : null;
  ws.ensure(M);
  const ropeRows = m.rope.rowsOf(step.positions, rowStart, step.ropeOffsets);
  const { cos, sin } = m.rope;
  const bs = kv.blockSize;
  const scale = 1 / Math.sqrt(D);
  const x = ws.x;
  // y [rows, out] = x W^T (+ bias): the packed W when the model keeps packed copies, for one row as for
  // several (so a sequence's logits, and its samples, do not depend on what else decodes with it: the
  // packed product may round its inputs to bf16, a matrix-vector product does not); else one row is a
  // matrix-vector product.
  // A bf16 weight is read as held (never packed: a packed copy would be fp32, twice its size); its
  // products give a row the same values whatever else is in the call too.
  // With int8 sampling copies (m.sampling) every product reads those instead: they too give a row the same
  // values whatever else is in the call.
  const pk = m.packed;
  const q8 = m.sampling;
  const lora = m.lora;
  const proj = (
    rows: number, outDim: number, inDim: number, xin: Float32Array, W: WeightMatrix, bias: Float32Array | null, y: Float32Array, beta: 0 | 1,
    layer = -1, target?: LoraProjection,
  ) => {
    if (rows === 0) return;
    if (q8) k.gemmQ8(rows, 1, xin, inDim, q8.get(W, outDim, inDim), beta, y, outDim);
    else if (W instanceof Uint16Array) k.gemmW16(true, rows, outDim, inDim, 1, xin, inDim, W, inDim, beta, y, outDim);
    else if (pk) k.sgemmPacked(rows, 1, xin, inDim, pk.get(W, outDim, inDim), beta, y, outDim);
    else if (rows === 1) k.sgemv(false, outDim, inDim, 1, W, inDim, xin, beta, y);
    else k.sgemm(false, true, rows, outDim, inDim, 1, xin, inDim, W, inDim, beta, y, outDim);
    if (bias) k.addBias(rows, outDim, y, bias);
    if (lora && target) lora.forward(k, layer, target, rows, xin, y);
  };
  embedRows(k, M, C, V, step.ids, P.embed, x);
  // Rows the queries, attention and MLP of a layer run on: every new row, or in the last layer (when
  // `lastRows`) only the logit rows, moved to the front.
  let Mq = M;
  let qRopeRows = ropeRows;
  let qRuns = runs;
  let qTable = step.blockTable;
  let qLens = step.seqLens;
  let qPinned = step.pinned;
  for (let l = 0; l < L; l++) {
    const W = P.layers[l]!;
    k.rmsnormForward(M, C, cfg.rmsNormEps, x, W.inputNorm, ws.ln, ws.rstd);
    // keys and values of every new token, into the cache
    if (W.kNorm) {
      proj(M, KVD, C, ws.ln, W.k, W.kBias, ws.kRaw, 0, l, "k");
      k.rmsnormForward(M * KVH, D, cfg.rmsNormEps, ws.kRaw, W.kNorm, ws.k, ws.headRstd);
    } else {
      proj(M, KVD, C, ws.ln, W.k, W.kBias, ws.k, 0, l, "k");
    }
    proj(M, KVD, C, ws.ln, W.v, W.vBias, ws.v, 0, l, "v");
    k.ropeForward(M, KVH, D, ropeRows, cos, sin, ws.k);
    const kc = kv.kCache[l]!;
    const vc = kv.vCache[l]!;
    for (let b = 0; b < B; b++) {
      const r0 = rowStart[b]!;
      const n = rowStart[b + 1]! - r0;
      const first = step.seqLens[b]! - n;
      // the entries of one block are consecutive cache rows: one copy per block
      for (let i = 0; i < n;) {
        const e = first + i;
        const run = Math.min(n - i, bs - (e % bs));
        const block = step.blockTable[b * step.maxBlocks + Math.floor(e / bs)]!;
        const dst = (block * bs + (e % bs)) * KVD;
        const src = (r0 + i) * KVD;
        kc.set(ws.k.subarray(src, src + run * KVD), dst);
        vc.set(ws.v.subarray(src, src + run * KVD), dst);
        i += run;
      }
    }
    if (l === L - 1 && lastRows) {
      // only the logit rows go on: their hidden states and norms to the front, one query each
      Mq = R;
      qRopeRows = new Int32Array(R);
      qTable = new Int32Array(R * step.maxBlocks);
      qLens = new Int32Array(R);
      for (let r = 0; r < R; r++) {
        const row = step.logitRows[r]!;
        const b = lastRows[r]!;
        if (row !== r) {
          x.copyWithin(r * C, row * C, row * C + C);
          ws.ln.copyWithin(r * C, row * C, row * C + C);
        }
        qRopeRows[r] = ropeRows[row]!;
        qTable.set(step.blockTable.subarray(b * step.maxBlocks, (b + 1) * step.maxBlocks), r * step.maxBlocks);
        qLens[r] = step.seqLens[b]!;
      }
      if (step.pinned) {
        const { start, count, positions } = step.pinned;
        qPinned = { start: Int32Array.from(lastRows, (b) => start[b]!), count: Int32Array.from(lastRows, (b) => count[b]!), positions };
      }
      qRuns = R > 0 ? [{ b0: 0, B: R, Tq: 1, r0: 0 }] : [];
      if (R === 0) break;
    }
    if (W.qNorm) {
      proj(Mq, Q, C, ws.ln, W.q, W.qBias, ws.att, 0, l, "q"); // att is scratch until attention runs
      k.rmsnormForward(Mq * H, D, cfg.rmsNormEps, ws.att, W.qNorm, ws.q, ws.headRstd);
    } else {
      proj(Mq, Q, C, ws.ln, W.q, W.qBias, ws.q, 0, l, "q");
    }
    k.ropeForward(Mq, H, D, qRopeRows, cos, sin, ws.q);
    for (const run of qRuns) {
      k.attentionCached(
        { B: run.B, Tq: run.Tq, H, KVH, D, scale, blockSize: bs, maxBlocks: step.maxBlocks },
        m.attention.window, m.attention.sinks, ws.q.subarray(run.r0 * Q), kc, vc,
        qTable.subarray(run.b0 * step.maxBlocks), qLens.subarray(run.b0), W.sinks, ws.att.subarray(run.r0 * Q),
        qPinned && { start: qPinned.start.subarray(run.b0), count: qPinned.count.subarray(run.b0), positions: qPinned.positions },
      );
    }
    proj(Mq, C, Q, ws.att, W.o, W.oBias, x, 1, l, "o");
    k.rmsnormForward(Mq, C, cfg.rmsNormEps, x, W.postNorm, ws.ln, ws.rstd);
    proj(Mq, F, C, ws.ln, W.gate, null, ws.gate, 0, l, "gate");
    proj(Mq, F, C, ws.ln, W.up, null, ws.up, 0, l, "up");
    k.swigluForward(Mq * F, ws.gate, ws.up, ws.gate); // in place: gate becomes the activation
    proj(Mq, C, F, ws.gate, W.down, null, x, 1, l, "down");
  }
  if (R === 0) return;
  if (!lastRows) {
    for (let r = 0; r < R; r++) {
      const row = step.logitRows[r]!;
      ws.rows.set(x.subarray(row * C, row * C + C), r * C);
    }
  }
  const h = lastRows ? x : ws.rows; // [R, C] the logit rows' hidden states
  k.rmsnormForward(R, C, cfg.rmsNormEps, h, P.finalNorm, ws.ln, ws.rstd);
  proj(R, V, C, ws.ln, P.lmHead, null, step.logits, 0);
}

/** Sequences b0 .. b0+B-1, Tq new rows each, starting at row r0: one attention call. */
interface AttentionRun {
  b0: number;
  B: number;
  Tq: number;
  r0: number;
}

/**
 * When every logit row is the last new row of its sequence, in increasing order, the sequence of each;
 * else null (the last layer then runs on every row).
 */
function lastRowsOf(logitRows: Int32Array, rowStart: Int32Array): Int32Array | null {
  const out = new Int32Array(logitRows.length);
  let b = 0;
  for (let r = 0; r < logitRows.length; r++) {
    const row = logitRows[r]!;
    while (b + 1 < rowStart.length && rowStart[b + 1]! - 1 < row) b++;
    if (b + 1 >= rowStart.length || rowStart[b + 1]! - 1 !== row || (r > 0 && out[r - 1] === b)) return null;
    out[r] = b;
  }
  return out;
}
