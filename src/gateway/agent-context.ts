/**
 * What an agent is given for one episode played through a gateway session: the task (the env's opening
 * conversation and tools in the OpenAI wire format), the base URL and key for its OpenAI client, and
 * the session's tools over HTTP. A program gets the same as environment variables (`agentEnvironment`);
 * a TypeScript agent gets it as `AgentContext`. This file holds the shapes and the small HTTP client of
 * the tools; it does not run agents (the pipeline does: src/pipeline/stages/agent-rollouts.ts).
 */
import type { ChatMessage, ToolSpec } from "../core/index.js";

/** An OpenAI chat message as an agent sends it back (`tool_call_id`, `tool_calls`). */
export type WireMessage = Record<string, unknown> & { role: string; content: string };

/** The task an agent plays (`SINKFLEX_TASK`): the env's opening messages and tools, OpenAI-shaped. */
export interface AgentTask {
  messages: WireMessage[];
  tools: { type: "function"; function: ToolSpec }[];
  suite: string;
  envId: string;
  taskIndex: number | undefined;
  seed: number | undefined;
  /** Which of the group's episodes this is (0 .. G-1). */
  episode: number;
  /** POST `<toolsURL>/<name>` with the arguments object calls a tool. */
  toolsURL: string;
  /** POST `<sessionURL>/reward` with {reward, info?} sets the reward (suites whose `agent.reward` is "agent"). */
  sessionURL: string;
}

/** A tool's answer as the gateway returns it. */
export interface AgentToolResult {
  content: string;
  isError: boolean;
  reward: number;
  terminated: boolean;
  truncated: boolean;
}

export interface AgentTools {
  /** The tools, OpenAI-shaped (as `task.tools`). */
  specs: AgentTask["tools"];
  call(name: string, args: unknown): Promise<AgentToolResult>;
  /** Posts the episode's reward (suites whose reward is the agent's). */
  reward(reward: number, info?: Record<string, unknown>): Promise<void>;
}

export interface AgentContext {
  /** The OpenAI base URL of the episode's session (…/sessions/<id>/v1). */
  baseURL: string;
  apiKey: string;
  task: AgentTask;
  tools: AgentTools;
  /** Aborted when the episode's time is up: stop calling. */
  signal: AbortSignal;
}

/** A TypeScript agent: plays one episode through `ctx` and resolves when it is done. */
export type AgentFunction = (ctx: AgentContext) => Promise<void>;

/** The messages of an env's opening conversation in the OpenAI wire format. */
export function wireMessages(messages: ChatMessage[]): WireMessage[] {
  return messages.map((m) => {
    if (m.role === "tool") return { role: "tool", tool_call_id: m.toolCallId, content: m.content };
    if (m.role === "assistant") {
      return {
        role: "assistant",
        content: m.content,
        ...(m.toolCalls?.length ? { tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) } : {}),
      };
    }
    return { role: m.role, content: m.content };
  });
}

/** The environment variables a program agent is started with. */
export function agentEnvironment(ctx: Omit<AgentContext, "tools" | "signal">): Record<string, string> {
  return {
    OPENAI_BASE_URL: ctx.baseURL,
    OPENAI_API_KEY: ctx.apiKey,
    SINKFLEX_TASK: JSON.stringify(ctx.task),
    SINKFLEX_TOOLS_URL: ctx.task.toolsURL,
    SINKFLEX_SESSION_URL: ctx.task.sessionURL,
  };
}

/** The session's tools over HTTP, as a TypeScript agent gets them. */
export function agentTools(task: AgentTask, apiKey: string, signal?: AbortSignal): AgentTools {
  const headers = { authorization: `Bearer ${apiKey}`, "content-type": "application/json" };
  const post = async (url: string, body: unknown): Promise<unknown> => {
    const r = await fetch(url, { method: "POST", headers, body: JSON.stringify(body), signal });
    const json = (await r.json()) as { error?: { message: string } };
    if (!r.ok) throw new Error(`${url}: ${r.status} ${json.error?.message ?? ""}`);
    return json;
  };
  return {
    specs: task.tools,
    call: async (name, args) => (await post(`${task.toolsURL}/${encodeURIComponent(name)}`, args)) as AgentToolResult,
    reward: async (reward, info) => void (await post(`${task.sessionURL}/reward`, { reward, ...(info ? { info } : {}) })),
  };
}
