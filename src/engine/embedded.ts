/**
 * The embedded engine: the engine primitives (types.ts) served in-process on the CPU by the decoder in
 * model/, with a paged KV cache for sessions, batched decoding, teacher-forced scoring, training
 * (forwardBackward + AdamW) and Hugging Face checkpoints.
 *
 * Sessions keep their tokens and KV-cache blocks; forks share the parent's blocks (reference counted,
 * copy on write of a partially filled last block only). Under a sink-window mask a session also returns
 * to the pool the blocks no later query keeps (the pool's eviction policy, kv-cache.ts): it holds its K sink
 * slots, its pinned positions (`append(tokens, { pinned })`) and last W positions, so KV memory per session
 * stays flat however long it grows, in append, sample, sampleBatch and fork alike; `truncate` past evicted
 * keys is an error naming them.
 * Tokens are computed lazily: `append` (and a session's prefix) and a sampled token only join the session's tokens, and their keys and values are
 * computed by the next call that needs them (sampling, fork, `nextLogits`). That call computes the pending
 * tokens of all its sessions together, in forwards of up to `maxForwardTokens` rows, so the prompts of
 * many sessions are prefilled in one batched forward, and one decode step is one forward of every
 * sequence's single new token.
 * `optimStep` does not touch open sessions (their caches keep the weights they were computed with, and
 * the sampled log-probs carry the policy version); `load` recomputes them on their next use. Products with
 * several rows (batched decoding, prefill) reuse packed copies of the weight matrices, which every weight
 * change drops (`weightsChanged`). With `dtype: "bf16"` the weight matrices are held only as bf16 (half the
 * memory; products accumulate in fp32): such an engine samples, scores and trains a LoRA adapter, which
 * then runs beside the frozen bf16 weights instead of merged into them, or trains every weight with an
 * fp32 master copy (created at the first optimStep: AdamW updates the master, which is rounded into the
 * bf16 weights).
 *
 * This file does not know environments, rollouts or losses: a loss arrives as a function of log-probs.
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { describeSinkWindow, resolveSinkWindow, SINK_WINDOW_FILE, type SinkWindow } from "../model/index.js";
import { SHARED_DOC, type CachedPinned, type Kernels } from "../kernels/index.js";
import { getKernels } from "../kernels/index.js";
import { loadCheckpoint, saveCheckpoint } from "../model/index.js";
import type { ModelConfig } from "../model/index.js";
import {
  buildModel, convertWeights, FULL_ATTENTION, heldData, randomWeights, roundToBf16, weightDtype, type AttentionInit, type ModelWeights,
  type WeightDtype,
} from "../model/index.js";
import { AdamW } from "../model/index.js";
import {
  isLoraAdapterDir, loadLoraAdapter, loraBaseDir, LoraGrads, mergeLora, saveLoraAdapter, type LoraAdapter,
} from "../model/index.js";
import { PackedWeights, QuantizedWeights, SAMPLING_WEIGHTS, type SamplingWeights } from "../model/index.js";
import { bindParams, type ModelParams } from "../model/index.js";
import { Rng } from "../core/index.js";
import { readSafetensors, writeSafetensors, type StDtype } from "../model/index.js";
import {
  CachedWorkspace, cachedForward, layerActivationBytes, packSequences, trainBackward, trainForward, TrainWorkspace,
  type Model,
} from "../model/index.js";
import { EVICTED_BLOCK, evictionFor, KvBlockPool, pinnedBlocks } from "./kv-cache.js";
import { resolveSampleParams, Sampler, type ResolvedSampleParams } from "./sampler.js";
import type { Engine, EngineSession, OptimHparams, SampleParams, SampleResult, SequenceMasks, TokenLoss } from "./types.js";

export class EngineError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EngineError";
  }
}

/**
 * sampleBatch's argument checks, shared by every engine: one parameter set per session, no session twice
 * (fork it instead), none empty. `own` maps a session to the engine's own (refusing another engine's);
 * `ready`, when given, checks each one first (closed, busy).
 */
export function checkSampleBatch<S extends { length: number }>(
  sessions: EngineSession[], params: SampleParams[], own: (s: EngineSession) => S, ready?: (s: S) => void,
): { list: S[]; ps: ResolvedSampleParams[] } {
  if (sessions.length !== params.length) {
    throw new EngineError(`sampleBatch: ${sessions.length} sessions but ${params.length} parameter sets; pass one per session`);
  }
  const list = sessions.map(own);
  if (new Set(list).size !== list.length) throw new EngineError("sampleBatch: a session appears twice; fork it instead");
  const ps = params.map(resolveSampleParams);
  for (const s of list) {
    ready?.(s);
    if (s.length === 0) throw new EngineError("sample: the session is empty; append a prompt first");
  }
  return { list, ps };
}

export interface EmbeddedEngineOptions {
  /** Kernel set; default: `getKernels()` (native, or the reference when the addon is missing). */
  kernels?: Kernels;
  /**
   * How the weights are held: "fp32", or "bf16" (the weight matrices only as bf16, half the memory; full
   * training then keeps an fp32 master copy of every parameter beside them). Weights given in the other dtype are
   * converted (drop them afterwards to free them); default: as given (`loadEngine`, `createRandomModel`:
   * fp32).
   */
  dtype?: WeightDtype;
  /**
   * Canonical attention mask (window, sink slots); default full causal attention. Saved with every
   * checkpoint; `loadEngine` defaults to the checkpoint's and refuses settings that differ from it.
   */
  attention?: SinkWindow;
  /** `loadEngine` only: run with `attention` even where the checkpoint was trained with another mask (comparisons). */
  overrideAttention?: boolean;
  /** Tokens per KV-cache block. Default 16. */
  blockSize?: number;
  /**
   * Under a sink-window mask (window > 0), sessions return to the pool the KV blocks no later query keeps
   * (every row outside the K sink slots and the last W positions), so a session holds about K + W rows
   * however long it grows. Default true; false keeps every row (the log-probs are the same: the kernels
   * apply the mask either way). Full attention evicts nothing.
   */
  evictKv?: boolean;
  /**
   * Under KV eviction, rows kept past the window so that `truncate` can go back this many tokens before
   * a session's last one (retrying a turn) without hitting evicted keys; costs that many rows per session.
   * Default 0: truncating further back than the block holding the window's start is an error naming the
   * evicted positions.
   */
  kvRewind?: number;
  /** Folder whose tokenizer files are copied into saved checkpoints. */
  tokenizerDir?: string;
  /** Starting policy version. Default 0. */
  policyVersion?: number;
  /** Seeds sampling calls that do not pass their own seed. Default 0. */
  seed?: number;
  /**
   * Keep packed copies of the weight matrices for batched decoding and prefill (packed on first use, about
   * the size of the weights again; dropped by optimStep, load and weightsChanged). Default: on with the
   * native kernels (the reference kernels gain nothing from them).
   */
  packWeights?: boolean;
  /**
   * What sampling sessions multiply by: "same" (the weights themselves, the default) or "int8" (copies
   * quantized to int8 in blocks of 32, about half the bytes of bf16 to read per token; made on first use and
   * again after every weight change). Training and teacher-forced scoring always use the weights, so with
   * int8 the sampler's log-probs differ a little from the trainer's (GRPO's truncated importance weights
   * correct for it; the run logs the gap).
   */
  samplingWeights?: SamplingWeights;
  /**
   * The most new tokens one forward computes (pending tokens of many sessions are batched up to this; a
   * longer prefill is split). Bounds the activation buffers. Default 2048.
   */
  maxForwardTokens?: number;
  /**
   * Activation checkpointing in forwardBackward: keep only each layer's input and recompute the layer's
   * activations in the backward (the same gradients; about one more forward of compute per step). true,
   * false, or "auto" (default): on when keeping every layer's activations of a batch would take more than
   * `CHECKPOINT_ABOVE_BYTES` (2 GiB: on a Qwen2.5-0.5B shape, batches above about 1,150 tokens; all
   * layers' activations take 1.8 GiB at 1,024 tokens and 7.1 GiB at 4,096), off below. Scoring (`logprobs`) always keeps one layer's.
   */
  activationCheckpointing?: boolean | "auto";
  /**
   * The ids sampling may produce: 0 .. usableTokens-1, the tokenizer's ids. Rows of the embedding past
   * them (a published vocab_size padded above the tokenizer's count) are never sampled. Default: every row.
   */
  usableTokens?: number;
}

