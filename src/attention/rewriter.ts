/**
 * The rewriter: turns documents (token ids) into one packed sequence laid out for the canonical mask.
 * - The K canonical sink slots of each document are filled with the model's own natural sinks: the first
 *   K tokens of the profile's natural prefix (a model family's fixed start, e.g. a chat template's first
 *   tokens). A document that already starts with them is left as is; otherwise they are prepended.
 * - Secondary sinks the probe found are pinned, up to `pinBudget` per document: first the profile's sink
 *   positions that lie beyond the K slots, then occurrences of its token sinks, strongest first.
 * - Document ids and per-document positions are emitted with the mask.
 *
 * K, W and the pin budget are configuration. This file decides layout only; it runs no model.
 */
import { canonicalMask, checkMaskConfig, MaskError, type CanonicalMask, type SinkWindow } from "./mask.js";
import { secondarySinkTokens, sinkPositions, type SinkProfile } from "./profile.js";

export interface RewriterConfig extends SinkWindow {
  /** Most pinned positions per document. */
  pinBudget: number;
}

export interface RewrittenSequence {
  /** [T] the packed token ids. */
  tokens: number[];
  /** [T] document index of each position. */
  docIds: Int32Array;
  /** [T] position within its document (restarting at 0). */
  positions: Int32Array;
  /** [T] 1 = pinned. */
  pinned: Uint8Array;
  /** The canonical mask of the sequence (reads docIds and pinned above). */
  mask: CanonicalMask;
  /** Per document: sink tokens prepended (0 when it already started with the prefix). */
  prepended: number[];
  /** Per document: the positions (in the packed sequence) pinned. */
  pinnedPositions: number[][];
}

/** The K token ids that fill the canonical sink slots, from the profile's natural prefix. */
export function sinkSlotTokens(profile: SinkProfile, K: number): number[] {
  if (K > profile.prefix.length) {
    throw new MaskError(`K = ${K} sink slots, but the profile records a natural prefix of only ${profile.prefix.length} tokens; probe with a longer prefix or use a smaller K`);
  }
  return profile.prefix.slice(0, K);
}

/** Lays out documents for the canonical mask (see the file comment). */
export function rewriteForSinks(documents: number[][], profile: SinkProfile, cfg: RewriterConfig): RewrittenSequence {
  const { sinks: K, window } = checkMaskConfig(cfg);
  if (!(Number.isInteger(cfg.pinBudget) && cfg.pinBudget >= 0)) throw new MaskError(`pinBudget must be an integer >= 0, got ${cfg.pinBudget}`);
  if (documents.length === 0) throw new MaskError("rewriteForSinks: no documents");
  const slots = sinkSlotTokens(profile, K);
  const extraPositions = sinkPositions(profile).filter((p) => p >= K);
  const tokenRank = new Map(secondarySinkTokens(profile).map((t, i) => [t.tokenId, i]));

  const tokens: number[] = [];
  const docIds: number[] = [];
  const positions: number[] = [];
  const pinned: number[] = [];
  const prepended: number[] = [];
  const pinnedPositions: number[][] = [];
  documents.forEach((doc, d) => {
    if (doc.length === 0) throw new MaskError(`document ${d} is empty`);
    const starts = slots.every((t, i) => doc[i] === t);
    const body = starts ? doc : [...slots, ...doc];
    prepended.push(starts ? 0 : slots.length);
    const offset = tokens.length;
    // Pins: position sinks beyond the slots, then token sinks by strength (earliest first within one).
    const chosen: number[] = [];
    for (const p of extraPositions) if (p < body.length && chosen.length < cfg.pinBudget) chosen.push(p);
    const candidates: { pos: number; rank: number }[] = [];
    body.forEach((t, p) => {
      const r = tokenRank.get(t);
      if (r !== undefined && p >= K && !chosen.includes(p)) candidates.push({ pos: p, rank: r });
    });
    candidates.sort((a, b) => a.rank - b.rank || a.pos - b.pos);
    for (const c of candidates) {
      if (chosen.length >= cfg.pinBudget) break;
      chosen.push(c.pos);
    }
    const pinSet = new Set(chosen);
    body.forEach((t, p) => {
      tokens.push(t);
      docIds.push(d);
      positions.push(p);
      pinned.push(pinSet.has(p) ? 1 : 0);
    });
    pinnedPositions.push(chosen.sort((a, b) => a - b).map((p) => p + offset));
  });
  const di = Int32Array.from(docIds);
  const pi = Uint8Array.from(pinned);
  return {
    tokens, docIds: di, positions: Int32Array.from(positions), pinned: pi,
    mask: canonicalMask({ sinks: K, window }, tokens.length, di, pi), prepended, pinnedPositions,
  };
}
