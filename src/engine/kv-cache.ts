/**
 * The paged KV cache: a pool of fixed-size blocks ([blockSize, KVH, D] per layer, for keys and values)
 * with reference counts, so forked sessions share their common prefix blocks without copying them.
 * A block is copied only when a session writes into a partially filled block that another session
 * still references (copy on write). Under the sink-window mask the pool carries an eviction policy
 * (`SinkWindowEviction`): sessions return the blocks no later query keeps, so a session holds about
 * K + W rows (plus one block per pinned position) however long it grows, and the freed blocks are reused
 * by the next allocations.
 *
 * This file is bookkeeping, storage and the eviction rule; it does not compute attention (the kernels do)
 * and does not know sessions' tokens (embedded.ts does).
 */
import type { SinkWindow } from "../kernels/index.js";
import type { KvStorage } from "../model/index.js";

/**
 * The block-table entry of a block a session evicted. A session's block table stays indexed by position
 * (block i holds positions i*blockSize .. i*blockSize+blockSize-1), so the kernels' entry distances are
 * position distances and their sink-window test is the mask's; an evicted block is a hole the kernels
 * never read (every row in it is outside the window and no sink slot).
 */
export const EVICTED_BLOCK = -1;

/**
 * Which blocks of an engine session may return to the pool. Sessions keep their rows position-indexed in
 * blocks, so a policy answers in blocks.
 */
export interface KvEvictionPolicy {
  /** The mask whose keep rule decides what may go. */
  readonly mask: SinkWindow;
  /**
   * Blocks [first, end) of a session whose first `computed` rows are in the cache that no query at
   * position >= computed - 1 keeps (computed - 1: the engine may recompute the last token once, e.g. after
   * `truncate`). Blocks before `first` hold sink slots and are never evicted; `end <= first` = none.
   */
  evictableBlocks(computed: number, blockSize: number): { first: number; end: number };
  /** The first position, past the sink slots, whose key the query at position q reads (0 = all). */
  windowStart(q: number): number;
}

/**
 * The canonical mask's eviction rule for one document (what engine sessions hold): keep the K sink slots,
 * the pinned positions and the W most recent positions. keep(q, kv) = kv < K OR kv pinned OR q - kv < W,
 * so a row at p < computed - W that is no pinned position is kept by no query at q >= computed - 1.
 * `evictableBlocks` answers for sink slots and the window; the blocks of pinned positions inside that
 * range are kept by the session (`pinnedBlocks`). `rewind` more rows are kept, so that a
 * session can be truncated that many tokens back (past its last token) without recomputing anything.
 */
export class SinkWindowEviction implements KvEvictionPolicy {
  readonly mask: SinkWindow;

  constructor(mask: SinkWindow, readonly rewind = 0) {
    if (!(Number.isInteger(rewind) && rewind >= 0)) throw new RangeError(`kvRewind must be an integer >= 0 (got ${rewind})`);
    if (!(Number.isInteger(mask.window) && mask.window >= 1 && Number.isInteger(mask.sinks) && mask.sinks >= 0)) {
      throw new RangeError(
        `SinkWindowEviction needs a window >= 1 and sinks >= 0 (got window ${mask.window}, sinks ${mask.sinks}); full attention (window 0) keeps every key and takes no eviction policy`,
      );
    }
    this.mask = { window: mask.window, sinks: mask.sinks };
  }

  evictableBlocks(computed: number, blockSize: number): { first: number; end: number } {
    const first = Math.ceil(this.mask.sinks / blockSize);
    const end = Math.floor(Math.max(0, computed - this.mask.window - this.rewind) / blockSize);
    return { first, end };
  }

  windowStart(q: number): number {
    return Math.max(0, q - this.mask.window + 1);
  }
}

/** The blocks holding pinned positions (ascending or not): no eviction policy returns them to the pool. */
export function pinnedBlocks(pinned: readonly number[], blockSize: number): Set<number> {
  const out = new Set<number>();
  for (const p of pinned) out.add(Math.floor(p / blockSize));
  return out;
}