export interface EngineSaveOptions {
  /** On-disk dtype. Default F32. */
  dtype?: StDtype;
  /** Shard size limit in bytes. Default: one file. */
  maxShardBytes?: number;
  /** Also write the AdamW state (optimizer.safetensors) for an exact resume. Default false. */
  optimizer?: boolean;
}

interface SampleRequest {
  session: EmbeddedSession;
  params: ResolvedSampleParams;
  rng: Rng;
  result: SampleResult;
  resolve: (r: SampleResult) => void;
  reject: (e: unknown) => void;
}

const OPTIMIZER_FILE = "optimizer.safetensors";

/** Under `activationCheckpointing: "auto"`, a batch whose kept activations would exceed this is checkpointed. */
export const CHECKPOINT_ABOVE_BYTES = 2 * 2 ** 30;

export class EmbeddedEngine implements Engine {
  readonly model: Model;
  readonly weights: ModelWeights;
  private gradBuf: Float32Array | null = null;
  private gradViews: ModelParams<Float32Array> | null = null;
  private adamw: AdamW | null = null;
  /**
   * bf16 weights trained in full: the fp32 master copy of every parameter (layout of `weights.entries`)
   * that AdamW updates and that is rounded into the bf16 weights after each step. Made from the weights at
   * the first optimStep; null until then, with fp32 weights and with a LoRA adapter.
   */
  private masterBuf: Float32Array | null = null;
  /** The LoRA adapter being trained (merged into `weights`), or null when the engine trains every weight. */
  private loraState: { adapter: LoraAdapter; grads: LoraGrads } | null = null;
  readonly pool: KvBlockPool;
  policyVersion: number;
  tokenizerDir: string | undefined;
  /** The checkpoint folder the weights were loaded from (a saved LoRA adapter names it as its base). */
  checkpointDir: string | undefined;
  /** The sink profile the policy was laid out with (src/attention), saved with every checkpoint; null = none. */
  sinkProfile: Record<string, unknown> | null = null;
  /** Sequences accumulated into `grads` since the last optimStep. */
  accumulated = 0;

  private readonly trainWs: TrainWorkspace;
  private readonly cachedWs: CachedWorkspace;
  private readonly sampler: Sampler;
  private readonly rng: Rng;
  private readonly sessions = new Set<EmbeddedSession>();
  private stepLogits = new Float32Array(0);
  private readonly maxForwardTokens: number;
  private readonly checkpointing: boolean | "auto";
  private disposed = false;
  private static liveCount = 0;

  /**
   * Engines made in this process and not yet disposed. Code that makes an engine for something that then
   * fails must dispose it: a leak shows here.
   */
  static get live(): number {
    return EmbeddedEngine.liveCount;
  }

  constructor(weights: ModelWeights, opts: EmbeddedEngineOptions = {}) {
    this.weights = convertWeights(weights, opts.dtype ?? weightDtype(weights));
    this.model = buildModel(this.weights, opts.kernels ?? getKernels(), opts.attention ?? FULL_ATTENTION);
    if (opts.packWeights ?? this.model.kernels.name === "native") this.model.packed = new PackedWeights(this.model.kernels);
    if (opts.samplingWeights) this.useSamplingWeights(opts.samplingWeights);
    const cfg = weights.cfg;
    const eviction = opts.evictKv === false ? null : evictionFor(this.model.attention, opts.kvRewind ?? 0);
    this.pool = new KvBlockPool(cfg.numLayers, cfg.numKvHeads * cfg.headDim, opts.blockSize ?? 16, 64, eviction);
    this.trainWs = new TrainWorkspace(cfg);
    this.cachedWs = new CachedWorkspace(cfg);
    this.sampler = new Sampler(cfg.vocabSize, (n, v, t, x, out) => this.model.kernels.softmaxRows(n, v, t, x, out));
    if (opts.usableTokens !== undefined) this.usableTokens = opts.usableTokens;
    this.rng = new Rng(opts.seed ?? 0, "xoshiro128**");
    this.policyVersion = opts.policyVersion ?? 0;
    this.tokenizerDir = opts.tokenizerDir;
    this.maxForwardTokens = opts.maxForwardTokens ?? 2048;
    this.checkpointing = opts.activationCheckpointing ?? "auto";
    if (!(typeof this.checkpointing === "boolean" || this.checkpointing === "auto")) {
      throw new EngineError(`activationCheckpointing must be true, false or "auto" (got ${JSON.stringify(opts.activationCheckpointing)})`);
    }
    if (!(Number.isInteger(this.maxForwardTokens) && this.maxForwardTokens >= 1)) {
      throw new EngineError(`maxForwardTokens must be an integer >= 1 (got ${opts.maxForwardTokens})`);
    }
    EmbeddedEngine.liveCount++;
  }

  /**
   * Accumulated gradients of the trainable parameters: the layout of `weights.data`, or with a LoRA adapter
   * the adapter's. Allocated on first use, so an engine that only samples holds the weights alone (no
   * gradients, no AdamW moments).
   */
  get grads(): Float32Array {
    if (this.loraState) return this.loraState.grads.data;
    if (!this.gradBuf) this.gradBuf = new Float32Array(heldData(this.weights).length);
    return this.gradBuf;
  }

  /**
   * bf16 weights trained in full: the fp32 master copy of every parameter that AdamW updates (made from the
   * weights on first use); null with fp32 weights or a LoRA adapter, whose parameters are fp32 already.
   */
  get master(): Float32Array | null {
    if (this.loraState || this.dtype !== "bf16") return null;
    if (!this.masterBuf) this.masterBuf = convertWeights(this.weights, "fp32").data;
    return this.masterBuf;
  }

  /** How the weights are held ("fp32" or "bf16"). */
  get dtype(): WeightDtype {
    return weightDtype(this.weights);
  }

