/**
 * An environment owned by one gateway session, its tools callable over plain HTTP
 * (`POST /sessions/<id>/tools/<name>`): each call steps the env with one assistant turn holding that one
 * tool call, so an external agent drives the same env, with the same tools and verifier, as the built-in
 * agent loop would. When the agent is done, `finish` hands the env the agent's last reply (a turn
 * without tool calls, the way the agent loop ends an episode) unless the env already ended, so that the
 * env's verifier scores the episode the agent played.
 *
 * It does not make or reset envs (the caller does, and passes the reset observation) and knows no HTTP.
 */
import type { AgentTurn, ChatMessage, ChatObservation, ToolSpec } from "../core/index.js";
import type { Env, Info } from "../gym/index.js";

export interface ToolResult {
  /** The tool's answer as the agent reads it (the env's tool message, or its error text). */
  content: string;
  isError: boolean;
  /** Every message the env answered with (tool results, a user's reply). */
  messages: ChatMessage[];
  reward: number;
  terminated: boolean;
  truncated: boolean;
}

/**
 * Refused tool calls: arguments that are not a JSON object, or a call after the episode ended. (An
 * unknown tool goes to the env, which answers with an error observation, as in the agent loop.)
 */
export class ToolCallRefused extends Error {
  constructor(
    message: string,
    readonly status: 400 | 409,
  ) {
    super(message);
  }
}

export class EnvTools {
  /** The opening conversation and the tools, as the env's reset showed them. */
  readonly first: ChatObservation;
  readonly tools: ToolSpec[];
  info: Info;
  /** Summed step rewards. */
  reward = 0;
  terminated = false;
  truncated = false;
  /** Tool calls made, in order, and the env's answers (what the agent's env saw). */
  readonly steps: { name: string; arguments: string; result: ToolResult }[] = [];
  private queue: Promise<unknown> = Promise.resolve();
  private counter = 0;

  constructor(
    readonly env: Env<ChatObservation, AgentTurn>,
    reset: [ChatObservation, Info],
  ) {
    this.first = reset[0];
    this.tools = reset[0].tools ?? [];
    this.info = reset[1];
  }

  get ended(): boolean {
    return this.terminated || this.truncated;
  }

  /** Calls one tool (steps are ordered: calls of one session wait for the ones before). */
  call(name: string, args: unknown): Promise<ToolResult> {
    const run = this.queue.then(() => this.callNow(name, args));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async callNow(name: string, args: unknown): Promise<ToolResult> {
    if (this.ended) throw new ToolCallRefused(`the episode has ended (${this.terminated ? "terminated" : "truncated"}); no more tool calls, end the agent`, 409);
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      throw new ToolCallRefused(`the body must be the tool's arguments as a JSON object, got ${JSON.stringify(args)}`, 400);
    }
    const id = `tool_${++this.counter}`;
    const argText = JSON.stringify(args);
    const [obs, reward, terminated, truncated, info] = await this.env.step({ content: "", toolCalls: [{ id, name, arguments: argText }] });
    this.absorb(reward, terminated, truncated, info);
    const answer = obs.messages.find((m) => m.role === "tool" && m.toolCallId === id) ?? obs.messages[0];
    const result: ToolResult = {
      content: answer?.content ?? "",
      isError: answer?.role === "tool" && answer.isError === true,
      messages: obs.messages,
      reward,
      terminated,
      truncated,
    };
    this.steps.push({ name, arguments: argText, result });
    return result;
  }

  /** Ends the episode with the agent's last reply when the env has not ended it; returns whether the env ended. */
  async finish(lastReply: string): Promise<boolean> {
    await this.queue;
    if (this.ended) return true;
    const [, reward, terminated, truncated, info] = await this.env.step({ content: lastReply, toolCalls: [] });
    this.absorb(reward, terminated, truncated, info);
    return this.ended;
  }

  private absorb(reward: number, terminated: boolean, truncated: boolean, info: Info): void {
    this.reward += reward;
    this.terminated ||= terminated;
    this.truncated ||= truncated;
    this.info = info;
  }
}
