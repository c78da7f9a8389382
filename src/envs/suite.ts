/**
 * A suite: a family of bundled environments (retail, sql, bash, ...) with its scripted expert.
 *
 * Every bundled env is a `ToolEnv`. A suite registers its env ids with the gym registry and itself
 * here, so that generic commands (`envs replay`, SFT export, the demo) can play any suite's expert
 * without knowing the suite. The expert acts only through the agent's own tools and messages.
 * A user's env needs no suite: its `ToolEnv`'s own `expert` hook comes first (`expertFor`), and an env
 * with neither has no expert (it trains from demonstrations in `sft.data`).
 */
import { Rng, type AgentTurn, type ChatMessage, type ChatObservation, type ToolCall, type ToolSpec } from "../core/index.js";
import { unwrap, type Env, type Info } from "../gym/index.js";
import { make } from "../gym/index.js";
import { ToolEnv, type Expert } from "../tools/index.js";

/** A scripted expert for one episode (defined with `ToolEnv`'s `expert` hook, tools/tool-env.ts). */
export type { Expert };

export interface ReplayOptions {
  /** Replay the benchmark's gold actions / gold SQL where the suite has them, else the scripted expert. */
  gold: boolean;
  /** A task file in the suite's format, instead of the bundled one. */
  tasks?: string;
  /** A folder of databases (sql: `DIR/<db>.sqlite`). */
  dbDir?: string;
  /** A folder of games (household). */
  games?: string;
  /** Only the first n tasks. */
  limit?: number;
  /** The file tree a user's task file runs on (bash: testbed, system or workspace). */
  tree?: string;
  onProgress?: (done: number, total: number) => void;
}

export interface ReplayReport {
  total: number;
  succeeded: number;
  /** The success rate the suite promises for this replay (exit 0 only when reached). */
  expectedRate: number;
  failures: { task: string; reason: string }[];
  /**
   * Where the suite knows which tasks may fail (by what they are, not by their count): those tasks of
   * this replay. The replay then passes only when every failure is one of them, whatever the rate.
   */
  expectedToFail?: { task: string; reason: string }[];
}

export interface Suite {
  name: string;
  envIds: string[];
  /** A fresh expert for the episode whose task is `task` (the env's own task object). */
  createExpert(envId: string, task: unknown): Expert;
  /** `envs replay`: the suite's own replay (gold actions, gold SQL, gt trajectories, or the expert). */
  replay?(envId: string, options: ReplayOptions): Promise<ReplayReport>;
  /**
   * `envs replay --wrong`: an expert that plays the task to a plausible wrong answer (the verifier must
   * give it reward 0), or why the task has no well-defined wrong answer.
   */
  wrongAnswer?(envId: string, task: unknown): Expert | { none: string };
}

/**
 * `expert`, with the first of its tool calls that `change` alters replaced by the altered call (later
 * calls pass unchanged): how most suites make a wrong answer out of their expert's right one.
 */
export function withChangedCall(expert: Expert, change: (call: ToolCall) => ToolCall | undefined): Expert {
  let changed = false;
  return {
    async act(obs) {
      const turn = await expert.act(obs);
      if (changed) return turn;
      const toolCalls = turn.toolCalls.map((call) => {
        const altered = changed ? undefined : change(call);
        if (altered) changed = true;
        return altered ?? call;
      });
      return { ...turn, toolCalls };
    },
  };
}

/** A changed answer value: a number off by one, a string with its last digit moved on or a letter added. */
export function offByOne(value: unknown): unknown {
  if (typeof value === "number") return value + 1;
  if (typeof value === "string") {
    const n = Number(value.trim());
    if (value.trim() !== "" && Number.isFinite(n)) return String(n + 1);
    const m = /(\d)(\D*)$/.exec(value);
    if (m) return `${value.slice(0, m.index)}${(Number(m[1]) + 1) % 10}${m[2]}`;
    return `${value}x`;
  }
  if (typeof value === "boolean") return !value;
  return "wrong";
}

/** `call` with its JSON argument `key` changed by `change` (default `offByOne`); undefined when it has no such argument. */
export function changeArg(call: ToolCall, key: string, change: (value: unknown) => unknown = offByOne): ToolCall | undefined {
  let args: Record<string, unknown>;
  try {
    args = JSON.parse(call.arguments);
  } catch {
    return undefined;
  }
  if (!(key in args)) return undefined;
  return { ...call, arguments: JSON.stringify({ ...args, [key]: change(args[key]) }) };
}

export interface WrongReport {
  /** Tasks played to a wrong answer. */
  total: number;
  /** Those the verifier scored above 0 (each one a verifier that accepts a wrong answer). */
  scoredAboveZero: { task: number; reward: number; answer: string }[];
  /** Tasks with no well-defined wrong answer, with why. */
  skipped: { task: number; why: string }[];
}