  /** The trained LoRA adapter, or null when every weight trains. */
  get lora(): LoraAdapter | null {
    return this.loraState?.adapter ?? null;
  }

  /**
   * Trains `adapter` instead of the weights from now on: the base weights freeze, the adapter is merged into
   * them (so sampling runs at the base model's speed), gradients and AdamW moments hold the adapter only.
   * Accumulated gradients and optimizer state are dropped; open sessions recompute on their next use.
   */
  enableLora(adapter: LoraAdapter): void {
    this.alive();
    if (this.loraState) throw new EngineError("enableLora: this engine already trains a LoRA adapter; load the adapter's folder instead");
    this.loraState = { adapter, grads: new LoraGrads(adapter, this.config.numLayers) };
    // bf16 weights cannot hold the merged update: the adapter runs beside them.
    if (this.dtype === "bf16") this.model.lora = this.loraState.grads;
    else mergeLora(this.kernels, this.model.params, adapter, 1);
    this.gradBuf = null;
    this.gradViews = null;
    this.adamw = null;
    this.masterBuf = null;
    this.accumulated = 0;
    this.weightsChanged();
    for (const s of this.sessions) s.invalidate();
  }

  /** Typed views of `grads`, one per parameter. */
  get gradParams(): ModelParams<Float32Array> {
    if (!this.gradViews) this.gradViews = bindParams(this.config, this.weights.entries, this.grads);
    return this.gradViews;
  }

  /** The AdamW state (allocated on first use). */
  get optimizer(): AdamW {
    if (!this.adamw) this.adamw = new AdamW(this.grads.length);
    return this.adamw;
  }

  get config(): ModelConfig {
    return this.weights.cfg;
  }

  get kernels(): Kernels {
    return this.model.kernels;
  }

  /** Open sessions. */
  get sessionCount(): number {
    return this.sessions.size;
  }

  // ---- sessions -----------------------------------------------------------------------------------------

  /** A new session holding `prefix`; its keys and values are computed by the first call that needs them. */
  async session(prefix: number[] = []): Promise<EngineSession> {
    return this.sessionSync(prefix);
  }

  /** `session` without the promise. */
  sessionSync(prefix: number[] = []): EmbeddedSession {
    this.alive();
    const s = new EmbeddedSession(this);
    this.sessions.add(s);
    if (prefix.length > 0) s.appendSync(prefix);
    return s;
  }

  /**
   * Samples from many sessions. Requests from all concurrent `sample` / `sampleBatch` calls are decoded
   * together: each step runs one batched forward over every unfinished request (continuous batching),
   * and the event loop runs between steps, so environment I/O overlaps decoding.
   */
  async sampleBatch(sessions: EngineSession[], params: SampleParams[]): Promise<SampleResult[]> {
    this.alive();
    const { list, ps } = checkSampleBatch(sessions, params, (s) => this.own(s));
    return Promise.all(list.map((s, i) => this.enqueue(s, ps[i]!)));
  }

  /**
   * The synchronous form of sampleBatch (no other caller's requests join; the event loop is blocked until
   * all are done). The same seeds give the same tokens as the asynchronous form.
   */
  sampleBatchSync(sessions: EngineSession[], params: SampleParams[]): SampleResult[] {
    this.alive();
    if (sessions.length !== params.length) {
      throw new EngineError(`sampleBatch: ${sessions.length} sessions but ${params.length} parameter sets; pass one per session`);
    }
    const list = sessions.map((s) => this.own(s));
    if (new Set(list).size !== list.length) throw new EngineError("sampleBatch: a session appears twice; fork it instead");
    const reqs = params.map((p, i) => this.request(list[i]!, resolveSampleParams(p)));
    if (list.some((s) => s.busy)) throw new EngineError("a session is already sampling; wait for it or fork it");
    for (const r of reqs) r.session.busy = true;
    try {
      let active = reqs.filter((r) => r.params.maxTokens > 0);
      if (active.length > 0) this.sync(active.map((r) => r.session));
      while (active.length > 0) {
        active = this.sampleStep(active);
        if (active.length > 0) this.computePending(active.map((r) => r.session));
      }
    } finally {
      for (const r of reqs) r.session.busy = false;
    }
    return reqs.map((r) => r.result);
  }

  /**
   * Counters of the forwards (for benchmarks and tests): a decode step is a forward of one new token per
   * sequence (decodeRows sequences in all); the tokens of every other forward are prefill tokens.
   */
  readonly stats = { forwards: 0, decodeSteps: 0, decodeRows: 0, prefillTokens: 0 };

  private request(session: EmbeddedSession, params: ResolvedSampleParams): SampleRequest {
    if (session.length === 0) throw new EngineError("sample: the session is empty; append a prompt first");
    return {
      session, params,
      rng: params.seed === undefined ? this.rng : new Rng(params.seed, "xoshiro128**"),
      result: { tokens: [], logprobs: [], finishReason: "length" },
      resolve: () => {}, reject: () => {},
    };
  }

  /** Samples one token for each request; returns those still unfinished. */
  private sampleStep(active: SampleRequest[]): SampleRequest[] {
    const next: SampleRequest[] = [];
    for (const r of active) {
      const { token, logprob } = this.sampler.sample(r.session.logits!, r.params, r.rng);
      r.result.tokens.push(token);
      r.result.logprobs.push(logprob);
      r.session.pushToken(token);
      if (r.params.stopTokens.has(token)) r.result.finishReason = "stop";
      else if (r.result.tokens.length < r.params.maxTokens) next.push(r);
    }
    return next;
  }

  private queue: SampleRequest[] = [];
  private looping = false;

  private enqueue(session: EmbeddedSession, params: ResolvedSampleParams): Promise<SampleResult> {
    const req = this.request(session, params);
    if (params.maxTokens === 0) return Promise.resolve(req.result);
    if (session.busy) return Promise.reject(new EngineError("the session is already sampling; wait for it or fork it"));
    session.busy = true;
    const done = new Promise<SampleResult>((resolve, reject) => {
      req.resolve = resolve;
      req.reject = reject;
    });
    this.queue.push(req);
    if (!this.looping) {
      this.looping = true;
      void this.decodeLoop();
    }
    return done;
  }

