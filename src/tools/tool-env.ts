/**
 * ToolEnv: a set of tools plus a task set, as an `Env<ChatObservation, AgentTurn>`.
 *
 * The action is one assistant turn (text and tool calls). Each tool call is parsed, checked against
 * its schema and run with a timeout; the observation is the tool results, or — when the turn has no
 * tool calls — the user's reply (from the `respond` hook, e.g. a user simulator). Nothing the agent
 * sends can crash the episode: malformed JSON, an unknown tool, arguments that fail the schema, a tool
 * that throws or hangs all come back as error observations and are recorded in `info.toolErrors`.
 *
 * The suite supplies hooks: `open` (a fresh per-episode state and the opening messages), `respond`,
 * `score` (the verifiable reward and its evidence) and `dispose`; optionally `expert` (a scripted
 * expert whose episodes are SFT demonstrations) and `taskKey` (what tells tasks apart when they differ
 * only in hidden state). This file knows no particular suite.
 */
import type { AgentTurn, ChatMessage, ChatObservation, ToolMessage } from "../gym/index.js";
import { EnvContractError, type Env, type EnvMetadata, type Info, type ResetArgs, type ResetResult, type StepResult } from "../gym/index.js";
import { Rng } from "../gym/index.js";
import { ChatSpace, ToolCallSpace } from "../gym/index.js";
import { toolSpec, type Tool } from "./tool.js";
import { signature, validateArguments } from "./validate.js";

export interface TaskSet<Task> {
  readonly size: number;
  get(index: number): Task;
}

export interface Episode<Task, State> {
  task: Task;
  taskIndex: number;
  state: State;
  rng: Rng;
  /** The whole conversation so far, opening messages included. */
  messages: ChatMessage[];
  /** Set when a tool or the user ended the episode. */
  finishReason?: string;
}

export interface Score {
  reward: number;
  /** Why: compared states, expected and given answers, ... Shown in `info.evidence`. */
  evidence: Record<string, unknown>;
}

/**
 * A scripted expert for one episode: sees the observations, returns assistant turns. Its successful
 * episodes (reward 1) are the SFT demonstrations of `sft.expertEpisodes`.
 */
export interface Expert {
  act(obs: ChatObservation): AgentTurn | Promise<AgentTurn>;
  /**
   * Optional: a wrong action a learner typically makes in the current state, one the env answers
   * without changing anything (so the expert's next `act` still holds), or undefined when there is
   * none. Expert episodes with mistakes (`runExpertEpisode`'s `mistakes`) show recoveries.
   */
  mistake?(rng: Rng): AgentTurn | undefined;
}

export interface ToolEnvHooks<Task, State> {
  /** Class-style name used when printing wrapper stacks, e.g. "RetailEnv". */
  name: string;
  tasks: TaskSet<Task>;
  tools: Tool<any, State>[];
  /** Creates a fresh, isolated per-episode state and the opening messages (system prompt, first user turn). */
  open(task: Task, rng: Rng, options: Record<string, unknown>): Promise<{ state: State; messages: ChatMessage[] }>;
  /**
   * Called for a turn without tool calls (a message to the user). Returns the user's reply; `done`
   * ends the episode. Without this hook, such a turn is the agent's final answer and ends the episode.
   */
  respond?(episode: Episode<Task, State>, turn: AgentTurn): Promise<{ messages: ChatMessage[]; done: boolean }>;
  /** The verifiable reward, computed once when the episode terminates. */
  score(episode: Episode<Task, State>): Promise<Score>;
  /**
   * Partial progress toward the goal in [0, 1] (1 exactly when solved), reported as `info.progress`
   * after every step, so that an episode the agent loop cuts short still has it. For reward rubrics.
   */
  progress?(episode: Episode<Task, State>): number;
  /**
   * Optional: a fresh scripted expert for an episode of `task`. With it, training plays expert episodes
   * as SFT data (`sft.expertEpisodes`); without it (and without a registered suite for the env), an env
   * trains from demonstrations in `sft.data` only.
   */
  expert?(task: Task): Expert;
  /**
   * Optional: what tells `task` apart from the other tasks (any JSON value; equal keys mean the same
   * task). The held-out split keeps tasks with equal keys on one side and holds out distinct ones. By
   * default a task is its opening messages and tools, which is wrong for tasks that differ only in
   * hidden state (a database, a random seed the agent must discover): give those a key.
   */
  taskKey?(task: Task): unknown;
  /** Releases the per-episode state. */
  dispose?(state: State): Promise<void> | void;
  /** Extra metadata for `envs list` and the registry. */
  metadata?: EnvMetadata;
  /** Default per-call timeout (ms); 10 s when absent. */
  toolTimeoutMs?: number;
  /** Maximum characters of one tool result shown to the agent (longer ones are cut, and say so); 20,000 by default. */
  maxResultChars?: number;
}

