/**
 * Suites as the pipeline sees them: env ids with options, split into disjoint training and held-out
 * evaluation tasks, and the expert episodes that become SFT data.
 */
import type { AgentTurn, ChatObservation } from "../gym/chat.js";
import type { Env } from "../gym/env.js";
import { make, spec } from "../gym/registry.js";
import { Rng } from "../gym/rng.js";
import { runExpertEpisode, type ExpertEpisode } from "../envs/suite.js";
import type { TrainConfig } from "../rl/config.js";

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
  evalTasks: number[];
}

export function makeChatEnv(envId: string, options: Record<string, unknown>): Promise<Env<ChatObservation, AgentTurn>> {
  return make(envId, options) as Promise<Env<ChatObservation, AgentTurn>>;
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
 * Splits every suite's tasks: a seeded permutation; its last `evalTasks` (the suite's own count, or
 * `eval.tasksPerSuite`; at most a third of the tasks) are held out for evaluation, the rest train in the
 * permutation's order. Holding out from the end keeps the training tasks' order, and so the expert
 * episodes (the first training tasks), the same whatever number is held out. With separate eval options
 * (another task set), evaluation uses that set's first tasks and training uses all of the training set.
 */
export async function planSuites(cfg: TrainConfig): Promise<SuitePlan[]> {
  const names = suiteNames(cfg);
  return Promise.all(
    cfg.suites.map(async (s, i) => {
      spec(s.env); // a clear error for an unknown id
      const env = await makeChatEnv(s.env, s.options);
      const count = Number(env.metadata.taskCount ?? 0);
      const reportsProgress = env.metadata.reportsProgress === true;
      await env.close();
      if ((s.reward?.progress ?? 0) > 0 && !reportsProgress) {
        throw new Error(`suite ${s.env}: suites.${i}.reward.progress is ${s.reward!.progress}, but this env reports no partial progress (info.progress, from a ToolEnv progress hook: restapi and household have one); set it to 0`);
      }
      if (!(count > 0)) throw new Error(`suite ${s.env}: its task set is empty or has no taskCount; check the suite's options`);
      const perm = new Rng(cfg.seed * 7919 + i).shuffle(Array.from({ length: count }, (_, k) => k));
      const asked = s.evalTasks ?? cfg.eval.tasksPerSuite;
      let trainTasks: number[];
      let evalTasks: number[];
      if (s.evalOptions) {
        const evalEnv = await makeChatEnv(s.env, s.evalOptions);
        const evalCount = Number(evalEnv.metadata.taskCount ?? 0);
        await evalEnv.close();
        trainTasks = perm;
        evalTasks = Array.from({ length: Math.min(asked, evalCount) }, (_, k) => k);
      } else {
        const held = Math.min(asked, Math.floor(count / 3));
        if (held < 1) throw new Error(`suite ${s.env}: only ${count} tasks, too few to hold out evaluation tasks; set evalOptions to a separate task set`);
        evalTasks = perm.slice(count - held);
        trainTasks = perm.slice(0, count - held);
      }
      return { name: names[i]!, envId: s.env, options: s.options, evalOptions: s.evalOptions ?? s.options, weight: s.weight, reward: s.reward, trainTasks, evalTasks };
    }),
  );
}

/**
 * Expert episodes on training tasks; only successful ones (reward 1) are kept as SFT data. Episode k
 * runs training task k (cycling through them, at most four times) with seed `seed + k`; `range` runs
 * episodes [from, to) of the `count` only, so that parts of one suite's episodes can run on different
 * threads and be concatenated in order.
 */
export async function expertEpisodes(
  plan: Pick<SuitePlan, "envId" | "options" | "trainTasks">,
  count: number,
  seed: number,
  onEpisode?: () => void,
  range: { from: number; to: number } = { from: 0, to: count },
): Promise<{ kept: ExpertEpisode[]; failed: number }> {
  const kept: ExpertEpisode[] = [];
  let failed = 0;
  const end = Math.min(range.to, expertEpisodeCount(plan, count));
  if (range.from >= end) return { kept, failed };
  const env = await makeChatEnv(plan.envId, plan.options);
  try {
    for (let k = range.from; k < end; k++) {
      const taskIndex = plan.trainTasks[k % plan.trainTasks.length]!;
      const ep = await runExpertEpisode(env, plan.envId, { taskIndex, seed: seed + k });
      if (ep.reward >= 1 - 1e-9) kept.push(ep);
      else failed++;
      onEpisode?.();
    }
  } finally {
    await env.close();
  }
  return { kept, failed };
}

/** How many expert episodes `expertEpisodes` runs for `count` asked: each training task at most 4 times. */
export function expertEpisodeCount(plan: Pick<SuitePlan, "trainTasks">, count: number): number {
  return Math.min(count, plan.trainTasks.length * 4);
}