  private async decodeLoop(): Promise<void> {
    let active: SampleRequest[] = [];
    const finish = (r: SampleRequest, err?: unknown) => {
      r.session.busy = false;
      if (err === undefined) r.resolve(r.result);
      else r.reject(err);
    };
    try {
      while (true) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        this.alive();
        if (this.queue.length > 0) {
          const fresh = this.queue.splice(0);
          try {
            this.sync(fresh.map((r) => r.session)); // sessions with one pending token decode together
            active.push(...fresh);
          } catch {
            for (const r of fresh) {
              try {
                this.sync([r.session]); // isolate the request that failed
                active.push(r);
              } catch (e) {
                finish(r, e);
              }
            }
          }
        }
        if (active.length === 0) break;
        const next = this.sampleStep(active);
        for (const r of active) if (!next.includes(r)) finish(r);
        active = next;
        if (active.length > 0) this.computePending(active.map((r) => r.session));
      }
    } catch (e) {
      for (const r of [...active, ...this.queue.splice(0)]) finish(r, e);
    } finally {
      this.looping = false;
    }
  }

  // ---- scoring and training -----------------------------------------------------------------------------

  async logprobs(sequences: number[][], masks: SequenceMasks = {}): Promise<Float32Array[]> {
    return this.logprobsSync(sequences, masks);
  }

  /** Teacher-forced log-probs; `masks` optionally gives per-sequence document ids, pinned flags and the predictions wanted. */
  logprobsSync(sequences: number[][], masks: SequenceMasks = {}): Float32Array[] {
    this.alive();
    if (sequences.length === 0) return [];
    const batch = this.pack(sequences, masks);
    trainForward(this.model, this.trainWs, batch, false, { checkpoint: true });
    return batch.starts.map((st, i) => this.trainWs.logprob.slice(st, st + batch.lengths[i]! - 1));
  }

  async forwardBackward(
    sequences: number[][], loss: TokenLoss, masks: SequenceMasks = {},
  ): Promise<{ loss: number; metrics: Record<string, number> }> {
    return this.forwardBackwardSync(sequences, loss, masks);
  }

  /** Forward, the caller's loss on the token log-probs, backward; gradients add up until optimStep. */
  forwardBackwardSync(
    sequences: number[][], loss: TokenLoss, masks: SequenceMasks = {},
  ): { loss: number; metrics: Record<string, number> } {
    this.alive();
    if (sequences.length === 0) throw new EngineError("forwardBackward: no sequences");
    const batch = this.pack(sequences, masks);
    const ws = this.trainWs;
    trainForward(this.model, ws, batch, true, { checkpoint: this.checkpointsBatch(batch.ids.length) });
    const lps = batch.starts.map((st, i) => ws.logprob.slice(st, st + batch.lengths[i]! - 1));
    const out = loss(lps);
    if (!Number.isFinite(out.loss)) throw new EngineError(`forwardBackward: the loss is ${out.loss}; check the loss function and data`);
    const N = batch.ids.length;
    const dLogprob = new Float32Array(N);
    if (out.dLogprobs.length !== lps.length) {
      throw new EngineError(`forwardBackward: the loss returned ${out.dLogprobs.length} gradient arrays for ${lps.length} sequences`);
    }
    out.dLogprobs.forEach((d, i) => {
      if (d.length !== lps[i]!.length) {
        throw new EngineError(`forwardBackward: dLogprobs[${i}] has ${d.length} values, expected ${lps[i]!.length} (sequence length - 1)`);
      }
      const scored = masks.scored?.[i];
      if (scored) {
        for (let t = 0; t < d.length; t++) {
          if (d[t] !== 0 && !scored[t]) throw new EngineError(`forwardBackward: dLogprobs[${i}][${t}] is ${d[t]}, but masks.scored leaves that prediction out; score it or give it no gradient`);
        }
      }
      dLogprob.set(d, batch.starts[i]!);
    });
    if (this.loraState) trainBackward(this.model, ws, batch, dLogprob, null, this.loraState.grads);
    else trainBackward(this.model, ws, batch, dLogprob, this.gradParams);
    this.accumulated += sequences.length;
    return { loss: out.loss, metrics: { ...(out.metrics ?? {}), tokens: N, sequences: sequences.length } };
  }

  /** Whether a training batch of N tokens runs with activation checkpointing (`activationCheckpointing`). */
  checkpointsBatch(N: number): boolean {
    if (this.checkpointing !== "auto") return this.checkpointing;
    return layerActivationBytes(this.config, N) > CHECKPOINT_ABOVE_BYTES;
  }

  /**
   * Forgets the AdamW moments and step count: the next optimStep starts a fresh optimizer. A new training
   * stage calls it, so its updates are not scaled by the previous stage's gradient statistics.
   */
  resetOptimizer(): void {
    this.alive();
    this.adamw = null;
  }

  async optimStep(hparams: OptimHparams): Promise<{ gradNorm: number }> {
    return this.optimStepSync(hparams);
  }

  /**
   * AdamW on the accumulated gradients (clipped to maxGradNorm), then zeroes them; bumps policyVersion.
   * bf16 weights trained in full: AdamW updates the fp32 master, which is then rounded (to nearest even)
   * into the bf16 matrices and copied into the fp32 norms, biases and sink logits.
   */
  optimStepSync(hparams: OptimHparams): { gradNorm: number } {
    this.alive();
    const lora = this.loraState?.adapter;
    // With a merged adapter: take the old one out of the weights, step it, merge the new one.
    const merged = lora && !this.model.lora;
    if (merged) mergeLora(this.kernels, this.model.params, lora, -1);
    const master = this.master;
    const { gradNorm, skipped } = this.optimizer.update(this.kernels, lora ? lora.data : master ?? this.weights.data, this.grads, hparams);
    if (merged) mergeLora(this.kernels, this.model.params, lora, 1);
    if (master && !skipped) this.roundMaster(master);
    this.weightsChanged();
    this.grads.fill(0);
    this.accumulated = 0;
    if (skipped) throw new EngineError(`optimStep: the gradient norm is ${gradNorm}; the step was skipped and gradients dropped`);
    this.policyVersion++;
    return { gradNorm };
  }

  /** bf16 weights: the master rounded into the bf16 buffer, its vectors copied into the fp32 ones the model reads. */
  private roundMaster(master: Float32Array): void {
    const w = this.weights;
    roundToBf16(master, w.data16!);
    for (const e of w.entries) w.vectors?.get(e.name)?.set(master.subarray(e.offset, e.offset + e.size));
  }

  /**
   * Says the weights changed: drops the packed and int8 copies that sampling reuses. optimStep and load call
   * it; code that writes `weights.data` (or a parameter view) directly must call it before sampling again.
   */
  weightsChanged(): void {
    this.model.packed?.clear();
    this.model.sampling?.clear();
  }

  /** What sampling sessions multiply by: the weights ("same") or int8 copies of them ("int8"). */
  get samplingWeights(): SamplingWeights {
    return this.model.sampling ? "int8" : "same";
  }

  /**
   * Sets what sampling sessions multiply by from their next forward on (see the samplingWeights option). Open
   * sessions keep the keys they cached; switching mid-session mixes the two in one sequence.
   */
  useSamplingWeights(kind: SamplingWeights): void {
    if (!SAMPLING_WEIGHTS.includes(kind)) throw new Error(`samplingWeights must be one of ${SAMPLING_WEIGHTS.join(", ")}, got ${JSON.stringify(kind)}`);
    if (kind === "int8") this.model.sampling ??= new QuantizedWeights(this.model.kernels);
    else this.model.sampling = undefined;
  }

  /** Drops accumulated gradients without stepping. */
  zeroGrad(): void {
    this.gradBuf?.fill(0);
    this.loraState?.grads.data.fill(0);
    this.accumulated = 0;
  }

  // ---- checkpoints --------------------------------------------------------------------------------------

  async save(dir: string, opts: EngineSaveOptions = {}): Promise<void> {
    this.saveSync(dir, opts);
  }

  saveSync(dir: string, opts: EngineSaveOptions = {}): void {
    this.alive();
    if (this.loraState) {
      // The adapter alone, in PEFT's format (`sinkflex merge` writes a full checkpoint from it).
      saveLoraAdapter(dir, this.loraState.adapter, {
        baseModel: this.checkpointDir, tokenizerFrom: this.tokenizerDir, meta: { policyVersion: this.policyVersion, optimizerStep: this.adamw?.step ?? 0 },
      });
      if (opts.optimizer) {
        writeSafetensors(join(dir, OPTIMIZER_FILE), [
          ["exp_avg", { shape: [this.optimizer.size], data: this.optimizer.m }],
          ["exp_avg_sq", { shape: [this.optimizer.size], data: this.optimizer.v }],
        ]);
      }
      return;
    }
    // bf16 weights trained in full: the fp32 master travels with the optimizer state (the exact resume);
    // the checkpoint itself holds the bf16 weights, the master rounded.
    const extraFiles = opts.optimizer
      ? [{
          name: OPTIMIZER_FILE,
          tensors: new Map([
            ["exp_avg", { shape: [this.optimizer.size], data: this.optimizer.m }],
            ["exp_avg_sq", { shape: [this.optimizer.size], data: this.optimizer.v }],
            ...(this.masterBuf ? [["master", { shape: [this.masterBuf.length], data: this.masterBuf }] satisfies [string, { shape: number[]; data: Float32Array }]] : []),
          ]),
        }]
      : [];
    saveCheckpoint(dir, this.config, this.weights.entries, heldData(this.weights), {
      dtype: opts.dtype,
      maxShardBytes: opts.maxShardBytes,
      tokenizerFrom: this.tokenizerDir,
      meta: { policyVersion: this.policyVersion, optimizerStep: this.adamw?.step ?? 0 },
      attention: this.model.attention,
      sinkProfile: this.sinkProfile,
      extraFiles,
    });
  }

  /**
   * Replaces the weights with a checkpoint of the same shape (and its policy version and optimizer state
   * when saved). Open sessions are recomputed with the new weights on their next use.
   */
  async load(dir: string): Promise<void> {
    this.loadSync(dir);
  }

  loadSync(dir: string): void {
    this.alive();
    if (isLoraAdapterDir(dir)) {
      this.loadLoraSync(dir);
      return;
    }
    if (this.loraState) throw new EngineError(`load: this engine trains a LoRA adapter and ${dir} is a full checkpoint; load an adapter folder, or use loadEngine for the checkpoint`);
    const ck = loadCheckpoint(dir, { dtype: this.dtype });
    const same =
      ck.entries.length === this.weights.entries.length &&
      ck.entries.every((e, i) => e.name === this.weights.entries[i]!.name && e.size === this.weights.entries[i]!.size);
    if (!same) throw new EngineError(`load: ${dir} has a different model shape than this engine; use loadEngine instead`);
    const mine = this.model.attention;
    if (ck.attention && (ck.attention.window !== mine.window || ck.attention.sinks !== mine.sinks)) {
      throw new EngineError(
        `load: ${dir} was trained with ${describeSinkWindow(ck.attention)} (its ${SINK_WINDOW_FILE}), but this engine runs ${describeSinkWindow(mine)}; use loadEngine to get an engine with the checkpoint's mask`,
      );
    }
    if (this.dtype === "bf16") {
      this.weights.data16!.set(ck.data16!);
      // the norms, biases and sink logits: the model's fp32 views are the weights' vectors
      for (const [name, v] of ck.vectors!) this.weights.vectors!.get(name)?.set(v);
      this.masterBuf = null; // made again from these weights, unless the optimizer state holds one
    } else {
      this.weights.data.set(ck.data);
    }
    this.weightsChanged();
    this.policyVersion = ck.meta?.policyVersion ?? this.policyVersion;
    this.restoreOptimizer(dir, ck.meta?.optimizerStep);
    this.zeroGrad();
    for (const s of this.sessions) s.invalidate();
  }

  /**
   * Puts a PEFT LoRA folder's adapter on the base weights: replaces the trained adapter (same rank and
   * targets) or, with none yet, starts training this one.
   */
  loadLoraSync(dir: string): void {
    const loaded = loadLoraAdapter(dir, this.config);
    const cur = this.loraState?.adapter;
    if (!cur) this.enableLora(loaded);
    else {
      if (cur.data.length !== loaded.data.length || cur.lora.targets.join() !== loaded.lora.targets.join() || cur.scale !== loaded.scale) {
        throw new EngineError(`load: the adapter in ${dir} (rank ${loaded.lora.rank}, alpha ${loaded.lora.alpha}, targets ${loaded.lora.targets.join(",")}) differs from the one this engine trains; start a new engine for it`);
      }
      if (!this.model.lora) mergeLora(this.kernels, this.model.params, cur, -1);
      cur.data.set(loaded.data);
      if (!this.model.lora) mergeLora(this.kernels, this.model.params, cur, 1);
      this.weightsChanged();
      for (const s of this.sessions) s.invalidate();
    }
    const meta = loaded.meta ?? {};
    if (typeof meta.policyVersion === "number") this.policyVersion = meta.policyVersion;
    this.restoreOptimizer(dir, meta.optimizerStep);
    this.zeroGrad();
  }

  /** Reads `optimizer.safetensors` from a checkpoint folder, or starts AdamW fresh when there is none. */
  restoreOptimizer(dir: string, step: unknown): void {
    const p = join(dir, OPTIMIZER_FILE);
    if (!existsSync(p)) {
      this.adamw = null;
      return;
    }
    const t = readSafetensors(p);
    const m = t.get("exp_avg");
    const v = t.get("exp_avg_sq");
    const opt = this.optimizer;
    if (!m || !v || m.data.length !== opt.size || v.data.length !== opt.size) {
      throw new EngineError(`${p} does not match this model's parameters; delete it to start the optimizer fresh`);
    }
    opt.m.set(m.data);
    opt.v.set(v.data);
    opt.step = typeof step === "number" ? step : 0;
    // bf16 weights trained in full: the saved master, when this engine keeps one; without it the master is
    // made from the loaded bf16 weights.
    const master = t.get("master");
    if (master && this.master) {
      if (master.data.length !== this.master.length) throw new EngineError(`${p}: its master copy does not match this model's parameters; delete the file to start the optimizer fresh`);
      this.master.set(master.data);
      this.roundMaster(this.master); // the checkpoint's norms and biases were written as bf16: the master's are exact
      this.weightsChanged();
    }
  }

  /** The ids sampling may produce (0 .. usableTokens-1); the embedding's rows past them are padding. */
  get usableTokens(): number {
    return this.sampler.usable;
  }

  /** Restricts sampling to the tokenizer's ids; more than the embedding's rows is an error. */
  set usableTokens(n: number) {
    if (!(Number.isInteger(n) && n >= 1 && n <= this.config.vocabSize)) {
      throw new EngineError(
        `usableTokens ${n}: the model has ${this.config.vocabSize} embedding rows; the tokenizer's id count must be between 1 and that`,
      );
    }
    this.sampler.usable = n;
  }

  /** Closes every session (pending samples are rejected) and refuses further calls. */
  dispose(): void {
    if (!this.disposed) EmbeddedEngine.liveCount--;
    this.disposed = true;
    this.model.packed?.clear();
    this.model.sampling?.clear();
    for (const s of [...this.sessions]) {
      s.busy = false;
      s.close();
    }
  }

  // ---- internals used by sessions -------------------------------------------------------------------------

  /** @internal */ forgetSession(s: EmbeddedSession): void {
    this.sessions.delete(s);
  }

  /** Makes sure each session has logits for its last token, computing pending tokens (batched). */
  /** @internal */ sync(list: EmbeddedSession[]): void {
    const todo: EmbeddedSession[] = [];
    for (const s of list) {
      if (s.logitsValid) continue;
      if (s.length === 0) throw new EngineError("the session is empty; append tokens first");
      if (s.cached === s.length) s.rewindOne();
      todo.push(s);
    }
    if (todo.length > 0) this.computePending(todo);
  }

  /**
   * Computes every pending token of the sessions (each has at least one) and their last tokens' logits:
   * as few forwards as `maxForwardTokens` allows, sessions with equally many pending tokens side by side
   * (one attention call each run); a session with more pending tokens than that goes in pieces. Under KV
   * eviction a session's pieces are at most max(W, blockSize) tokens, so a long prefill holds about
   * K + 2W rows at its peak instead of K + W + maxForwardTokens.
   */
  /** @internal */ computePending(list: EmbeddedSession[]): void {
    const cap = this.maxForwardTokens;
    const policy = this.pool.evictionPolicy;
    const piece = policy ? Math.min(cap, Math.max(policy.mask.window, this.pool.blockSize)) : cap;
    const pending = (s: EmbeddedSession) => s.length - s.cached;
    for (const s of list) {
      // longrope: a session that outgrows original_max_position_embeddings is recomputed whole with the long
      // factors, as transformers' generate recomputes its cache there (docs/model.md, "Exactness limits").
      const offset = this.model.rope.rowOffset(s.length);
      if (s.cached > 0 && offset !== s.ropeOffset) s.invalidate();
      s.ropeOffset = offset;
    }
    const order = list.length > 1 ? [...list].sort((a, b) => pending(a) - pending(b)) : list;
    let batch: EmbeddedSession[] = [];
    let counts: number[] = [];
    let rows = 0;
    const flush = () => {
      if (batch.length > 0) this.forward(batch, counts);
      batch = [];
      counts = [];
      rows = 0;
    };
    for (const s of order) {
      while (pending(s) > piece) this.forward([s], [piece]); // the front of a long prefill, alone
      const n = pending(s);
      if (rows + n > cap) flush();
      batch.push(s);
      counts.push(n);
      rows += n;
    }
    flush();
  }

  /**
   * One forward: the next counts[b] pending tokens of each session. A session whose pending tokens are all
   * computed gets the logits of its last token.
   */
  private forward(list: EmbeddedSession[], counts: number[]): void {
    const B = list.length;
    const V = this.config.vocabSize;
    let M = 0;
    let maxBlocks = 0;
    let R = 0;
    let newBlocks = 0; // at most: the blocks past each session's last, and a copy of a shared one
    for (let b = 0; b < B; b++) {
      const s = list[b]!;
      newBlocks += Math.max(0, Math.ceil((s.cached + counts[b]!) / this.pool.blockSize) - s.blocks.length) + 1;
    }
    this.pool.reserveFree(newBlocks); // the storage grows once, not block by block
    for (let b = 0; b < B; b++) {
      const s = list[b]!;
      const end = s.cached + counts[b]!;
      s.reserve(end);
      M += counts[b]!;
      maxBlocks = Math.max(maxBlocks, s.blocks.length);
      if (end === s.length) R++;
    }
    const ids = new Int32Array(M);
    const positions = new Int32Array(M);
    const newTokens = new Int32Array(B);
    const seqLens = new Int32Array(B);
    const blockTable = new Int32Array(B * maxBlocks);
    const logitRows = new Int32Array(R);
    const withLogits: EmbeddedSession[] = [];
    let row = 0;
    for (let b = 0; b < B; b++) {
      const s = list[b]!;
      const n = counts[b]!;
      const tokens = s.tokenList;
      for (let i = 0; i < n; i++) {
        ids[row + i] = tokens[s.cached + i]!;
        positions[row + i] = s.cached + i;
      }
      newTokens[b] = n;
      seqLens[b] = s.cached + n;
      blockTable.set(s.blocks, b * maxBlocks);
      if (s.evictedBlocks > 0) {
        // evicted blocks are never read (outside the window, no sink slot); the kernels want a valid id there
        const filler = s.blocks[s.blocks.length - 1]!;
        for (let i = b * maxBlocks; i < b * maxBlocks + s.blocks.length; i++) if (blockTable[i] === EVICTED_BLOCK) blockTable[i] = filler;
      }
      row += n;
      if (s.cached + n === s.length) {
        logitRows[withLogits.length] = row - 1;
        withLogits.push(s);
      }
    }
    this.checkIds(ids);
    if (this.stepLogits.length < R * V) this.stepLogits = new Float32Array(R * V);
    cachedForward(this.model, this.cachedWs, this.pool, {
      B, Tq: 0, newTokens, ids, positions, blockTable, maxBlocks, seqLens, logitRows, logits: this.stepLogits,
      pinned: pinnedEntries(list, seqLens), ropeOffsets: Int32Array.from(list, (s) => s.ropeOffset),
    });
    this.stats.forwards++;
    if (M === B) {
      this.stats.decodeSteps++;
      this.stats.decodeRows += B;
    } else {
      this.stats.prefillTokens += M;
    }
    for (let b = 0; b < B; b++) {
      list[b]!.cached += counts[b]!;
      list[b]!.evict();
    }
    withLogits.forEach((s, r) => {
      if (!s.logits) s.logits = new Float32Array(V);
      s.logits.set(this.stepLogits.subarray(r * V, r * V + V));
      s.logitsFor = s.length;
    });
  }

  /** @internal */ checkIds(ids: ArrayLike<number>): void {
    const V = this.config.vocabSize;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (!(Number.isInteger(id) && id >= 0 && id < V)) throw new EngineError(`token id ${id} is outside the vocabulary [0, ${V})`);
    }
  }

  private pack(sequences: number[][], masks: SequenceMasks) {
    const V = this.config.vocabSize;
    for (const [what, arr] of [["docIds", masks.docIds], ["pinned", masks.pinned]] as const) {
      if (!arr) continue;
      if (arr.length !== sequences.length) throw new EngineError(`${what}: ${arr.length} arrays for ${sequences.length} sequences`);
      arr.forEach((a, i) => {
        if (a.length !== sequences[i]!.length) throw new EngineError(`${what}[${i}] has ${a.length} values for a sequence of ${sequences[i]!.length} tokens`);
      });
    }
    masks.docIds?.forEach((d, i) => {
      for (let t = 0; t < d.length; t++) {
        if (d[t]! < SHARED_DOC || (t > 0 && d[t]! < d[t - 1]!)) {
          throw new EngineError(`docIds[${i}][${t}] is ${d[t]} after ${t > 0 ? d[t - 1] : "the start"}; document ids must not decrease along a sequence and are >= 0, or ${SHARED_DOC} for a shared prefix at its start`);
        }
      }
    });
    sequences.forEach((s, i) => {
      if (s.length === 0) throw new EngineError(`sequence ${i} is empty`);
      for (const id of s) {
        if (!(Number.isInteger(id) && id >= 0 && id < V)) throw new EngineError(`sequence ${i}: token id ${id} is outside the vocabulary [0, ${V})`);
      }
    });
    if (masks.scored) {
      if (masks.scored.length !== sequences.length) throw new EngineError(`scored: ${masks.scored.length} arrays for ${sequences.length} sequences`);
      masks.scored.forEach((a, i) => {
        if (a.length !== sequences[i]!.length - 1) throw new EngineError(`scored[${i}] has ${a.length} values for a sequence of ${sequences[i]!.length} tokens (one per prediction: length - 1)`);
      });
    }
    return packSequences(sequences, masks.docIds ?? null, masks.pinned ?? null, masks.scored ?? null);
  }

  private own(s: EngineSession): EmbeddedSession {
    if (!(s instanceof EmbeddedSession) || s.engine !== this) {
      throw new EngineError("this session belongs to another engine; create it with this engine's session()");
    }
    if (s.closed) throw new EngineError("the session is closed");
    return s;
  }

  private alive(): void {
    if (this.disposed) throw new EngineError("the engine was disposed; create a new one");
  }
}

