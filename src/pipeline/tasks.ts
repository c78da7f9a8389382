/**
 * Suites as the pipeline sees them: env ids with options, split into disjoint training and held-out
 * evaluation tasks, and the expert episodes that become SFT data.
 */
import { createHash } from "node:crypto";
import type { AgentTurn, ChatObservation } from "../gym/index.js";
import type { Env } from "../gym/index.js";
import { make, spec } from "../gym/index.js";
import { Rng } from "../gym/index.js";
import { hasExpert, runExpertEpisode, type ExpertEpisode } from "../envs/index.js";
import { unwrap } from "../gym/index.js";
import { ToolEnv } from "../tools/index.js";
import type { TrainConfig } from "./config.js";
import { importModules } from "./user-modules.js";

export interface SuitePlan {
  /** Short name used in tables and metrics, e.g. "arith". */
  name: string;
  envId: string;
  options: Record<string, unknown>;
  evalOptions: Record<string, unknown>;
  weight: number;
  /** The rubric weights GRPO's reward comes from (the verifier alone when absent). */
  reward?: TrainConfig["suites"][number]["reward"];
  trainTasks: number[];
  /**
   * One training task per distinct contents (the first in the permutation's order): what GRPO draws
   * from with `grpo.taskSampling: "content"`, and SFT's expert plays with `sft.taskSampling: "content"`.
   * With separate eval options, contents are read only for those settings (otherwise this is the
   * training tasks).
   */
  trainContents: number[];
  /** The tasks the expert plays for SFT, in turn: trainTasks, or trainContents with `sft.taskSampling: "content"`. */
  sftTasks: number[];
  evalTasks: number[];
  /**
   * With the suite's `rlTasks`: one task per distinct contents kept out of SFT (and out of trainTasks
   * and trainContents), the only tasks GRPO draws from.
   */
  rlTasks?: number[];
  /** This suite's expert episodes for SFT, where it sets its own (otherwise sft.expertEpisodes). */
  sftEpisodes?: number;
  /** The chance of an expert mistake (and its recovery) before each turn of an expert episode. */
  sftMistakes?: number;
  /**
   * false when the env has no expert (no `expert` hook on its ToolEnv, no registered suite): it plays no
   * expert episodes, and its SFT data comes from `sft.data` alone.
   */
  hasExpert?: boolean;
  /**
   * Set when fewer tasks are held out than were asked for (few distinct tasks, or a small evaluation
   * task set): why, and what to do. Shown with the evaluation.
   */
  heldOutWarning?: string;
}

export function makeChatEnv(envId: string, options: Record<string, unknown>): Promise<Env<ChatObservation, AgentTurn>> {
  return make(envId, options) as Promise<Env<ChatObservation, AgentTurn>>;
}

/** The rollout's key for envs made by `makeChatEnv(envId, options)`: envs of one key are reset and reused. */
export function chatEnvKey(envId: string, options: Record<string, unknown>): string {
  return `${envId} ${JSON.stringify(options)}`;
}

/** Short, unique names for the configured suites (the registry's suite name, or the env id's name). */
function suiteNames(cfg: TrainConfig): string[] {
  const names = cfg.suites.map((s) => {
    try {
      return spec(s.env).defaults.suite;
    } catch {
      return s.env.split("/")[1]!.replace(/-v\d+$/, "");
    }
  });
  return names.map((n, i) => (names.indexOf(n) !== i || names.lastIndexOf(n) !== i ? `${n}-${i}` : n));
}

/**
 * Splits every suite's tasks: a seeded permutation of the tasks; their distinct contents (the opening
 * conversation and tools a reset shows), in the order of their first task there, shuffled again; the
 * last of those (the suite's own `evalTasks`, or `eval.tasksPerSuite`; at most a third of them) are
 * held out, one task each, and the rest train in the permutation's order, less every task whose
 * contents equal a held-out one. A generator that repeats a task under another index therefore never
 * puts it on both sides, and a template with few distinct tasks loses only its share of them. A larger
 * held-out set only removes tasks from the training order.
 * With separate eval options (another task set), evaluation uses that set's first tasks and training
 * uses all of the training set.
 */
