/**
 * sinkflex's core: the plain data and small utilities every module shares, with no dependency on any
 * other part of sinkflex (every module may import it; it imports none of them). Chat messages, tool
 * calls and tool specs; the seeded random generator; seed mixing. This file only re-exports.
 */
export type {
  AgentTurn, AssistantMessage, ChatMessage, ChatObservation, JsonSchema, SystemMessage, ToolCall, ToolMessage, ToolSpec,
  UserMessage,
} from "./chat.js";
export { Rng, RNG_GENERATORS, type RngGenerator } from "./rng.js";
export { mixSeed, mixSeedParts } from "./seed.js";
