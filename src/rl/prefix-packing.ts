/**
 * Shared-prefix packing for training calls: sequences that begin with the same tokens (a suite's system
 * prompt in SFT, a task's prompt in a GRPO group) are packed into one sequence holding one copy of the
 * prefix followed by every sequence's rest, each rest a document that sees the prefix (the attention
 * mask's shared prefix, doc id -1). The prefix is computed once instead of once per sequence.
 *
 * The loss is unchanged: log-probs are handed to the loss in the unpacked layout ([L-1] per sequence),
 * and the gradients packed back. The prefix ends before the first token any of the sequences trains on,
 * so every trained token is predicted from the same context in both layouts. One row per packed sequence
 * but the first cannot be computed (the prediction of its first token after the prefix, which in the
 * packed layout follows another document): it is never trained (the prefix was cut so), reads as 0 in
 * the unpacked log-probs, and a gradient on it is an error.
 *
 * Input masks are per prediction ([L-1], 1 = trained), as the losses use them. Pinned flags (per token,
 * the attention mask's pinned positions) travel with their tokens: the shared prefix takes the members'
 * own (the prefix is cut where they differ), each rest its own.
 */
import type { Engine, SequenceMasks, TokenLoss } from "../engine/index.js";

/** Shorter common prefixes are not worth packing (a packed sequence's attention is no cheaper). */
export const MIN_SHARED_PREFIX = 8;

/** Where row r of an unpacked sequence lives: packed sequence `seq`, row `row`; row -1 = not computed. */
interface RowSource {
  seq: number;
  /** [L-1] packed row of each prediction row, -1 where it cannot be computed. */
  rows: Int32Array;
}

export interface PrefixPacking {
  /** The sequences to run: packed groups, and the sequences that share no prefix, as they are. */
  sequences: number[][];
  /**
   * Their document ids (-1 on each packed prefix; none when nothing was packed) and the predictions
   * scored: those the input masks train on (the others' log-probs read 0 after unpacking).
   */
  masks: SequenceMasks;
  /** Tokens before and after packing. */
  tokensIn: number;
  tokensOut: number;
  /** Per-sequence log-probs ([L-1] each, input order) from the packed sequences' log-probs. */
  unpack(packedLogprobs: Float32Array[]): Float32Array[];
  /** Packed-layout gradients from per-sequence ones (shared rows add up). */
  pack(dLogprobs: Float32Array[]): Float32Array[];
}

function commonPrefix(a: readonly number[], b: readonly number[], limit: number): number {
  let n = 0;
  while (n < limit && a[n] === b[n]) n++;
  return n;
}

/** Index of the first 1 in mask, or mask.length. */
function firstTrained(mask: Uint8Array): number {
  const i = mask.indexOf(1);
  return i < 0 ? mask.length : i;
}

/**
 * Groups `seqs` by shared prefix and packs each group of two or more. `masks[i]` has one entry per
 * prediction of seqs[i] (length - 1).
 */
