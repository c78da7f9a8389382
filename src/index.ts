/**
 * The public API of sinkflex: each module adds one re-export line here.
 */
export * from "./tools/index.js";
export * from "./engine/index.js";
export * from "./rollout/index.js";
export * from "./serve/index.js";
