/**
 * The engine primitives: the only way the rest of sinkflex talks to a model.
 *
 * Everything here is plain token ids and numbers, so the algorithm never depends on where compute
 * runs: the embedded CPU engine implements this interface, and so can a GPU backend or a remote server.
 * This file declares types only; implementations live beside it.
 */
import type { OptimHparams } from "../model/index.js";

export interface SampleParams {
  /** 0 means greedy. Default 1. */
  temperature?: number;
  /** Nucleus sampling mass in (0, 1]. Default 1. */
  topP?: number;
  /** Keep only the k most likely tokens; 0 = off. Default 0. */
  topK?: number;
  /** Seeds this call's sampling; the same seed and state give the same tokens. */
  seed?: number;
  /** Stop after this many new tokens. */
  maxTokens: number;
  /** Stop (inclusive) when one of these token ids is sampled. */
  stopTokens?: number[];
}

export interface SampleResult {
  /** The sampled token ids, appended to the session. */
  tokens: number[];
  /** log p(token) under the sampling distribution (after temperature / top-p / top-k), one per token. */
  logprobs: number[];
  finishReason: "stop" | "length";
}

/**
 * Pinned tokens of an `append`: [tokens.length] flags, 1 = under the sink-window mask every later query
 * keeps that key (like a sink slot) and the session never evicts it, as the training masks' `pinned` do.
 * Sessions of a remote OpenAI-compatible server have no pinned positions and ignore the flags: give them
 * to the embedded engine's sessions, which keep them.
 */
export interface SessionPins {
  pinned?: ArrayLike<number>;
}

/** A KV-cache session: a token sequence whose keys and values are kept between calls. */
export interface EngineSession {
  /** Number of tokens in the session. */
  readonly length: number;
  /** The session's token ids. */
  tokens(): number[];
  /**
   * Appends tokens (prefill): only these new tokens are computed, now or by the next call that needs them
   * (the embedded engine computes the pending tokens of many sessions together at their next sample).
   */
  append(tokens: number[], opts?: SessionPins): Promise<void>;
  /** Samples new tokens and appends them. */
  sample(params: SampleParams): Promise<SampleResult>;
  /** A child sharing this session's prefix (not copied); both may grow independently. */
  fork(): EngineSession;
  /** Drops tokens after the first n. */
  truncate(n: number): void;
  /** Releases the session's cache. */
  close(): void;
}

/** Per-token loss over teacher-forced log-probs; returns the gradient with respect to those log-probs. */
export type TokenLoss = (logprobs: Float32Array[]) => {
  loss: number;
  /** dLoss/dLogprobs, same shapes as `logprobs`. */
  dLogprobs: Float32Array[];
  metrics?: Record<string, number>;
};

/** The optimizer's hyperparameters for one `optimStep`; defined beside the optimizer (src/model/optimizer.ts). */
export type { OptimHparams };

/**
 * Per-sequence inputs of the canonical attention mask for scoring and training (see the kernels'
 * `AttentionMask`): document ids (several documents packed in one sequence attend only within
 * themselves; -1 marks a shared prefix at the start that every document sees, with each document's
 * positions continuing from its end) and pinned positions (kept by every later query, like sink slots).
 * Window and sink-slot count are the engine's `attention` settings.
 */
export interface SequenceMasks {
  /** One [L] array per sequence. */
  docIds?: Int32Array[];
  /** One [L] array per sequence, 1 = pinned. */
  pinned?: Uint8Array[];
  /**
   * One [L-1] array per sequence (one flag per prediction, as log-probs are returned): 1 = the caller
   * reads this log-prob. The others are not computed: they read 0, and a loss must give them no gradient.
   * Default: every prediction.
   */
  scored?: Uint8Array[];
}

export interface Engine {
  /** Incremented by every `optimStep` (and set by `load`). */
  readonly policyVersion: number;
  /** A new session, prefilled with `prefix` (computed as `append` computes). */
  session(prefix?: number[]): Promise<EngineSession>;
  /** Samples from many sessions in one batched decode; results in the same order. */
  sampleBatch(sessions: EngineSession[], params: SampleParams[]): Promise<SampleResult[]>;
  /**
   * Teacher-forced log-probs: for each sequence of length L, L-1 values, log p(seq[t] | seq[<t]) for
   * t = 1..L-1, at temperature 1.
   */
  logprobs(sequences: number[][], masks?: SequenceMasks): Promise<Float32Array[]>;
  /** Forward, loss, backward; gradients accumulate until `optimStep`. */
  forwardBackward(sequences: number[][], loss: TokenLoss, masks?: SequenceMasks): Promise<{ loss: number; metrics: Record<string, number> }>;
  /** AdamW step on the accumulated gradients, then zeroes them. Returns the pre-clip gradient norm. */
  optimStep(hparams: OptimHparams): Promise<{ gradNorm: number }>;
  /** Writes a Hugging Face checkpoint folder. */
  save(dir: string): Promise<void>;
  /** Frees all sessions and buffers. */
  dispose(): void;
}