export function packSharedPrefixes(
  seqs: readonly (readonly number[])[], masks: readonly Uint8Array[], pinned?: readonly (Uint8Array | undefined)[],
): PrefixPacking {
  if (masks.length !== seqs.length) throw new Error(`prefix packing: ${masks.length} masks for ${seqs.length} sequences`);
  if (pinned && pinned.length !== seqs.length) throw new Error(`prefix packing: ${pinned.length} pinned arrays for ${seqs.length} sequences`);
  const pinsOf = (i: number): Uint8Array | undefined => {
    const p = pinned?.[i];
    if (p && p.length !== seqs[i]!.length) throw new Error(`prefix packing: sequence ${i} has ${seqs[i]!.length} tokens but ${p.length} pinned flags (one per token)`);
    return p;
  };
  const anyPins = pinned?.some((p) => p !== undefined && p.some((f) => f !== 0)) ?? false;
  seqs.forEach((s, i) => {
    if (masks[i]!.length !== s.length - 1) throw new Error(`prefix packing: sequence ${i} has ${s.length} tokens but a mask of ${masks[i]!.length} (one per prediction: length - 1)`);
  });
  // Buckets by the first MIN_SHARED_PREFIX tokens, in order of first appearance.
  const buckets = new Map<string, number[]>();
  seqs.forEach((s, i) => {
    const key = s.length > MIN_SHARED_PREFIX ? s.slice(0, MIN_SHARED_PREFIX).join(",") : `alone:${i}`;
    const b = buckets.get(key);
    if (b) b.push(i);
    else buckets.set(key, [i]);
  });
  const sequences: number[][] = [];
  const docIds: Int32Array[] = [];
  const pins: Uint8Array[] = [];
  const sources: RowSource[] = new Array(seqs.length);
  let tokensIn = 0;
  let tokensOut = 0;
  const alone = (i: number) => {
    const s = seqs[i]!;
    sources[i] = { seq: sequences.length, rows: Int32Array.from({ length: s.length - 1 }, (_, r) => r) };
    sequences.push([...s]);
    docIds.push(new Int32Array(s.length));
    pins.push(pinsOf(i) ?? new Uint8Array(s.length));
    tokensOut += s.length;
  };
  for (const members of buckets.values()) {
    for (const i of members) tokensIn += seqs[i]!.length;
    const first = seqs[members[0]!]!;
    // P: the common prefix, ending before the first trained token (so token P is untrained in every
    // member) and leaving every member at least one token of its own.
    let P = Infinity;
    for (const i of members) {
      const s = seqs[i]!;
      P = Math.min(P, commonPrefix(first, s, s.length - 1), firstTrained(masks[i]!));
      const a = pinsOf(members[0]!);
      const b = pinsOf(i);
      if (a || b) for (let t = 0; t < P; t++) if ((a?.[t] ?? 0) !== (b?.[t] ?? 0)) P = t;
    }
    if (members.length < 2 || P < MIN_SHARED_PREFIX) {
      members.forEach(alone);
      continue;
    }
    const seq = sequences.length;
    const tokens = first.slice(0, P);
    const ids: number[] = new Array<number>(P).fill(-1);
    const firstPins = pinsOf(members[0]!);
    const flags: number[] = Array.from({ length: P }, (_, t) => firstPins?.[t] ?? 0);
    members.forEach((i, d) => {
      const s = seqs[i]!;
      const offset = tokens.length; // packed index of token P of this member
      const rows = new Int32Array(s.length - 1);
      // prediction row r predicts token r + 1: prefix rows are shared; row P-1 exists for the first member
      for (let r = 0; r < s.length - 1; r++) {
        if (r < P - 1) rows[r] = r;
        else if (r === P - 1) rows[r] = d === 0 ? P - 1 : -1;
        else rows[r] = offset + (r - P);
      }
      sources[i] = { seq, rows };
      const own = pinsOf(i);
      for (let t = P; t < s.length; t++) {
        tokens.push(s[t]!);
        ids.push(d);
        flags.push(own?.[t] ?? 0);
      }
    });
    sequences.push(tokens);
    docIds.push(Int32Array.from(ids));
    pins.push(Uint8Array.from(flags));
    tokensOut += tokens.length;
  }
  // The packed rows any member trains on: the only log-probs the engine computes.
  const scored = sequences.map((s) => new Uint8Array(s.length - 1));
  sources.forEach(({ seq, rows }, i) => {
    const mask = masks[i]!;
    for (let r = 0; r < rows.length; r++) if (mask[r] && rows[r]! >= 0) scored[seq]![rows[r]!] = 1;
  });
  return {
    sequences,
    masks: { ...(sequences.length < seqs.length ? { docIds } : {}), scored, ...(anyPins ? { pinned: pins } : {}) },
    tokensIn,
    tokensOut,
    unpack(packed) {
      return sources.map(({ seq, rows }) => {
        const lp = packed[seq]!;
        return Float32Array.from(rows, (row) => (row < 0 ? 0 : lp[row]!));
      });
    },
    pack(d) {
      if (d.length !== sources.length) throw new Error(`prefix packing: ${d.length} gradient arrays for ${sources.length} sequences`);
      const out = sequences.map((s) => new Float32Array(s.length - 1));
      sources.forEach(({ seq, rows }, i) => {
        const di = d[i]!;
        if (di.length !== rows.length) throw new Error(`prefix packing: gradient ${i} has ${di.length} values, expected ${rows.length}`);
        for (let r = 0; r < rows.length; r++) {
          if (rows[r]! >= 0) out[seq]![rows[r]!]! += di[r]!;
          else if (di[r] !== 0) throw new Error(`prefix packing: the loss has a gradient on row ${r} of sequence ${i}, which packing cannot compute; its mask must be 0 there`);
        }
      });
      return out;
    },
  };
}

/**
 * engine.forwardBackward on the packed sequences; `loss` sees and returns the unpacked layout. `pinned`:
 * each sequence's pinned flags (per token), or undefined where it has none.
 */
export async function packedForwardBackward(
  engine: Engine, seqs: number[][], masks: readonly Uint8Array[], loss: TokenLoss, pinned?: readonly (Uint8Array | undefined)[],
): Promise<{ loss: number; metrics: Record<string, number> }> {
  const p = packSharedPrefixes(seqs, masks, pinned);
  const r = await engine.forwardBackward(p.sequences, (lps) => {
    const out = loss(p.unpack(lps));
    return { ...out, dLogprobs: p.pack(out.dLogprobs) };
  }, p.masks);
  return { loss: r.loss, metrics: { ...r.metrics, unpackedTokens: p.tokensIn } };
}