/** The pinned entries (below seqLens[b]) of sessions in one forward, or undefined when none has any. */
function pinnedEntries(list: EmbeddedSession[], seqLens: Int32Array): CachedPinned | undefined {
  if (list.every((s) => s.pinnedList.length === 0)) return undefined;
  const start = new Int32Array(list.length);
  const count = new Int32Array(list.length);
  const positions: number[] = [];
  list.forEach((s, b) => {
    start[b] = positions.length;
    for (const p of s.pinnedList) if (p < seqLens[b]!) positions.push(p);
    count[b] = positions.length - start[b]!;
  });
  return { start, count, positions: Int32Array.from(positions) };
}

/** Options of `EmbeddedSession.append`. */
export interface SessionAppendOptions {
  /**
   * [tokens.length] 1 = pin that token: under the sink-window mask every later query keeps its key (like
   * a sink slot) and the session never evicts its block, as the training mask's `pinned` does.
   */
  pinned?: ArrayLike<number>;
}

/** A KV-cache session of the embedded engine. */
export class EmbeddedSession implements EngineSession {
  /** @internal */ tokenList: number[] = [];
  /** @internal */ blocks: number[] = [];
  /** Pinned positions, ascending. */
  /** @internal */ pinnedList: number[] = [];
  /** Cache entries computed (the first `cached` tokens). */
  /** @internal */ cached = 0;
  /** The RoPE table offset its cached keys were rotated with (model/rope.ts: longrope's short or long factors). */
  /** @internal */ ropeOffset = 0;
  /** Blocks of `blocks` that are EVICTED_BLOCK; every evicted block lies before `evictedTo`. */
  /** @internal */ evictedBlocks = 0;
  /** @internal */ evictedTo = 0;
  /** Logits after token `logitsFor - 1`, valid when logitsFor === length. */
  /** @internal */ logits: Float32Array | null = null;
  /** @internal */ logitsFor = -1;
  closed = false;
  /** A sample request of this session is in flight. */
  /** @internal */ busy = false;

