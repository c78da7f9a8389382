/**
 * The canonical sink mask as one description: K sink slots at the start of each document, pinned
 * positions, a sliding window of W tokens, document ids, and an optional shared prefix (doc id -1, at the
 * start of the sequence, seen by every document after it).
 *
 *   keep(q, kv) = kv <= q  AND  (doc(q) == doc(kv) OR doc(kv) == -1)
 *                 AND  (kv is a sink slot OR kv is pinned OR pos(q) - pos(kv) < W)
 *
 * pos is the index within the document, counting the shared prefix (see the kernels' `AttentionMask`,
 * whose `maskKeeps` this file evaluates).
 *
 * The same `CanonicalMask` object is what the attention kernels read in training and scoring (it is the
 * kernels' `AttentionMask` for one sequence) and what `MaskedSession` reads to decide which keys to evict
 * from its KV cache, so rollout and trainer see the same keys. This file only describes and evaluates the
 * mask; it computes no attention and holds no cache.
 *
 * Shapes: T = sequence length; docIds, pinned are [T].
 */
import { documentPositions as rowPositions, maskKeeps, SHARED_DOC, type AttentionMask, type SinkWindow } from "../kernels/index.js";
import { checkMaskConfig, MaskError } from "../model/index.js";

export { checkMaskConfig, MaskError };

/**
 * The mask settings shared by every sequence of a model: K sink slots and the window W ({0, 0} = full
 * attention). Defined beside the attention kernels that read it (src/kernels/kernels.ts); the model
 * validates it and records it in checkpoints (src/model/sink-window.ts); this module builds masks from it.
 */
export type { SinkWindow };

/**
 * The mask of one sequence: the settings plus its per-position document ids and pinned flags.
 * Structurally the kernels' `AttentionMask` (with B = 1), so it can be handed to them as is.
 */
export interface CanonicalMask extends AttentionMask {
  /**
   * [T] document id of each position (non-decreasing along the sequence), or null = one document;
   * -1 (SHARED_DOC) marks a shared prefix at the start.
   */
  docIds: Int32Array | null;
  /** [T] 1 = pinned (kept like a sink slot by every later query of its document), or null = none. */
  pinned: Uint8Array | null;
}

/** A mask for one sequence of T tokens; docIds and pinned must have T entries when given. */
export function canonicalMask(
  cfg: SinkWindow, T: number, docIds: Int32Array | null = null, pinned: Uint8Array | null = null,
): CanonicalMask {
  const { sinks, window } = checkMaskConfig(cfg);
  if (docIds) {
    if (docIds.length !== T) throw new MaskError(`docIds has ${docIds.length} entries for a sequence of ${T} tokens`);
    for (let t = 0; t < T; t++) {
      if (docIds[t]! < SHARED_DOC) {
        throw new MaskError(`docIds[${t}] is ${docIds[t]}; document ids are >= 0, or -1 for a shared prefix at the start`);
      }
      if (t > 0 && docIds[t]! < docIds[t - 1]!) {
        throw new MaskError(`docIds must not decrease along the sequence (position ${t}: ${docIds[t]} after ${docIds[t - 1]}); give each packed document a larger id than the one before, and a shared prefix (-1) the first positions`);
      }
    }
  }
  if (pinned && pinned.length !== T) throw new MaskError(`pinned has ${pinned.length} entries for a sequence of ${T} tokens`);
  return { sinks, window, docIds, pinned };
}

/** Each position's index within its document, counting a shared prefix: [T]. */
export function documentPositions(mask: CanonicalMask, T: number): Int32Array {
  return rowPositions(1, T, mask.docIds);
}

/**
 * keep(q, kv) for one sequence. `docPos` is `documentPositions(mask, T)` (passed in so a loop over many
 * pairs computes it once).
 */
export function keeps(mask: CanonicalMask, docPos: Int32Array, q: number, kv: number): boolean {
  if (kv < 0) return false;
  return maskKeeps(mask, docPos.length, docPos, 0, q, kv);
}

/** The kv positions query q keeps, in increasing order. */
export function keptKeys(mask: CanonicalMask, docPos: Int32Array, q: number): number[] {
  const out: number[] = [];
  for (let kv = 0; kv <= q; kv++) if (keeps(mask, docPos, q, kv)) out.push(kv);
  return out;
}

/** The largest number of keys any query keeps: K + pinned + W (Infinity without a window). */
export function keyBound(mask: CanonicalMask): number {
  if (mask.window === 0) return Infinity;
  let pinned = 0;
  if (mask.pinned) for (const p of mask.pinned) pinned += p;
  return mask.sinks + pinned + mask.window;
}