/** The eviction policy of a mask: none for full attention (window 0), else `SinkWindowEviction`. */
export function evictionFor(mask: SinkWindow, rewind = 0): KvEvictionPolicy | null {
  return mask.window > 0 && Number.isFinite(mask.window) ? new SinkWindowEviction(mask, rewind) : null;
}

export class KvBlockPool implements KvStorage {
  kCache: Float32Array[];
  vCache: Float32Array[];
  /** Blocks the storage can hold. */
  capacity: number;
  private refs: Int32Array;
  private free: number[] = [];
  constructor(
    readonly numLayers: number,
    /** KVH * D floats per cache row. */
    readonly rowSize: number,
    readonly blockSize = 16,
    initialBlocks = 64,
    /**
     * The eviction policy sessions consult after each forward (see `KvEvictionPolicy`); null = every row is
     * kept until its session drops it (full attention).
     */
    readonly evictionPolicy: KvEvictionPolicy | null = null,
  ) {
    this.capacity = initialBlocks;
    const n = initialBlocks * blockSize * rowSize;
    this.kCache = Array.from({ length: numLayers }, () => new Float32Array(n));
    this.vCache = Array.from({ length: numLayers }, () => new Float32Array(n));
    this.refs = new Int32Array(initialBlocks);
    for (let b = initialBlocks - 1; b >= 0; b--) this.free.push(b);
  }

  /** Blocks currently referenced by at least one session. */
  get usedBlocks(): number {
    return this.capacity - this.free.length;
  }

  /** Bytes of one block (keys and values, all layers). */
  get blockBytes(): number {
    return this.blockSize * this.rowSize * 4 * 2 * this.numLayers;
  }

  /** Bytes held by the storage (keys and values, all layers). */
  get bytes(): number {
    return this.capacity * this.blockSize * this.rowSize * 4 * 2 * this.numLayers;
  }

  refCount(block: number): number {
    return this.refs[block]!;
  }

  /** Grows the storage (once) so that `n` more blocks can be allocated without growing again. */
  reserveFree(n: number): void {
    if (n <= this.free.length) return;
    this.grow(Math.max(this.capacity * 2, this.capacity - this.free.length + n));
  }

  /** A fresh block with reference count 1 (the storage doubles when full). */
  alloc(): number {
    if (this.free.length === 0) this.grow();
    const b = this.free.pop()!;
    this.refs[b] = 1;
    return b;
  }

  retain(block: number): void {
    this.refs[block]!++;
  }

  release(block: number): void {
    const r = --this.refs[block]!;
    if (r < 0) throw new Error(`KV block ${block} released more often than retained`);
    if (r === 0) this.free.push(block);
  }

  /** Copies the first `rows` rows of every layer's block `src` into `dst`. */
  copyRows(src: number, dst: number, rows: number): void {
    const stride = this.blockSize * this.rowSize;
    const n = rows * this.rowSize;
    for (let l = 0; l < this.numLayers; l++) {
      this.kCache[l]!.copyWithin(dst * stride, src * stride, src * stride + n);
      this.vCache[l]!.copyWithin(dst * stride, src * stride, src * stride + n);
    }
  }

  private grow(cap = this.capacity * 2): void {
    const old = this.capacity;
    const n = cap * this.blockSize * this.rowSize;
    this.kCache = this.kCache.map((a) => {
      const b = new Float32Array(n);
      b.set(a);
      return b;
    });
    this.vCache = this.vCache.map((a) => {
      const b = new Float32Array(n);
      b.set(a);
      return b;
    });
    const refs = new Int32Array(cap);
    refs.set(this.refs);
    this.refs = refs;
    for (let b = cap - 1; b >= old; b--) this.free.push(b);
    this.capacity = cap;
  }
}
