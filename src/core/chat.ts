/**
 * Chat messages, tool calls and tool specs: the plain data that tool environments, chat templates, the
 * rollout renderer, the trainer and the server exchange.
 *
 * It lives in the core (below every module) so that the model's chat template and the gym's environments
 * share it without either importing the other. It is plain JSON-serializable data; it is not tied to any
 * model's chat template or tokenizer, and it holds no behaviour.
 */

/** A JSON Schema object (draft 2020-12 subset as used by OpenAI function tools). */
export type JsonSchema = Record<string, unknown>;

/** A tool as an agent sees it: the OpenAI "function" tool shape, without the wrapper. */
export interface ToolSpec {
  name: string;
  description: string;
  parameters: JsonSchema;
}

/**
 * One tool call made by the agent. `arguments` is the raw JSON text the model produced (it may be
 * malformed: the environment parses it and answers with an error observation when it is not valid).
 */
export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface SystemMessage {
  role: "system";
  content: string;
}
export interface UserMessage {
  role: "user";
  content: string;
}
export interface AssistantMessage {
  role: "assistant";
  content: string;
  toolCalls?: ToolCall[];
  /**
   * 0: part of the conversation but never trained on (a demonstrated mistake the following turns
   * recover from), as `weight` in OpenAI's fine-tuning format. Absent: trained on.
   */
  weight?: 0;
}
export interface ToolMessage {
  role: "tool";
  toolCallId: string;
  name: string;
  content: string;
  /** True when the content is an error the agent should read and recover from. */
  isError?: boolean;
}
export type ChatMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage;

/** The action of a tool environment: one assistant turn, its text and its tool calls. */
export interface AgentTurn {
  content: string;
  toolCalls: ToolCall[];
}

/**
 * The observation of a tool environment. On `reset` it holds the whole opening conversation (system
 * prompt, first user message) and the tools; on `step` it holds only the new messages (tool results,
 * the user's reply), so that a renderer can extend the previous turn instead of re-rendering it.
 */
export interface ChatObservation {
  messages: ChatMessage[];
  tools?: ToolSpec[];
}