export async function planSuites(cfg: TrainConfig, options: { contents?: ContentsReader } = {}): Promise<SuitePlan[]> {
  // The user's modules first: the suites may name the envs they register.
  await importModules(cfg.modules, process.cwd());
  const names = suiteNames(cfg);
  const read = options.contents ?? readTaskContents;
  // Every suite is planned to the end, even when one fails, before the failure is thrown: a caller that
  // then stops its worker pool must not have suites still starting work on it.
  const settled = await Promise.allSettled(
    cfg.suites.map(async (s, i) => {
      spec(s.env); // a clear error for an unknown id
      const env = await makeChatEnv(s.env, s.options);
      const count = Number(env.metadata.taskCount ?? 0);
      const reportsProgress = env.metadata.reportsProgress === true;
      if ((s.reward?.progress ?? 0) > 0 && !reportsProgress) {
        await env.close();
        throw new Error(`suite ${s.env}: suites.${i}.reward.progress is ${s.reward!.progress}, but this env reports no partial progress (info.progress, from a ToolEnv progress hook: restapi and household have one); set it to 0`);
      }
      if (!(count > 0)) {
        await env.close();
        throw new Error(`suite ${s.env}: its task set is empty or has no taskCount; check the suite's options`);
      }
      const expert = hasExpert(env, s.env);
      if (!expert && (s.sftEpisodes ?? 0) > 0 && cfg.sft.enabled) {
        await env.close();
        throw new Error(`suite ${s.env}: suites.${i}.sftEpisodes is ${s.sftEpisodes}, but this env has no expert to play them: give its ToolEnv an \`expert\` hook (docs/your-env.md), or drop sftEpisodes and train from demonstrations in sft.data`);
      }
      const perm = new Rng(cfg.seed * 7919 + i).shuffle(Array.from({ length: count }, (_, k) => k));
      const asked = s.evalTasks ?? cfg.eval.tasksPerSuite;
      const askedField = s.evalTasks !== undefined ? `suites.${i}.evalTasks` : "eval.tasksPerSuite";
      let heldOutWarning: string | undefined;
      let trainTasks: number[];
      let trainContents: number[];
      let evalTasks: number[];
      let rlTasks: number[] | undefined;
      if (s.evalOptions && s.rlTasks) {
        await env.close();
        throw new Error(`suite ${s.env}: suites.${i}.rlTasks keeps tasks of the one task set apart from SFT and the held-out ones; it does not combine with evalOptions (remove one of them)`);
      }
      if (s.evalOptions) {
        let keys: string[] | undefined;
        try {
          // Contents are read only when SFT or GRPO draws by them (the held-out tasks are another set).
          if (cfg.grpo.taskSampling === "content" || cfg.sft.taskSampling === "content") keys = await taskContents(s.env, s.options, count, env, read);
        } finally {
          await env.close();
        }
        const evalEnv = await makeChatEnv(s.env, s.evalOptions);
        const evalCount = Number(evalEnv.metadata.taskCount ?? 0);
        await evalEnv.close();
        trainTasks = perm;
        trainContents = keys ? firstOfEachContents(perm, keys) : perm;
        evalTasks = Array.from({ length: Math.min(asked, evalCount) }, (_, k) => k);
        if (evalTasks.length < asked) heldOutWarning = `${evalTasks.length} held-out tasks, not the ${asked} asked for (${askedField}): its evalOptions task set has ${evalCount} tasks; give it more tasks, or ask for fewer`;
      } else {
        let keys: string[];
        try {
          keys = await taskContents(s.env, s.options, count, env, read);
        } finally {
          await env.close();
        }
        // The distinct contents, in the order of their first task in the permutation, shuffled again:
        // the held-out ones are the last of that order, a uniform sample of the distinct contents. (The
        // first ones met from the permutation's end would favour the most repeated contents, and a
        // template with few distinct tasks would lose every one of its tasks from training.)
        const distinct = new Map<string, number>();
        for (const t of perm) if (!distinct.has(keys[t]!)) distinct.set(keys[t]!, t);
        const order = new Rng(cfg.seed * 7919 + i + 104_729).shuffle([...distinct.keys()]);
        const held = Math.min(asked, Math.floor(order.length / 3));
        if (held < 1) throw new Error(`suite ${s.env}: only ${order.length} distinct tasks, too few to hold out evaluation tasks; set evalOptions to a separate task set`);
        if (held < asked) {
          const hidden = unwrap(env) instanceof ToolEnv && (unwrap(env) as ToolEnv).hooks.taskKey !== undefined;
          heldOutWarning = `${held} held-out tasks, not the ${asked} asked for (${askedField}): its ${count} tasks are ${order.length} distinct ones` +
            (hidden ? " by its taskKey" : " by their opening messages and tools") + `, and at most a third of them are held out; ` +
            (hidden ? "make more distinct tasks, set evalOptions to a separate task set, or ask for fewer" : "if tasks differ in hidden state (a database, a seed), give the env's ToolEnv a `taskKey` hook (docs/your-env.md); otherwise make more distinct tasks, set evalOptions to a separate task set, or ask for fewer");
        }
        const heldOut = order.slice(order.length - held);
        const heldKeys = new Set(heldOut);
        evalTasks = heldOut.map((k) => distinct.get(k)!);
        trainTasks = perm.filter((t) => !heldKeys.has(keys[t]!));
        if (s.rlTasks) {
          // GRPO's own tasks: the distinct contents just before the held-out ones in the same order.
          const rest = order.length - held;
          if (s.rlTasks > Math.floor(rest / 2)) throw new Error(`suite ${s.env}: suites.${i}.rlTasks is ${s.rlTasks}, but it has ${rest} distinct training tasks and SFT keeps at least half of them; ask for at most ${Math.floor(rest / 2)}`);
          const rlKeys = new Set(order.slice(rest - s.rlTasks, rest));
          rlTasks = firstOfEachContents(trainTasks.filter((t) => rlKeys.has(keys[t]!)), keys);
          trainTasks = trainTasks.filter((t) => !rlKeys.has(keys[t]!));
        }
        trainContents = firstOfEachContents(trainTasks, keys);
      }
      const sftTasks = cfg.sft.taskSampling === "content" ? trainContents : trainTasks;
      return { name: names[i]!, envId: s.env, options: s.options, evalOptions: s.evalOptions ?? s.options, weight: s.weight, reward: s.reward, trainTasks, trainContents, sftTasks, evalTasks, ...(rlTasks ? { rlTasks } : {}), sftEpisodes: s.sftEpisodes, ...(s.sftMistakes ? { sftMistakes: s.sftMistakes } : {}), hasExpert: expert, ...(heldOutWarning ? { heldOutWarning } : {}) } satisfies SuitePlan;
    }),
  );
  const failed = settled.find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
  return settled.map((r) => (r as PromiseFulfilledResult<SuitePlan>).value);
}

