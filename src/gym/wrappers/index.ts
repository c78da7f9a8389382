/**
 * The gym's wrappers, each changing one thing. This file only re-exports them.
 */
export { Wrapper } from "./wrapper.js";
export { TimeLimit } from "./time-limit.js";
export { RecordEpisodeStatistics, type EpisodeStatistics } from "./record-episode-statistics.js";
export { OrderEnforcing } from "./order-enforcing.js";
export { TokenBudget, countObservationChars, type TokenCounter } from "./token-budget.js";
