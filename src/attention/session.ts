/**
 * A KV-cache session that follows the canonical sink mask: after each step it evicts exactly the keys
 * the mask drops for the last computed query, so the cache holds at most K sink slots + the pinned
 * positions + the W most recent tokens of the current document, however long the sequence grows.
 *
 * The session keeps its own `CanonicalMask` (sink slots, window, and the document ids and pinned flags of
 * every token appended so far); `mask()` returns it, and the trainer scores the same tokens under that
 * same description (`EmbeddedEngine.logprobs` with the mask's docIds / pinned and the engine's
 * `attention` settings), which is what makes sampled and teacher-forced log-probs agree.
 *
 * Storage is a pool of one-row blocks (blockSize 1), so the block table is a free permutation of cache
 * slots: an evicted key frees its slot and nothing is copied. Each step lays the kept entries out as
 * [fixed keys (sink slots and pinned keys that left the window)] [the recent, contiguous positions]
 * [the new tokens], and calls the model's `cachedForward` with `sinks` = number of fixed keys and the
 * window W, so the kernels' entry distances are position distances. A prefill is cut into chunks so that
 * no sink slot or pinned key leaves the window inside a chunk.
 *
 * For the sink-window mask itself use the engine's sessions: under a window they evict the same keys from
 * the engine's paged cache (src/engine/kv-cache.ts), with forks, batched decoding and serving. This
 * session exists only for what engine sessions do not take: pinned keys and document boundaries inside
 * one session. It is not the engine's session (no forks, no batching across sessions) and not a scorer:
 * it samples and reports log-probs, like a rollout does.
 */
import { resolveSampleParams, Sampler } from "../engine/index.js";
import type { SampleParams, SampleResult } from "../engine/index.js";
import { Rng } from "../core/index.js";
import { CachedWorkspace, cachedForward, type KvStorage, type Model } from "../model/index.js";
import { canonicalMask, checkMaskConfig, MaskError, type CanonicalMask, type SinkWindow } from "./mask.js";

export interface MaskedSessionOptions {
  /** Most new tokens computed in one `cachedForward` call during a prefill. Default 256. */
  maxChunk?: number;
  /** Seeds sampling calls that pass no seed. Default 0. */
  seed?: number;
}

export interface AppendOptions {
  /** [n] 1 = pin this token (it stays in the cache for the rest of its document). */
  pinned?: ArrayLike<number>;
  /** The first appended token starts a new document: every earlier key is dropped. */
  newDocument?: boolean;
}

/** KV storage of one-row blocks, grown by doubling when full. */
class SlotStorage implements KvStorage {
  readonly blockSize = 1;
  kCache: Float32Array[];
  vCache: Float32Array[];
  capacity: number;
  private free: number[] = [];

  constructor(readonly numLayers: number, readonly rowSize: number, initial: number) {
    this.capacity = initial;
    this.kCache = Array.from({ length: numLayers }, () => new Float32Array(initial * rowSize));
    this.vCache = Array.from({ length: numLayers }, () => new Float32Array(initial * rowSize));
    for (let s = initial - 1; s >= 0; s--) this.free.push(s);
  }

  alloc(): number {
    if (this.free.length === 0) this.grow();
    return this.free.pop()!;
  }

  release(slot: number): void {
    this.free.push(slot);
  }

  /** Slots in use. */
  get used(): number {
    return this.capacity - this.free.length;
  }

  private grow(): void {
    const old = this.capacity;
    const cap = old * 2;
    const widen = (a: Float32Array) => {
      const b = new Float32Array(cap * this.rowSize);
      b.set(a);
      return b;
    };
    this.kCache = this.kCache.map(widen);
    this.vCache = this.vCache.map(widen);
    for (let s = cap - 1; s >= old; s--) this.free.push(s);
    this.capacity = cap;
  }
}

/** A sampling session whose KV cache is bounded by the canonical mask. */
export class MaskedSession {
  readonly config: SinkWindow;
  private readonly model: Model;
  private readonly ws: CachedWorkspace;
  private readonly storage: SlotStorage;
  private readonly sampler: Sampler;
  private readonly rng: Rng;
  private readonly maxChunk: number;