  constructor(readonly engine: EmbeddedEngine) {}

  get length(): number {
    return this.tokenList.length;
  }

  tokens(): number[] {
    return [...this.tokenList];
  }

  /**
   * Blocks of the KV cache this session references (shared ones included), indexed by position (block i
   * holds positions i*blockSize ..); EVICTED_BLOCK (-1) where the blocks were evicted. Pending tokens have
   * none yet.
   */
  get blockIds(): readonly number[] {
    return this.blocks;
  }

  /** The positions pinned by `append(tokens, { pinned })`, ascending. */
  get pinnedPositions(): readonly number[] {
    return this.pinnedList;
  }

  /** Blocks this session holds (evicted ones not counted; shared ones counted by each holder). */
  get heldBlocks(): number {
    return this.blocks.length - this.evictedBlocks;
  }

  /** Bytes of KV cache this session holds (keys and values, every layer, float32; shared blocks included). */
  get kvBytes(): number {
    return this.heldBlocks * this.engine.pool.blockBytes;
  }

  /** @internal */ get logitsValid(): boolean {
    return this.logitsFor === this.tokenList.length && this.logits !== null;
  }

  /**
   * Appends tokens; they are computed by the next call that needs them (see the file comment).
   * `opts.pinned` pins some of them (see `SessionAppendOptions`).
   */
  async append(tokens: number[], opts: SessionAppendOptions = {}): Promise<void> {
    this.appendSync(tokens, opts);
  }

