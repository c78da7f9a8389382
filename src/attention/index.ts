/**
 * Sink-normalized attention: the probe and its SinkProfile, the canonical mask description (and the
 * sink-window settings, `SinkWindow`, with their checkpoint file), the
 * rewriter, the masked (evicting) KV session, and the learnable per-head sink logit. This file only
 * re-exports the module's public API.
 */
export {
  canonicalMask, checkMaskConfig, documentPositions, keeps, keptKeys, keyBound, MaskError, type CanonicalMask, type SinkWindow,
} from "./mask.js";
export {
  ATTENTION_MODES, describeSinkWindow, parseSinkWindowRecord, resolveSinkWindow, SINK_PROFILE_FILE, SINK_WINDOW_FILE, SINK_WINDOW_FORMAT,
  sinkWindowOf, sinkWindowRecord, type AttentionChoice, type AttentionMode,
} from "../model/index.js";
export {
  checkProfileFits, formatProfile, parseProfile, ProfileError, profileChanges, readProfile, secondarySinkTokens, sinkPositions, SINK_PROFILE_FORMAT, writeProfile,
  type LayerSinks, type PositionSink, type SinkProfile, type TokenSink,
} from "./profile.js";
export { checkPinRule, countPins, pinFlags, sequencePins, type SinkPinRule } from "./pins.js";
export { describeLayout, profileLayout, type ProfileLayout, type ProfileLayoutConfig } from "./layout.js";
export { attentionMass, ProbeError, probeSinks, type ProbeOptions } from "./probe.js";
export { rewriteForSinks, sinkSlotTokens, type RewriterConfig, type RewrittenSequence } from "./rewriter.js";
export { MaskedSession, type AppendOptions, type MaskedSessionOptions } from "./session.js";
export {
  initSinkLogits, maxLogitDifference, minRowLse, sequenceLogits, SinkLogitError, withSinkLogits,
  type SinkInitResult,
} from "./sink-logit.js";