/** The first task of each distinct contents, in the given order. */
function firstOfEachContents(tasks: number[], keys: string[]): number[] {
  const seen = new Set<string>();
  const firsts: number[] = [];
  for (const t of tasks) {
    if (seen.has(keys[t]!)) continue;
    seen.add(keys[t]!);
    firsts.push(t);
  }
  return firsts;
}

/**
 * Reads the contents digest of every task of a suite's task set, in task order (`readTaskContents` on
 * this thread; the data-preparation pool spreads the tasks over its threads). `env` is the suite's env,
 * open with these options.
 */
export type ContentsReader = (envId: string, options: Record<string, unknown>, count: number, env: Env<ChatObservation, AgentTurn>) => Promise<string[]>;

/** Task contents already read in this process, by env id and options (a task set is fixed by them). */
const contentsRead = new Map<string, string[]>();

/** Each task's contents, read once per process for a given env and options (the demo's second run plans again). */
async function taskContents(
  envId: string,
  options: Record<string, unknown>,
  count: number,
  env: Env<ChatObservation, AgentTurn>,
  read: ContentsReader,
): Promise<string[]> {
  const setKey = `${envId} ${JSON.stringify(options)}`;
  const known = contentsRead.get(setKey);
  if (known?.length === count) return known;
  const keys = await read(envId, options, count, env);
  if (keys.length !== count) throw new Error(`suite ${envId}: read the contents of ${keys.length} tasks, expected ${count}`);
  contentsRead.set(setKey, keys);
  return keys;
}