/**
 * `envs replay --wrong`: each task (the first `limit`) played by the suite's wrong-answer expert; every
 * one must score 0. `envOptions` are the env's options (a task file, databases).
 */
export async function replayWrong(envId: string, envOptions: Record<string, unknown>, limit?: number): Promise<WrongReport> {
  const suite = suiteForEnv(envId);
  if (!suite.wrongAnswer) throw new Error(`the ${suite.name} suite has no wrong-answer maker (Suite.wrongAnswer)`);
  const env = await make<ChatObservation, AgentTurn>(envId, envOptions);
  const report: WrongReport = { total: 0, scoredAboveZero: [], skipped: [] };
  try {
    const n = Math.min(env.metadata.taskCount ?? 0, limit ?? Infinity);
    for (let taskIndex = 0; taskIndex < n; taskIndex++) {
      let why: string | undefined;
      const episode = await runExpertEpisode(env, envId, {
        taskIndex,
        expert: (task) => {
          const made = suite.wrongAnswer!(envId, task);
          if ("none" in made) why = made.none;
          return "none" in made ? undefined : made;
        },
      });
      if (why !== undefined) {
        report.skipped.push({ task: taskIndex, why });
        continue;
      }
      report.total++;
      if (episode.reward > 0) {
        const calls = episode.messages.flatMap((m) => (m.role === "assistant" ? (m.toolCalls ?? []) : []));
        const last = calls[calls.length - 1];
        report.scoredAboveZero.push({ task: taskIndex, reward: episode.reward, answer: last ? `${last.name}(${last.arguments})`.slice(0, 300) : "(no tool call)" });
      }
    }
  } finally {
    await env.close();
  }
  return report;
}

const suites = new Map<string, Suite>();

export function registerSuite(suite: Suite): void {
  if (suites.has(suite.name)) throw new Error(`suite "${suite.name}" is already registered`);
  suites.set(suite.name, suite);
}

export function allSuites(): Suite[] {
  return [...suites.values()];
}

/** The registered suite that owns `envId`, or undefined. */
export function findSuiteForEnv(envId: string): Suite | undefined {
  for (const s of suites.values()) if (s.envIds.includes(envId)) return s;
  return undefined;
}

/**
 * A fresh expert for the current episode of `env` (a made env of id `envId`, reset): its `ToolEnv`'s
 * own `expert` hook, else its suite's; undefined when it has neither.
 */
export function expertFor(env: Env<ChatObservation, AgentTurn>, envId: string): Expert | undefined {
  const base = unwrap(env);
  if (!(base instanceof ToolEnv) || !base.current) throw new Error(`${env}: the expert needs a ToolEnv-based env, reset`);
  if (base.hooks.expert) return base.hooks.expert(base.current.task);
  return findSuiteForEnv(envId)?.createExpert(envId, base.current.task);
}

/** Whether episodes of `env` (a made env of id `envId`) have an expert to play them (`expertFor`). */
export function hasExpert(env: Env<ChatObservation, AgentTurn>, envId: string): boolean {
  const base = unwrap(env);
  return (base instanceof ToolEnv && base.hooks.expert !== undefined) || findSuiteForEnv(envId) !== undefined;
}

export function suiteForEnv(envId: string): Suite {
  for (const s of suites.values()) if (s.envIds.includes(envId)) return s;
  throw new Error(`no suite owns env id "${envId}"; run \`sinkflex envs list\` to see the bundled envs`);
}

export interface ExpertEpisode {
  envId: string;
  taskIndex: number;
  seed: number;
  tools: ToolSpec[];
  /** The whole conversation: opening messages, assistant turns, tool results, user replies. */
  messages: ChatMessage[];
  reward: number;
  terminated: boolean;
  truncated: boolean;
  turns: number;
  info: Info;
}

