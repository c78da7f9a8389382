/**
 * The paged KV cache: a pool of fixed-size blocks ([blockSize, KVH, D] per layer, for keys and values)
 * with reference counts, so forked sessions share their common prefix blocks without copying them.
 * A block is copied only when a session writes into a partially filled block that another session
 * still references (copy on write).
 *
 * This file is bookkeeping and storage; it does not compute attention (the kernels do) and does not know
 * sessions' tokens (embedded.ts does). It evicts nothing yet: see `KvEvictionPolicy`.
 */
import type { SinkWindow } from "../kernels/kernels.js";
import type { KvStorage } from "../model/transformer.js";

/**
 * Where an eviction policy for engine sessions plugs in, driven by the canonical sink-window mask: with
 * a window W and K sink slots, a session's cached rows that no later query keeps (not a sink slot, not
 * pinned, more than W positions behind the newest) could return their blocks to the pool, bounding KV
 * memory per session by about K + pinned + W rows. The embedded engine does not evict today: every
 * session keeps every row, and the attention kernels apply the mask when they read the cache (so the
 * log-probs are the mask's either way). `MaskedSession` (src/attention/session.ts) evicts by the same
 * rule in its own cache. A policy implementing this interface is what `KvBlockPool.evictionPolicy`
 * will hold once sessions consult it.
 */
export interface KvEvictionPolicy {
  /** The mask whose keep rule decides what may go. */
  readonly mask: SinkWindow;
  /**
   * The cached positions of a session holding `length` rows that no query at position >= `length` keeps,
   * in increasing order (`pinned[t]` = 1 for pinned positions, or null).
   */
  evictable(length: number, pinned: Uint8Array | null): number[];
}

export class KvBlockPool implements KvStorage {
  kCache: Float32Array[];
  vCache: Float32Array[];
  /** Blocks the storage can hold. */
  capacity: number;
  private refs: Int32Array;
  private free: number[] = [];
  /**
   * The eviction policy sessions will consult (see `KvEvictionPolicy`). Always null today: no session
   * evicts, every row is kept until its session is disposed.
   */
  readonly evictionPolicy: KvEvictionPolicy | null = null;

  constructor(
    readonly numLayers: number,
    /** KVH * D floats per cache row. */
    readonly rowSize: number,
    readonly blockSize = 16,
    initialBlocks = 64,
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