export interface ToolError {
  callId: string;
  tool: string;
  kind: "malformed_json" | "unknown_tool" | "invalid_arguments" | "tool_error" | "timeout";
  message: string;
}

export class ToolEnv<Task = unknown, State = unknown> implements Env<ChatObservation, AgentTurn> {
  readonly observationSpace = new ChatSpace();
  readonly actionSpace: ToolCallSpace;
  readonly metadata: EnvMetadata;
  private episode: Episode<Task, State> | undefined;
  private done = false;
  private closed = false;
  private readonly toolsByName: Map<string, Tool<any, State>>;
  private abort = new AbortController();

  constructor(readonly hooks: ToolEnvHooks<Task, State>) {
    this.toolsByName = new Map(hooks.tools.map((t) => [t.name, t]));
    this.actionSpace = new ToolCallSpace(hooks.tools.map((t) => t.name));
    this.metadata = { taskCount: hooks.tasks.size, ...hooks.metadata, ...(hooks.progress ? { reportsProgress: true } : {}) };
  }

  /**
   * Task `index`'s key (the `taskKey` hook's value as JSON), or undefined when the env has no such hook
   * (its opening messages and tools tell its tasks apart).
   */
  taskKey(index: number): string | undefined {
    if (!this.hooks.taskKey) return undefined;
    const key = this.hooks.taskKey(this.hooks.tasks.get(index));
    return typeof key === "string" ? key : JSON.stringify(key ?? null);
  }

  /** The current episode (task, state, conversation), for verifiers and tests. */
  get current(): Episode<Task, State> | undefined {
    return this.episode;
  }

  async reset(args: ResetArgs = {}): Promise<ResetResult<ChatObservation>> {
    if (this.closed) throw new EnvContractError(`${this}: reset after close`);
    await this.disposeEpisode();
    const options = args.options ?? {};
    const seed = args.seed ?? Math.floor(Math.random() * 2 ** 31);
    const rng = new Rng(seed);
    const size = this.hooks.tasks.size;
    if (size === 0) throw new Error(`${this}: the task set is empty`);
    const requested = options.taskIndex;
    if (requested !== undefined && (!Number.isInteger(requested) || (requested as number) < 0 || (requested as number) >= size)) {
      throw new RangeError(`${this}: options.taskIndex must be an integer in [0, ${size - 1}], got ${JSON.stringify(requested)}`);
    }
    const taskIndex = (requested as number | undefined) ?? rng.int(size);
    const task = this.hooks.tasks.get(taskIndex);
    this.abort = new AbortController();
    const { state, messages } = await this.hooks.open(task, rng, options);
    this.episode = { task, taskIndex, state, rng, messages: [...messages] };
    this.done = false;
    const tools = this.hooks.tools.map(toolSpec);
    return [{ messages, tools }, { taskIndex, seed, ...this.progressInfo(this.episode) }];
  }

  async step(action: AgentTurn): Promise<StepResult<ChatObservation>> {
    const episode = this.episode;
    if (this.closed) throw new EnvContractError(`${this}: step after close`);
    if (!episode) throw new EnvContractError(`${this}: step before reset; call reset() first`);
    if (this.done) throw new EnvContractError(`${this}: step after the episode ended; call reset() to start a new one`);
    if (!this.actionSpace.contains(action)) {
      // The action is not even a turn: report it to the agent as a readable error, as a turn with no effect.
      const message: ChatMessage = {
        role: "user",
        content:
          "Error: the action is not a valid assistant turn. Expected {content: string, toolCalls: [{id, name, arguments: JSON string}]}.",
      };
      episode.messages.push(message);
      return [{ messages: [message] }, 0, false, false, { toolErrors: [{ callId: "", tool: "", kind: "malformed_json", message: message.content }] }];
    }
    episode.messages.push({ role: "assistant", content: action.content, toolCalls: action.toolCalls });

    const info: Info = {};
    const out: ChatMessage[] = [];
    if (action.toolCalls.length > 0) {
      const errors: ToolError[] = [];
      for (const call of action.toolCalls) {
        const result = await this.runCall(episode, call.id, call.name, call.arguments, errors);
        out.push(result);
        if (episode.finishReason) break;
      }
      if (errors.length > 0) info.toolErrors = errors;
    } else if (this.hooks.respond) {
      const reply = await this.hooks.respond(episode, action);
      out.push(...reply.messages);
      if (reply.done && !episode.finishReason) episode.finishReason = "user_done";
    } else {
      episode.finishReason = "final_answer";
    }
    episode.messages.push(...out);
    Object.assign(info, this.progressInfo(episode));

    let reward = 0;
    const terminated = episode.finishReason !== undefined;
    if (terminated) {
      this.done = true;
      info.finishReason = episode.finishReason;
      try {
        const score = await this.hooks.score(episode);
        reward = score.reward;
        info.evidence = score.evidence;
      } catch (err) {
        // A verifier that fails is recorded, never silently scored.
        info.rewardError = err instanceof Error ? err.message : String(err);
      }
    }
    return [{ messages: out }, reward, terminated, false, info];
  }

