/**
 * The sink layout a model's SinkProfile gives the pipeline (`attention.mode: profile`): the sink-window
 * settings its policy trains and samples with, and which of the profile's sinks they keep.
 *
 * The rewriter (rewriter.ts) lays documents out with K sink slots plus pinned secondary sinks; the layout
 * does the same for a run's rollouts and training, which share one budget of `pinBudget` per sequence:
 * - the sink slots cover the profile's position sinks, up to `sinks + pinBudget` slots (a position sink
 *   at p needs slots 0..p), and hold the model's natural prefix, the tokens every rendered sequence
 *   starts with; position sinks past that budget are listed as not kept;
 * - what the slots leave of the budget pins the profile's token sinks (secondary sinks such as a
 *   delimiter or a chat-template special token) wherever they occur past the slots, first come first
 *   pinned (pins.ts): rollouts append them to engine sessions with `append(tokens, { pinned })` and the
 *   trainer scores with the same flags. With no budget left they are listed as not pinned.
 *
 * This file decides settings only; it runs no model and holds no cache.
 */
import { checkMaskConfig, MaskError, type SinkWindow } from "./mask.js";
import type { SinkPinRule } from "./pins.js";
import { secondarySinkTokens, sinkPositions, type SinkProfile } from "./profile.js";

export interface ProfileLayoutConfig extends SinkWindow {
  /** Slots beyond `sinks` the layout may add to cover the profile's position sinks. */
  pinBudget: number;
}

export interface ProfileLayout {
  /** The settings the policy runs with: the window, and K' = sinks plus the slots the position sinks need. */
  attention: SinkWindow;
  /** [K'] the token ids the sink slots hold: the profile's natural prefix. */
  slotTokens: number[];
  /** Position sinks inside the slots. */
  keptPositions: number[];
  /** Position sinks past `sinks + pinBudget` (the mask does not keep them). */
  droppedPositions: number[];
  /** Token sinks (secondary, not tied to a position) pinned wherever they occur, up to `pins.budget` per sequence. */
  pinnedTokens: number[];
  /** Token sinks not pinned: the slots took the whole budget (none otherwise). */
  unpinnedTokens: number[];
  /** The rule rollouts and training pin with (pins.ts): `pinnedTokens`, the budget the slots leave, past the slots. */
  pins: SinkPinRule;
}

/** The layout of `profile` under `cfg` (see the file comment); the window must exceed the sink slots. */
export function profileLayout(profile: SinkProfile, cfg: ProfileLayoutConfig): ProfileLayout {
  const { sinks, window } = checkMaskConfig(cfg);
  if (!(Number.isInteger(cfg.pinBudget) && cfg.pinBudget >= 0)) throw new MaskError(`pinBudget must be an integer >= 0, got ${cfg.pinBudget}`);
  const positions = sinkPositions(profile);
  const limit = sinks + cfg.pinBudget;
  const keptPositions = positions.filter((p) => p < limit);
  const droppedPositions = positions.filter((p) => p >= limit);
  const K = Math.max(sinks, ...keptPositions.map((p) => p + 1));
  if (window > 0 && window <= K) {
    throw new MaskError(
      `the window (${window}) must be larger than the sink slots (${K}: attention.sinks ${sinks}` +
        `${K > sinks ? ` raised to cover the profile's position sinks ${keptPositions.join(", ")}` : ""}); raise attention.window above ${K} or lower attention.sinks / attention.pinBudget`,
    );
  }
  if (K > profile.prefix.length) {
    throw new MaskError(`the layout needs ${K} sink slots, but the profile records a natural prefix of only ${profile.prefix.length} tokens; probe again with a longer prefix or lower attention.sinks`);
  }
  const tokenSinks = secondarySinkTokens(profile).map((t) => t.tokenId);
  const budget = cfg.pinBudget - (K - sinks);
  const pinnedTokens = budget > 0 ? tokenSinks : [];
  return {
    attention: { window, sinks: K },
    slotTokens: profile.prefix.slice(0, K),
    keptPositions,
    droppedPositions,
    pinnedTokens,
    unpinnedTokens: budget > 0 ? [] : tokenSinks,
    pins: { tokenIds: [...pinnedTokens].sort((a, b) => a - b), budget: pinnedTokens.length ? budget : 0, slots: K },
  };
}

/** One line on what a layout keeps, for a run's log. */
export function describeLayout(l: ProfileLayout): string {
  const parts = [`window ${l.attention.window}, ${l.attention.sinks} sink slots holding tokens [${l.slotTokens.join(", ")}]`];
  parts.push(l.keptPositions.length ? `position sinks ${l.keptPositions.join(", ")} kept in the slots` : "no position sink found");
  if (l.droppedPositions.length) parts.push(`position sinks ${l.droppedPositions.join(", ")} past the slot budget, not kept`);
  if (l.pinnedTokens.length) {
    parts.push(`token sinks ${l.pinnedTokens.map((t) => `#${t}`).join(", ")} pinned where they occur, up to ${l.pins.budget} per sequence`);
  }
  if (l.unpinnedTokens.length) {
    parts.push(`token sinks ${l.unpinnedTokens.map((t) => `#${t}`).join(", ")} not pinned (the sink slots took the whole pin budget)`);
  }
  return parts.join("; ");
}