  /** `append` without the promise: checks the ids and records the tokens (no computation). */
  appendSync(tokens: number[], opts: SessionAppendOptions = {}): void {
    this.check();
    const pinned = opts.pinned;
    if (pinned && pinned.length !== tokens.length) {
      throw new EngineError(`append: pinned has ${pinned.length} flags for ${tokens.length} tokens; give one 0/1 flag per token`);
    }
    if (tokens.length === 0) return;
    this.engine.checkIds(tokens);
    if (pinned) for (let i = 0; i < pinned.length; i++) if (pinned[i]) this.pinnedList.push(this.tokenList.length + i);
    for (const t of tokens) this.tokenList.push(t);
    this.logitsFor = -1; // the logits held belong to a shorter sequence (or an earlier one)
  }

  /** The logits [V] of the token after the session's last one (computes pending tokens first). */
  nextLogits(): Float32Array {
    this.check();
    this.engine.sync([this]);
    return this.logits!;
  }

  async sample(params: SampleParams): Promise<SampleResult> {
    return (await this.engine.sampleBatch([this], [params]))[0]!;
  }

  fork(): EmbeddedSession {
    this.check();
    // pending tokens are computed first, so that the child shares them instead of computing them again
    if (this.cached < this.tokenList.length) this.engine.computePending([this]);
    const child = this.engine.sessionSync();
    child.tokenList = [...this.tokenList];
    child.pinnedList = [...this.pinnedList];
    child.blocks = [...this.blocks];
    for (const b of this.blocks) if (b !== EVICTED_BLOCK) this.engine.pool.retain(b);
    child.cached = this.cached;
    child.ropeOffset = this.ropeOffset;
    child.evictedBlocks = this.evictedBlocks;
    child.evictedTo = this.evictedTo;
    if (this.logitsValid) {
      child.logits = this.logits!.slice();
      child.logitsFor = this.logitsFor;
    }
    return child;
  }

  truncate(n: number): void {
    this.check();
    if (!(Number.isInteger(n) && n >= 0)) throw new EngineError(`truncate: n must be an integer >= 0 (got ${n})`);
    if (n >= this.tokenList.length) return;
    if (n < this.cached) this.checkHeld(n);
    this.tokenList.length = n;
    while (this.pinnedList.length > 0 && this.pinnedList[this.pinnedList.length - 1]! >= n) this.pinnedList.pop();
    this.cached = Math.min(this.cached, n);
    if (this.logitsFor > n) this.logitsFor = -1;
    this.dropBlocksAfter(this.cached);
  }