/**
 * Tasks [from, to)'s contents, each as a digest of their JSON, read with `env` on this thread: the
 * env's `taskKey` hook where its ToolEnv has one (tasks that differ in hidden state), else the opening
 * messages and the tools a reset shows.
 */
export async function taskContentsRange(env: Env<ChatObservation, AgentTurn>, from: number, to: number): Promise<string[]> {
  const keys: string[] = [];
  const base = unwrap(env);
  if (base instanceof ToolEnv && base.hooks.taskKey) {
    for (let t = from; t < to; t++) keys.push(createHash("sha256").update(`key ${base.taskKey(t)}`).digest("base64"));
    return keys;
  }
  for (let t = from; t < to; t++) {
    const [observation] = await env.reset({ seed: 0, options: { taskIndex: t } });
    keys.push(createHash("sha256").update(JSON.stringify(observation)).digest("base64"));
  }
  return keys;
}

/** Every task's contents, read on this thread with the suite's env. */
export const readTaskContents: ContentsReader = (_envId, _options, count, env) => taskContentsRange(env, 0, count);

/**
 * Expert episodes on training tasks; only successful ones (reward 1) are kept as SFT data: `count` of
 * them, or the plan's own `sftEpisodes`. Episode k runs training task k (cycling through them, at most
 * four times) with seed `seed + k`; an env without an expert plays none; `range` runs episodes [from, to) of those only, so that parts of
 * one suite's episodes can run on different threads and be concatenated in order.
 */
export async function expertEpisodes(
  plan: Pick<SuitePlan, "envId" | "options" | "sftTasks" | "sftEpisodes" | "sftMistakes" | "hasExpert">,
  count: number,
  seed: number,
  onEpisode?: () => void,
  range: { from: number; to: number } = { from: 0, to: Number.POSITIVE_INFINITY },
): Promise<{ kept: ExpertEpisode[]; failed: number }> {
  const kept: ExpertEpisode[] = [];
  let failed = 0;
  const end = Math.min(range.to, expertEpisodeCount(plan, count));
  if (range.from >= end) return { kept, failed };
  const env = await makeChatEnv(plan.envId, plan.options);
  try {
    for (let k = range.from; k < end; k++) {
      const taskIndex = plan.sftTasks[k % plan.sftTasks.length]!;
      const ep = await runExpertEpisode(env, plan.envId, { taskIndex, seed: seed + k, mistakes: plan.sftMistakes });
      if (ep.reward >= 1 - 1e-9) kept.push(ep);
      else failed++;
      onEpisode?.();
    }
  } finally {
    await env.close();
  }
  return { kept, failed };
}

/**
 * How many expert episodes `expertEpisodes` runs for `count` asked (or the plan's own `sftEpisodes`):
 * each of its SFT tasks at most 4 times; none for an env without an expert.
 */
export function expertEpisodeCount(plan: Pick<SuitePlan, "sftTasks" | "sftEpisodes" | "hasExpert">, count: number): number {
  if (plan.hasExpert === false) return 0;
  return Math.min(plan.sftEpisodes ?? count, plan.sftTasks.length * 4);
}

/**
 * The error of a run whose SFT has nothing to train on: no suite's env has an expert and `sft.data`
 * names no files. It says what to do.
 */
export function noSftDataError(plans: readonly SuitePlan[]): Error {
  const without = plans.filter((p) => p.hasExpert === false).map((p) => p.envId);
  return new Error(
    `SFT has no data: ${without.length ? `${without.join(", ")} ${without.length === 1 ? "has" : "have"} no expert` : "the experts played no successful episodes"} and sft.data names no files. ` +
      "Add demonstrations (OpenAI-chat JSONL files) to sft.data, give the env's ToolEnv an `expert` hook (docs/your-env.md), or set sft.enabled: false to go straight to GRPO",
  );
}
