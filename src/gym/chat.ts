/**
 * The chat types (messages, tool calls, tool specs, the tool environment's action and observation), kept
 * importable from the gym for compatibility. They are defined in src/core/chat.ts; this file only
 * re-exports them.
 */
export type {
  AgentTurn, AssistantMessage, ChatMessage, ChatObservation, JsonSchema, SystemMessage, ToolCall, ToolMessage, ToolSpec,
  UserMessage,
} from "../core/chat.js";