  close(): void {
    if (this.closed) return;
    if (this.busy) throw new EngineError("the session is sampling; close it after sample() finishes");
    for (const b of this.blocks) if (b !== EVICTED_BLOCK) this.engine.pool.release(b);
    this.blocks = [];
    this.evictedBlocks = 0;
    this.evictedTo = 0;
    this.closed = true;
    this.logits = null;
    this.engine.forgetSession(this);
  }

  // ---- internals -----------------------------------------------------------------------------------------

  /** @internal */ pushToken(t: number): void {
    this.tokenList.push(t);
  }

  /** Marks the last token as not computed, so the next step recomputes it (and its logits). */
  /** @internal */ rewindOne(): void {
    this.cached = this.tokenList.length - 1;
  }

  /** Drops all cached entries (e.g. after new weights were loaded). */
  /** @internal */ invalidate(): void {
    this.cached = 0;
    this.logitsFor = -1;
    this.dropBlocksAfter(0);
  }

  /**
   * Returns to the pool the blocks the eviction policy says no later query keeps (none without a policy).
   * Evicted blocks are left as EVICTED_BLOCK in the position-indexed block table.
   */
  /** @internal */ evict(): void {
    const pool = this.engine.pool;
    const policy = pool.evictionPolicy;
    if (!policy) return;
    const { first, end } = policy.evictableBlocks(this.cached, pool.blockSize);
    const stop = Math.min(end, this.blocks.length);
    const kept = pinnedBlocks(this.pinnedList, pool.blockSize);
    for (let i = Math.max(first, this.evictedTo); i < stop; i++) {
      const b = this.blocks[i]!;
      if (b === EVICTED_BLOCK || kept.has(i)) continue;
      pool.release(b);
      this.blocks[i] = EVICTED_BLOCK;
      this.evictedBlocks++;
    }
    this.evictedTo = Math.max(this.evictedTo, stop);
  }

  /**
   * Checks that a session cut to its first n tokens can go on: the query at n - 1 (recomputed next) reads
   * positions windowStart(n - 1) .. n - 1 besides the sink slots, and their blocks must still be held.
   */
  private checkHeld(n: number): void {
    const pool = this.engine.pool;
    const policy = pool.evictionPolicy;
    if (!policy || n === 0 || this.evictedBlocks === 0) return;
    const bs = pool.blockSize;
    const from = policy.windowStart(n - 1);
    for (let i = Math.floor(from / bs); i < Math.ceil(n / bs); i++) {
      if (this.blocks[i] !== EVICTED_BLOCK) continue;
      const { window, sinks } = policy.mask;
      let held = i + 1;
      while (held < this.blocks.length && this.blocks[held] === EVICTED_BLOCK) held++;
      const earliest = Math.min(this.tokenList.length, held * bs + window);
      throw new EngineError(
        `truncate(${n}): the keys of positions ${i * bs}..${i * bs + bs - 1} were evicted from this session's KV cache (sink-window mask, window ${window}, sinks ${sinks}: a session keeps its sink slots and its last ${window} positions), and continuing after position ${n - 1} needs them; truncate to ${earliest} or more tokens, or open a new session with the first ${n} tokens (it recomputes them), or run the engine with evictKv: false`,
      );
    }
  }

  /** Makes blocks for entries [cached, newLen) writable: allocates new ones, copies shared partial ones. */
  /** @internal */ reserve(newLen: number): void {
    const pool = this.engine.pool;
    const bs = pool.blockSize;
    const need = Math.ceil(newLen / bs);
    for (let i = Math.floor(this.cached / bs); i < need; i++) {
      if (i < this.blocks.length) {
        const b = this.blocks[i]!;
        if (b === EVICTED_BLOCK) throw new EngineError(`internal: writing into evicted KV block ${i} of a session (cached ${this.cached}); please report this`);
        if (pool.refCount(b) > 1) {
          const nb = pool.alloc();
          pool.copyRows(b, nb, Math.min(bs, Math.max(0, this.cached - i * bs)));
          pool.release(b);
          this.blocks[i] = nb;
        }
      } else {
        this.blocks.push(pool.alloc());
      }
    }
  }

  private dropBlocksAfter(entries: number): void {
    const keep = Math.ceil(entries / this.engine.pool.blockSize);
    while (this.blocks.length > keep) {
      const b = this.blocks.pop()!;
      if (b === EVICTED_BLOCK) this.evictedBlocks--;
      else this.engine.pool.release(b);
    }
    this.evictedTo = Math.min(this.evictedTo, this.blocks.length);
  }

  private check(): void {
    if (this.closed) throw new EngineError("the session is closed");
    if (this.busy) throw new EngineError("the session is sampling; wait for sample() to finish (or fork it before sampling)");
  }
}

/** A new engine over a fresh random model (tests, demos, benchmarks). */
export function createRandomModel(
  cfg: ModelConfig, seed: number, opts: EmbeddedEngineOptions & { std?: number; sinkLogits?: boolean; attentionInit?: AttentionInit } = {},
): EmbeddedEngine {
  return new EmbeddedEngine(randomWeights(cfg, seed, { std: opts.std, sinkLogits: opts.sinkLogits, attentionInit: opts.attentionInit, dtype: opts.dtype }), opts);
}

/**
 * An engine over a Hugging Face checkpoint folder (its tokenizer files are carried into saves), with the
 * sink-window mask saved in the folder (sinkflex_attention.json) unless `opts.attention` is given; given
 * settings that differ from the saved ones are an error naming both. A folder without the file runs
 * `opts.attention`, else full attention.
 */
export function loadEngine(dir: string, opts: EmbeddedEngineOptions = {}): EmbeddedEngine {
  if (isLoraAdapterDir(dir)) {
    // A PEFT adapter folder: its base checkpoint with the adapter on top (trained further by optimStep).
    const engine = loadEngine(loraBaseDir(dir), opts);
    return disposedOnThrow(engine, () => engine.loadLoraSync(dir));
  }
  const ck = loadCheckpoint(dir, { dtype: opts.dtype });
  const engine = new EmbeddedEngine(ck, {
    tokenizerDir: dir,
    policyVersion: ck.meta?.policyVersion ?? 0,
    ...opts,
    // The mask the checkpoint was trained with, unless settings are given (that differ: an error).
    attention: opts.overrideAttention && opts.attention ? opts.attention : resolveSinkWindow(ck.attention, opts.attention, dir),
  });
  disposedOnThrow(engine, () => engine.restoreOptimizer(dir, ck.meta?.optimizerStep));
  engine.sinkProfile = ck.sinkProfile;
  engine.checkpointDir = resolve(dir);
  return engine;
}

/** Runs `step` on a new engine; if it throws, the engine is disposed before the error goes on. */
function disposedOnThrow(engine: EmbeddedEngine, step: () => void): EmbeddedEngine {
  try {
    step();
  } catch (err) {
    engine.dispose();
    throw err;
  }
  return engine;
}