/** Plays one episode of an already-made env with the suite's scripted expert. */
export async function runExpertEpisode(
  env: Env<ChatObservation, AgentTurn>,
  envId: string,
  options: {
    taskIndex: number;
    seed?: number;
    maxTurns?: number;
    /**
     * The chance, before each expert turn, that the expert first makes one of its mistakes (never two
     * in a row); the mistake turn has weight 0, so SFT sees the recovery but never learns the mistake.
     */
    mistakes?: number;
    /** Another expert for the episode's task (the env's own task object); undefined ends the episode unplayed. */
    expert?: (task: unknown) => Expert | undefined;
  },
): Promise<ExpertEpisode> {
  const seed = options.seed ?? options.taskIndex;
  const [first, resetInfo] = await env.reset({ seed, options: { taskIndex: options.taskIndex } });
  if (options.expert) {
    const base = unwrap(env);
    if (!(base instanceof ToolEnv) || !base.current) throw new Error(`${env}: the expert needs a ToolEnv-based env, reset`);
    const other = options.expert(base.current.task);
    if (!other) return { envId, taskIndex: options.taskIndex, seed, tools: first.tools ?? [], messages: [...first.messages], reward: 0, terminated: false, truncated: false, turns: 0, info: resetInfo };
    return playEpisode(env, envId, options, seed, first, resetInfo, other);
  }
  const expert = expertFor(env, envId);
  if (!expert) throw new Error(`env ${envId} has no expert to play its episodes: give its ToolEnv an \`expert\` hook (docs/your-env.md), or train it from demonstrations in sft.data`);
  return playEpisode(env, envId, options, seed, first, resetInfo, expert);
}

async function playEpisode(
  env: Env<ChatObservation, AgentTurn>,
  envId: string,
  options: { taskIndex: number; maxTurns?: number; mistakes?: number },
  seed: number,
  first: ChatObservation,
  resetInfo: Info,
  expert: Expert,
): Promise<ExpertEpisode> {
  const messages: ChatMessage[] = [...first.messages];
  const tools = first.tools ?? [];
  let obs = first;
  let reward = 0;
  let terminated = false;
  let truncated = false;
  let info: Info = resetInfo;
  let turns = 0;
  const maxTurns = options.maxTurns ?? 100;
  const mistakes = options.mistakes ?? 0;
  if (!(mistakes >= 0 && mistakes < 1)) throw new RangeError(`mistakes must be a chance in [0, 1), got ${mistakes}`);
  if (mistakes > 0 && !expert.mistake) throw new Error(`the expert of ${envId} makes no mistakes to recover from (household's does); set mistakes (a training suite's sftMistakes) to 0 for it`);
  const rng = new Rng((seed * 2_654_435_761 + 40_503) >>> 0);
  let mistook = false;
  while (!terminated && !truncated && turns < maxTurns) {
    const wrong: AgentTurn | undefined = mistakes > 0 && !mistook && rng.next() < mistakes ? expert.mistake!(rng) : undefined;
    mistook = wrong !== undefined;
    const turn = wrong ?? (await expert.act(obs));
    messages.push({ role: "assistant", content: turn.content, ...(turn.toolCalls.length ? { toolCalls: turn.toolCalls } : {}), ...(wrong ? { weight: 0 as const } : {}) });
    [obs, reward, terminated, truncated, info] = await env.step(turn);
    messages.push(...obs.messages);
    turns++;
  }
  return { envId, taskIndex: options.taskIndex, seed, tools, messages, reward, terminated, truncated, turns, info };
}

/** One SFT example in OpenAI chat format (`messages` with `tool_calls`, and `tools`). */
export function toOpenAIChatRecord(messages: ChatMessage[], tools: ToolSpec[]): Record<string, unknown> {
  return {
    messages: messages.map((m) => {
      if (m.role === "assistant") {
        return {
          role: "assistant",
          content: m.content,
          ...(m.toolCalls?.length
            ? { tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) }
            : {}),
          ...(m.weight === 0 ? { weight: 0 } : {}),
        };
      }
      if (m.role === "tool") return { role: "tool", tool_call_id: m.toolCallId, name: m.name, content: m.content };
      return { role: m.role, content: m.content };
    }),
    tools: tools.map((t) => ({ type: "function", function: t })),
  };
}

/**
 * The usual `replay` of a suite without separate gold actions: the scripted expert plays tasks
 * 0..n-1 of an env (seed = task index); every one must succeed. `label` names a task in the report.
 */
export async function replayWithExpert<Task>(
  env: ToolEnv<Task, any>,
  envId: string,
  options: ReplayOptions,
  label: (task: Task) => string,
): Promise<ReplayReport> {
  const report: ReplayReport = { total: 0, succeeded: 0, expectedRate: 1, failures: [] };
  try {
    const n = Math.min(env.metadata.taskCount ?? 0, options.limit ?? Infinity);
    for (let i = 0; i < n; i++) {
      const ep = await runExpertEpisode(env, envId, { taskIndex: i, seed: i });
      const task = env.current!.task;
      report.total++;
      if (ep.reward === 1) report.succeeded++;
      else {
        const ev = (ep.info.evidence ?? {}) as Record<string, unknown>;
        report.failures.push({ task: label(task), reason: String(ep.info.rewardError ?? `expected ${JSON.stringify(ev.expected)}, submitted ${JSON.stringify(ev.submitted)}`) });
      }
      options.onProgress?.(i + 1, n);
    }
  } finally {
    await env.close();
  }
  return report;
}
