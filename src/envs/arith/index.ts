/**
 * The arith suite: registers `sinkflex/arith-v0` with the gym registry and the suite (its scripted
 * expert and replay) with the suite list. Called once from src/envs/index.ts.
 */
import { make, register } from "../../gym/index.js";
import { SEED_RULE, TASK_INDEX_RESET_OPTIONS, type ClientOptionRules } from "../../gym/index.js";
import { registerSuite, runExpertEpisode, type ReplayOptions, type ReplayReport } from "../suite.js";
import { createArithEnv } from "./env.js";
import { ArithExpert, wrongAnswer } from "./expert.js";
import type { ArithTask } from "./tasks.js";

export const ARITH_ENV_ID = "sinkflex/arith-v0";
const DEFAULT_COUNT = 300;

/** What a remote client of `envs serve` may set (see docs/remote-protocol.md); task generation is bounded. */
const CLIENT_OPTIONS: ClientOptionRules = {
  session: {
    // The demo's recipe asks for 12,000 tasks; at 20,000 a session's task set takes under 0.5 s and a few MB.
    count: { type: "integer", min: 1, max: 20_000 },
    taskSeed: SEED_RULE,
    difficulty: { type: "enum", values: [1, 2, 3] },
  },
  reset: TASK_INDEX_RESET_OPTIONS,
};

export function registerArith(): void {
  register(ARITH_ENV_ID, (options) => createArithEnv(options), {
    suite: "arith",
    description: "Arithmetic word problems (3 levels): calculate, then submit_answer; reward 1 for the exact answer.",
    taskCount: DEFAULT_COUNT,
    maxEpisodeSteps: 10,
    options: { count: DEFAULT_COUNT, taskSeed: 7 },
    clientOptions: CLIENT_OPTIONS,
  });
  registerSuite({
    name: "arith",
    envIds: [ARITH_ENV_ID],
    createExpert: (_envId, task) => new ArithExpert(task as ArithTask),
    wrongAnswer: (_envId, task) => wrongAnswer(task as ArithTask),
    replay: replayArith,
  });
}

/** Plays the scripted expert over the tasks (there are no gold trajectories); every task must be solved. */
async function replayArith(envId: string, options: ReplayOptions): Promise<ReplayReport> {
  if (options.tasks || options.dbDir || options.games) {
    throw new Error("arith: replay takes no --tasks, --db-dir or --games; its tasks are generated");
  }
  const env = await make(envId);
  const total = Math.min(options.limit ?? DEFAULT_COUNT, env.metadata.taskCount ?? DEFAULT_COUNT);
  const failures: ReplayReport["failures"] = [];
  try {
    for (let taskIndex = 0; taskIndex < total; taskIndex++) {
      const episode = await runExpertEpisode(env, envId, { taskIndex });
      if (episode.reward !== 1) failures.push({ task: String(taskIndex), reason: JSON.stringify(episode.info.evidence ?? episode.info) });
      options.onProgress?.(taskIndex + 1, total);
    }
  } finally {
    await env.close();
  }
  return { total, succeeded: total - failures.length, expectedRate: 1, failures };
}
