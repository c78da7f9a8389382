/**
 * The tau suite: registers `sinkflex/tau-retail-v0` and `sinkflex/tau-airline-v0` with the gym
 * registry, and the suite (scripted expert, gold replay) with the suite list. Called once from
 * src/envs/index.ts. The public API of the folder is re-exported here.
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import { unwrap, type Env } from "../../gym/index.js";
import { make, register } from "../../gym/index.js";
import { SEED_RULE, TASK_INDEX_RESET_OPTIONS, type ClientOptionRules } from "../../gym/index.js";
import { ToolEnv } from "../../tools/index.js";
import { registerSuite, runExpertEpisode, type ReplayOptions, type ReplayReport } from "../suite.js";
import type { Domain } from "./db.js";
import { TauExpert, wrongActions } from "./expert.js";
import { pyDumps } from "./pyjson.js";
import type { TauTask } from "./tasks.js";

export const TAU_RETAIL_ID = "sinkflex/tau-retail-v0";
export const TAU_AIRLINE_ID = "sinkflex/tau-airline-v0";
export const TAU_ENV_IDS: Record<Domain, string> = { retail: TAU_RETAIL_ID, airline: TAU_AIRLINE_ID };

/** The domain of a tau env id, or an error naming the ids. */
export function tauDomain(envId: string): Domain {
  if (envId === TAU_RETAIL_ID) return "retail";
  if (envId === TAU_AIRLINE_ID) return "airline";
  throw new Error(`"${envId}" is not a tau-bench env; use ${TAU_RETAIL_ID} or ${TAU_AIRLINE_ID}`);
}

/** The share of tasks the scripted expert must solve with the scripted user for `envs replay` to pass. */
export const EXPERT_EXPECTED_RATE = 0.9;

/**
 * What a remote client of `envs serve` may set (see docs/remote-protocol.md): never the task file,
 * the database folder or the user simulator (an LLM user's endpoint and key are the server's).
 */
const CLIENT_OPTIONS: ClientOptionRules = {
  session: {
    taskSet: { type: "enum", values: ["train", "dev", "generated"] },
    difficulty: { type: "enum", values: ["easy", "medium", "hard", "mixed"] },
    count: { type: "integer", min: 1, max: 200 },
    taskSeed: SEED_RULE,
  },
  reset: TASK_INDEX_RESET_OPTIONS,
};

export function registerTau(): void {
  const common = { maxEpisodeSteps: 200, clientOptions: CLIENT_OPTIONS };
  register(TAU_RETAIL_ID, async (options) => (await import("./env.js")).createTauEnv("retail", options), {
    suite: "tau",
    description: "tau-bench retail: a customer (scripted or LLM user) asks to cancel, modify, return or exchange orders; 16 tools over the JSON store database; reward = final DB equals the gold replay's and required outputs said",
    taskCount: 500,
    ...common,
  });
  register(TAU_AIRLINE_ID, async (options) => (await import("./env.js")).createTauEnv("airline", options), {
    suite: "tau",
    description: "tau-bench airline: a customer books, changes or cancels flight reservations; 14 tools over the JSON airline database; reward = final DB equals the gold replay's and required outputs said",
    taskCount: 25,
    ...common,
  });
  registerSuite({
    name: "tau",
    envIds: [TAU_RETAIL_ID, TAU_AIRLINE_ID],
    createExpert: (envId, task) => new TauExpert(tauDomain(envId), task as TauTask),
    wrongAnswer: (envId, task) => wrongActions(tauDomain(envId), task as TauTask),
    replay: replayTau,
  });
}

function envOptions(options: ReplayOptions): Record<string, unknown> {
  if (options.games) throw new Error("tau envs take no --games; use --tasks FILE for a task file and --db-dir DIR for a database folder");
  return { ...(options.tasks ? { tasksFile: options.tasks } : {}), ...(options.dbDir ? { dbDir: options.dbDir } : {}) };
}

/** Plays the task's gold actions through the env as tool calls, then says the outputs; returns the reward and info. */
export async function playGold(env: Env<ChatObservation, AgentTurn>, taskIndex: number): Promise<{ reward: number; info: Record<string, unknown> }> {
  await env.reset({ seed: taskIndex, options: { taskIndex } });
  const base = unwrap(env);
  if (!(base instanceof ToolEnv) || !base.current) throw new Error(`${env}: gold replay needs a tau ToolEnv`);
  const task = base.current.task as TauTask;
  let n = 0;
  const turns: AgentTurn[] = task.actions.map((a) => ({ content: "", toolCalls: [{ id: `gold_${++n}`, name: a.name, arguments: pyDumps(a.kwargs) }] }));
  turns.push({ content: task.outputs.length > 0 ? `Here is what you asked about: ${task.outputs.join("; ")}.` : "Everything you asked for is done.", toolCalls: [] });
  let result: Awaited<ReturnType<typeof env.step>> | undefined;
  for (const turn of turns) {
    result = await env.step(turn);
    if (result[2] || result[3]) break;
  }
  // The scripted user stops once every change it wanted is made; a user that keeps talking is told goodbye.
  for (let k = 0; k < 3 && result && !result[2] && !result[3]; k++) result = await env.step({ content: "Goodbye!", toolCalls: [] });
  return { reward: result?.[1] ?? 0, info: result?.[4] ?? {} };
}

async function replayTau(envId: string, options: ReplayOptions): Promise<ReplayReport> {
  tauDomain(envId);
  const env = await make<ChatObservation, AgentTurn>(envId, envOptions(options));
  const size = env.metadata.taskCount ?? 0;
  const total = Math.min(options.limit ?? size, size);
  const failures: ReplayReport["failures"] = [];
  try {
    for (let taskIndex = 0; taskIndex < total; taskIndex++) {
      const { reward, info } = options.gold ? await playGold(env, taskIndex) : await runExpertEpisode(env, envId, { taskIndex, maxTurns: 200 });
      if (reward !== 1) failures.push({ task: String(taskIndex), reason: JSON.stringify(info.evidence ?? info.rewardError ?? info.finishReason ?? info) });
      options.onProgress?.(taskIndex + 1, total);
    }
  } finally {
    await env.close();
  }
  return { total, succeeded: total - failures.length, expectedRate: options.gold ? 1 : EXPERT_EXPECTED_RATE, failures };
}

export { conform, replayGold, type ConformReport } from "./conform.js";
export { createTauEnv, type TauEnvOptions } from "./env.js";
export { generateTasks, type Difficulty } from "./generate.js";
export { scoreTau } from "./reward.js";
export { loadTasks, type TauTask } from "./tasks.js";
export { LlmUser, ScriptedUser, STOP, type UserSimulator } from "./user.js";
export { TauExpert } from "./expert.js";