  private tokenList: number[] = [];
  private docList: number[] = [];
  private pinList: number[] = [];
  /** Tokens whose keys and values are computed. */
  private computed = 0;
  /** Start position of the current document. */
  private docStart = 0;
  /** Kept keys that left the recent region: sink slots and pinned keys of the current document. */
  private fixedPos: number[] = [];
  private fixedSlot: number[] = [];
  /** Recent keys: positions regionStart .. computed-1, slots regionSlots[regionHead ..]. */
  private regionStart = 0;
  private regionSlots: number[] = [];
  private regionHead = 0;
  private logits: Float32Array;

  constructor(model: Model, config: SinkWindow, opts: MaskedSessionOptions = {}) {
    this.config = checkMaskConfig(config);
    this.model = model;
    this.maxChunk = opts.maxChunk ?? 256;
    if (!(Number.isInteger(this.maxChunk) && this.maxChunk >= 1)) throw new MaskError(`maxChunk must be an integer >= 1, got ${opts.maxChunk}`);
    const { cfg } = model;
    this.ws = new CachedWorkspace(cfg);
    const initial = this.config.window > 0 ? this.config.sinks + this.config.window + this.maxChunk + 16 : 1024;
    this.storage = new SlotStorage(cfg.numLayers, cfg.numKvHeads * cfg.headDim, initial);
    this.sampler = new Sampler(cfg.vocabSize);
    this.rng = new Rng(opts.seed ?? 0, "xoshiro128**");
    this.logits = new Float32Array(cfg.vocabSize);
  }

  get length(): number {
    return this.tokenList.length;
  }

  tokens(): number[] {
    return [...this.tokenList];
  }

  /** The canonical mask of every token so far: what the trainer scores these tokens under. */
  mask(): CanonicalMask {
    const T = this.tokenList.length;
    return canonicalMask(this.config, T, Int32Array.from(this.docList), Uint8Array.from(this.pinList));
  }

  /** Positions whose keys and values are in the cache now, in increasing order. */
  cachedPositions(): number[] {
    const out = [...this.fixedPos];
    for (let p = this.regionStart; p < this.computed; p++) out.push(p);
    return out.sort((a, b) => a - b);
  }

  /** Cache entries held now. */
  get cachedCount(): number {
    return this.fixedPos.length + (this.computed - this.regionStart);
  }

  /** Bytes of KV storage allocated (keys and values, every layer, float32). */
  get kvBytes(): number {
    return this.storage.capacity * this.storage.rowSize * 4 * 2 * this.storage.numLayers;
  }

  /** Appends tokens and computes them (with any pending sampled token). */
  append(tokens: readonly number[], opts: AppendOptions = {}): void {
    if (tokens.length === 0) return;
    if (opts.pinned && opts.pinned.length !== tokens.length) {
      throw new MaskError(`pinned has ${opts.pinned.length} flags for ${tokens.length} tokens`);
    }
    const V = this.model.cfg.vocabSize;
    for (const t of tokens) {
      if (!(Number.isInteger(t) && t >= 0 && t < V)) throw new MaskError(`token id ${t} is outside the vocabulary [0, ${V})`);
    }
    const prevDoc = this.docList.length > 0 ? this.docList[this.docList.length - 1]! : 0;
    const doc = opts.newDocument && this.docList.length > 0 ? prevDoc + 1 : prevDoc;
    tokens.forEach((t, i) => {
      this.tokenList.push(t);
      this.docList.push(doc);
      this.pinList.push(opts.pinned ? (opts.pinned[i] ? 1 : 0) : 0);
    });
    this.computePending();
  }

  /** Samples tokens one by one under the mask; returns them with their sampling log-probs. */
  sample(params: SampleParams): SampleResult {
    if (this.tokenList.length === 0) throw new MaskError("sample: the session is empty; append a prompt first");
    const p = resolveSampleParams(params);
    const rng = p.seed === undefined ? this.rng : new Rng(p.seed, "xoshiro128**");
    const result: SampleResult = { tokens: [], logprobs: [], finishReason: "length" };
    for (let i = 0; i < p.maxTokens; i++) {
      this.computePending();
      const { token, logprob } = this.sampler.sample(this.logits, p, rng);
      result.tokens.push(token);
      result.logprobs.push(logprob);
      this.tokenList.push(token);
      this.docList.push(this.docList[this.docList.length - 1]!);
      this.pinList.push(0);
      if (p.stopTokens.has(token)) {
        result.finishReason = "stop";
        break;
      }
    }
    return result;
  }