  /** `info.progress` (or `info.progressError`) for envs with a progress hook; nothing for the others. */
  private progressInfo(episode: Episode<Task, State>): Info {
    if (!this.hooks.progress) return {};
    try {
      return { progress: this.hooks.progress(episode) };
    } catch (err) {
      return { progressError: err instanceof Error ? err.message : String(err) };
    }
  }

  private async runCall(episode: Episode<Task, State>, id: string, name: string, rawArgs: string, errors: ToolError[]): Promise<ToolMessage> {
    const fail = (kind: ToolError["kind"], message: string): ToolMessage => {
      errors.push({ callId: id, tool: name, kind, message });
      return { role: "tool", toolCallId: id, name, content: `Error: ${message}`, isError: true };
    };
    const tool = this.toolsByName.get(name);
    if (!tool) {
      const shown = name.length > 80 ? `${name.slice(0, 80)}...` : name;
      return fail("unknown_tool", `unknown tool "${shown}". Available tools: ${[...this.toolsByName.keys()].join(", ")}.`);
    }
    let args: unknown;
    try {
      args = rawArgs.trim() === "" ? {} : JSON.parse(rawArgs);
    } catch (err) {
      return fail("malformed_json", `the arguments of "${name}" are not valid JSON (${(err as Error).message}). Send a JSON object matching the tool's parameters: ${signature(name, tool.parameters)}.`);
    }
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      return fail("invalid_arguments", `the arguments of "${name}" must be a JSON object, got ${args === null ? "null" : Array.isArray(args) ? "an array" : typeof args}. Expected: ${signature(name, tool.parameters)}.`);
    }
    const valid = validateArguments(tool.parameters, args);
    if (!valid.ok) return fail("invalid_arguments", `invalid arguments for "${name}": ${valid.message}. Expected: ${signature(name, tool.parameters)}.`);

    const timeoutMs = tool.timeoutMs ?? this.hooks.toolTimeoutMs ?? 10_000;
    const controller = new AbortController();
    const onEpisodeAbort = () => controller.abort();
    this.abort.signal.addEventListener("abort", onEpisodeAbort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          controller.abort();
          reject(new ToolTimeout(`"${name}" did not finish within ${timeoutMs} ms`));
        }, timeoutMs);
      });
      const ctx = {
        state: episode.state,
        signal: controller.signal,
        finish: (reason: string) => {
          episode.finishReason = reason;
        },
      };
      const result = await Promise.race([Promise.resolve().then(() => tool.execute(args, ctx)), timeout]);
      return { role: "tool", toolCallId: id, name, content: this.clip(formatResult(result)) };
    } catch (err) {
      if (err instanceof ToolTimeout) return fail("timeout", `${err.message}; try a smaller request.`);
      return fail("tool_error", `"${name}" failed: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      clearTimeout(timer);
      this.abort.signal.removeEventListener("abort", onEpisodeAbort);
    }
  }

  private clip(text: string): string {
    const max = this.hooks.maxResultChars ?? 20_000;
    if (text.length <= max) return text;
    return `${text.slice(0, max)}\n[output truncated: ${text.length - max} more characters]`;
  }

  render(): string {
    if (!this.episode) return `${this}: not started`;
    return this.episode.messages
      .map((m) => {
        if (m.role === "assistant") {
          const calls = (m.toolCalls ?? []).map((c) => `  -> ${c.name}(${c.arguments})`).join("\n");
          return `[assistant] ${m.content}${calls ? `\n${calls}` : ""}`;
        }
        if (m.role === "tool") return `[tool ${m.name}] ${m.content}`;
        return `[${m.role}] ${m.content}`;
      })
      .join("\n");
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.disposeEpisode();
  }

  private async disposeEpisode(): Promise<void> {
    this.abort.abort();
    if (this.episode && this.hooks.dispose) await this.hooks.dispose(this.episode.state);
    this.episode = undefined;
  }

  toString(): string {
    return this.metadata.id ? `${this.hooks.name}<${this.metadata.id}>` : this.hooks.name;
  }
}

class ToolTimeout extends Error {}

export function formatResult(result: unknown): string {
  if (typeof result === "string") return result;
  if (result === undefined) return "";
  return JSON.stringify(result);
}

/** A task set over an in-memory array. */
export function arrayTasks<Task>(tasks: readonly Task[]): TaskSet<Task> {
  return {
    size: tasks.length,
    get: (i) => {
      const t = tasks[i];
      if (t === undefined) throw new RangeError(`task index ${i} is out of range [0, ${tasks.length - 1}]`);
      return t;
    },
  };
}
