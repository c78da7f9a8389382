/**
 * The sink layout a model's SinkProfile gives the pipeline (`attention.mode: profile`): the sink-window
 * settings its policy trains and samples with, and which of the profile's sinks they keep.
 *
 * The rewriter (rewriter.ts) lays documents out with K sink slots plus pinned secondary sinks. The
 * engine's sessions, which rollouts sample with, keep K leading slots, the window and any positions
 * pinned with `append(tokens, { pinned })`, but the rollout path pins nothing (its renderer does not know
 * the profile), so what is exact on both sides is this: the sink slots cover the profile's position
 * sinks, up to `sinks + pinBudget` slots (a position sink at p needs slots 0..p), and hold the model's
 * natural prefix, the tokens every rendered sequence starts with. Position sinks past that budget and
 * token sinks at arbitrary positions are listed as not kept.
 *
 * This file decides settings only; it runs no model and holds no cache.
 */
import { checkMaskConfig, MaskError, type SinkWindow } from "./mask.js";
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
  /** Token sinks (secondary, not tied to a position): engine sessions cannot pin them. */
  unpinnedTokens: number[];
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
  return {
    attention: { window, sinks: K },
    slotTokens: profile.prefix.slice(0, K),
    keptPositions,
    droppedPositions,
    unpinnedTokens: secondarySinkTokens(profile).map((t) => t.tokenId),
  };
}

/** One line on what a layout keeps, for a run's log. */
export function describeLayout(l: ProfileLayout): string {
  const parts = [`window ${l.attention.window}, ${l.attention.sinks} sink slots holding tokens [${l.slotTokens.join(", ")}]`];
  parts.push(l.keptPositions.length ? `position sinks ${l.keptPositions.join(", ")} kept in the slots` : "no position sink found");
  if (l.droppedPositions.length) parts.push(`position sinks ${l.droppedPositions.join(", ")} past the slot budget, not kept`);
  if (l.unpinnedTokens.length) {
    parts.push(`token sinks ${l.unpinnedTokens.map((t) => `#${t}`).join(", ")} not pinned (rollouts pin no positions)`);
  }
  return parts.join("; ");
}