  /** Logits [V] after the last token (computing pending tokens first). A view: copy to keep it. */
  lastLogits(): Float32Array {
    this.computePending();
    return this.logits;
  }

  // ---- internals ------------------------------------------------------------------------------------------

  private isForeverKept(pos: number): boolean {
    return pos - this.docStart < this.config.sinks || this.pinList[pos] === 1;
  }

  private computePending(): void {
    while (this.computed < this.tokenList.length) {
      const p0 = this.computed;
      if (p0 > 0 && this.docList[p0] !== this.docList[p0 - 1]) this.startDocument(p0);
      this.evictFor(p0);
      this.computeChunk(p0, this.chunkEnd(p0));
    }
  }

  /** Drops every key (a new document sees nothing before it). */
  private startDocument(p0: number): void {
    for (const s of this.fixedSlot) this.storage.release(s);
    for (let i = this.regionHead; i < this.regionSlots.length; i++) this.storage.release(this.regionSlots[i]!);
    this.fixedPos = [];
    this.fixedSlot = [];
    this.regionSlots = [];
    this.regionHead = 0;
    this.regionStart = p0;
    this.docStart = p0;
  }

  /**
   * Evicts the keys query q does not keep; a sink slot or pinned key leaving the window moves to the fixed
   * entries instead. Afterwards the cache holds exactly the keys < q that q keeps.
   */
  private evictFor(q: number): void {
    const W = this.config.window;
    if (W === 0) return;
    while (this.regionStart < this.computed && q - this.regionStart >= W) {
      const pos = this.regionStart;
      const slot = this.regionSlots[this.regionHead]!;
      if (this.isForeverKept(pos)) {
        this.fixedPos.push(pos);
        this.fixedSlot.push(slot);
      } else {
        this.storage.release(slot);
      }
      this.regionHead++;
      this.regionStart++;
    }
    if (this.regionHead > 4096) {
      this.regionSlots = this.regionSlots.slice(this.regionHead);
      this.regionHead = 0;
    }
  }

  /** End (exclusive) of the next chunk: no kept-forever key may leave the window inside it. */
  private chunkEnd(p0: number): number {
    let p1 = Math.min(this.tokenList.length, p0 + this.maxChunk);
    for (let t = p0 + 1; t < p1; t++) {
      if (this.docList[t] !== this.docList[p0]) {
        p1 = t;
        break;
      }
    }
    const W = this.config.window;
    if (W === 0) return p1;
    for (let pos = this.regionStart; pos < p1; pos++) {
      if (pos >= p0 + W) break;
      if (this.isForeverKept(pos)) p1 = Math.min(p1, pos + W);
    }
    return Math.max(p1, p0 + 1);
  }

  private computeChunk(p0: number, p1: number): void {
    const Tq = p1 - p0;
    const S = this.fixedPos.length;
    const R = this.computed - this.regionStart;
    const newSlots: number[] = [];
    for (let i = 0; i < Tq; i++) newSlots.push(this.storage.alloc());
    const len = S + R + Tq;
    const table = new Int32Array(len);
    table.set(this.fixedSlot, 0);
    for (let i = 0; i < R; i++) table[S + i] = this.regionSlots[this.regionHead + i]!;
    table.set(newSlots, S + R);
    const ids = Int32Array.from(this.tokenList.slice(p0, p1));
    const positions = new Int32Array(Tq);
    for (let i = 0; i < Tq; i++) positions[i] = p0 + i;
    // The kernels keep entries j < sinks and entries within the window: here the fixed entries and the
    // contiguous recent ones.
    const stepModel: Model = { ...this.model, attention: { window: this.config.window, sinks: S } };
    cachedForward(stepModel, this.ws, this.storage, {
      B: 1, Tq, ids, positions, blockTable: table, maxBlocks: len, seqLens: Int32Array.of(len),
      logitRows: Int32Array.of(Tq - 1), logits: this.logits,
    });
    for (const s of newSlots) this.regionSlots.push(s);
    this.computed = p1;
    this.evictFor(p1 - 1);
  }
}
