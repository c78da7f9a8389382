/**
 * Which tokens of a sequence are pinned: the secondary (token) sinks of a SinkProfile, kept by every later
 * query like a sink slot, up to a budget per sequence. One rule, read by both sides of a run:
 * - rollouts call `pinFlags` on every chunk of tokens they append to an engine session
 *   (`session.append(tokens, { pinned })`), so the session never evicts those keys;
 * - the trainer scores the same tokens with the same flags (the engine's `pinned` masks), recorded with
 *   the trajectory, or recomputed by `sequencePins` from the tokens and which of them were sampled.
 *
 * The rule: a token is pinned when its id is one of the rule's token ids, it lies past the sink slots
 * (position >= `slots`; the slots are kept anyway), it was appended (sampled tokens are never pinned:
 * an engine session's `sample` takes no flags), and fewer than `budget` tokens of the sequence were
 * pinned before it. First come, first pinned: the flags of a prefix do not depend on what follows it,
 * so appending a sequence in any number of chunks (a shared prompt, then each turn) gives the flags of
 * appending it whole.
 *
 * This file decides flags only; it runs no model and holds no cache.
 */
import { MaskError } from "./mask.js";

/** The pin rule of a run's layout (see `profileLayout`): plain data, so it can be logged and compared. */
export interface SinkPinRule {
  /** Token ids that are pinned wherever they occur (the profile's secondary sinks), ascending. */
  tokenIds: number[];
  /** Most pinned tokens per sequence. */
  budget: number;
  /** Positions below this are sink slots (kept without a pin): never pinned. */
  slots: number;
}

/** Checks a rule's fields (a rule read from a file or built by hand). */
export function checkPinRule(rule: SinkPinRule): SinkPinRule {
  if (!(Number.isInteger(rule.budget) && rule.budget >= 0)) throw new MaskError(`pin budget must be an integer >= 0, got ${rule.budget}`);
  if (!(Number.isInteger(rule.slots) && rule.slots >= 0)) throw new MaskError(`pin rule slots must be an integer >= 0, got ${rule.slots}`);
  for (const t of rule.tokenIds) if (!(Number.isInteger(t) && t >= 0)) throw new MaskError(`pin rule token id ${t} is not a token id (an integer >= 0)`);
  return rule;
}

/**
 * The pinned flags of `tokens` appended at position `start` of a sequence that has `pinnedBefore` pinned
 * tokens before them: [tokens.length], 1 = pinned.
 */
export function pinFlags(rule: SinkPinRule, tokens: readonly number[], start: number, pinnedBefore: number): Uint8Array {
  const out = new Uint8Array(tokens.length);
  if (rule.budget === 0 || rule.tokenIds.length === 0) return out;
  const ids = new Set(rule.tokenIds);
  let used = pinnedBefore;
  for (let i = 0; i < tokens.length && used < rule.budget; i++) {
    if (start + i >= rule.slots && ids.has(tokens[i]!)) {
      out[i] = 1;
      used++;
    }
  }
  return out;
}

/**
 * The pinned flags of a whole sequence: what a rollout that appended every token with `sampled[i]` 0 and
 * sampled the others recorded (`sampled` omitted: every token appended). [tokens.length].
 */
export function sequencePins(rule: SinkPinRule, tokens: readonly number[], sampled?: ArrayLike<number>): Uint8Array {
  if (sampled && sampled.length !== tokens.length) throw new MaskError(`sequencePins: ${sampled.length} sampled flags for ${tokens.length} tokens`);
  const out = new Uint8Array(tokens.length);
  let used = 0;
  let i = 0;
  while (i < tokens.length) {
    if (sampled?.[i]) {
      i++;
      continue;
    }
    let j = i;
    while (j < tokens.length && !sampled?.[j]) j++;
    const flags = pinFlags(rule, tokens.slice(i, j), i, used);
    out.set(flags, i);
    for (const f of flags) used += f;
    i = j;
  }
  return out;
}

/** The number of pinned flags. */
export function countPins(flags: ArrayLike<number>): number {
  let n = 0;
  for (let i = 0; i < flags.length; i++) n += flags[i] ? 1 : 0;
  return n;
}
