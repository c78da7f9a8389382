/**
 * The bash suite (NL2Bash): registers `sinkflex/nl2bash-v0` (the NL2Bash execution tasks) and
 * `sinkflex/nl2bash-gen-v0` (generated tasks, levels 1-3) with the gym registry, and the suite
 * (scripted expert, gold replay) with the suite list. Called once from src/envs/index.ts.
 */
import { make, register } from "../../gym/registry.js";
import { SEED_RULE, TASK_INDEX_RESET_OPTIONS, type ClientOptionRules } from "../../gym/remote/options.js";
import { registerSuite, runExpertEpisode, type ReplayOptions, type ReplayReport } from "../suite.js";
import { createBashEnv } from "./env.js";
import { BashExpert } from "./expert.js";
import { loadNl2BashTasks, type BashTask } from "./tasks.js";

export const NL2BASH_ENV_ID = "sinkflex/nl2bash-v0";
export const NL2BASH_GEN_ENV_ID = "sinkflex/nl2bash-gen-v0";
const GENERATED_COUNT = 300;

/**
 * NL2Bash tasks whose reference command does not give the same result twice on identical trees, or
 * depends on the machine rather than the tree: their gold replay is expected to fail. Keyed by task id.
 */
export const NONDETERMINISTIC_GOLD: Record<string, string> = {
  "nl2bash/fs_1/11": "runs its pipeline in the background (&); the sandbox ends it when the shell exits, after a varying part of its output",
  "nl2bash/fs_1/6": "searches the whole root file system (the host's /usr included); the order of what it lists varies between runs",
  "nl2bash/fs_2/36": "prints the free space of the host disk holding the tree, which changes while other programs write",
  "nl2bash/fs_2/42": "writes the current date and time (to the second) into a file",
  "nl2bash/fs_3/44": "prints the used and free blocks of the host disk holding the tree, which change while other programs write",
  "nl2bash/fs_3/50": "prints the used percentage of the host disk holding the tree, which can change between runs",
};

/** What a remote client of `envs serve` may set (see docs/remote-protocol.md): never the tasks file. */
const CLIENT_OPTIONS: ClientOptionRules = {
  session: {
    source: { type: "enum", values: ["nl2bash", "generated"] },
    count: { type: "integer", min: 1, max: 1_000 },
    taskSeed: SEED_RULE,
    difficulty: { type: "enum", values: [1, 2, 3] },
    commandTimeoutMs: { type: "integer", min: 100, max: 60_000 },
  },
  reset: TASK_INDEX_RESET_OPTIONS,
};

export function registerBash(): void {
  register(NL2BASH_ENV_ID, (options) => createBashEnv(options), {
    suite: "bash",
    description: "NL2Bash execution tasks in a sandboxed shell over a fresh file tree: run, then submit; reward for equal output and tree.",
    maxEpisodeSteps: 30,
    options: { source: "nl2bash" },
    clientOptions: CLIENT_OPTIONS,
  });
  register(NL2BASH_GEN_ENV_ID, (options) => createBashEnv(options), {
    suite: "bash",
    description: "Generated shell tasks over the same trees, levels 1-3 (option difficulty): run, then submit.",
    taskCount: GENERATED_COUNT,
    maxEpisodeSteps: 30,
    options: { source: "generated", count: GENERATED_COUNT, taskSeed: 1 },
    clientOptions: CLIENT_OPTIONS,
  });
  registerSuite({
    name: "bash",
    envIds: [NL2BASH_ENV_ID, NL2BASH_GEN_ENV_ID],
    createExpert: (_envId, task) => new BashExpert(task as BashTask),
    replay: replayBash,
  });
}

/**
 * `envs replay`: the scripted expert (which submits the reference command) plays every task through
 * the env; the reward compares it with the reference run on a fresh tree. The expected rate is the
 * share of tasks not listed in NONDETERMINISTIC_GOLD (for generated tasks, 1).
 */
async function replayBash(envId: string, options: ReplayOptions): Promise<ReplayReport> {
  if (options.dbDir || options.games) throw new Error("bash: replay takes --tasks FILE (NL2Bash [{query, gold}]), not --db-dir or --games");
  const generated = envId === NL2BASH_GEN_ENV_ID;
  if (generated && options.tasks) throw new Error(`bash: ${NL2BASH_GEN_ENV_ID} generates its tasks; replay ${NL2BASH_ENV_ID} --tasks FILE instead`);
  const env = await make(envId, options.tasks ? { tasks: options.tasks } : {});
  const size = env.metadata.taskCount ?? 0;
  const total = Math.min(options.limit ?? size, size);
  const ids = generated ? [] : loadNl2BashTasks(options.tasks ? { file: options.tasks } : {}).map((t) => t.id);
  const failures: ReplayReport["failures"] = [];
  let excluded = 0;
  try {
    for (let taskIndex = 0; taskIndex < total; taskIndex++) {
      const id = generated ? `gen/${taskIndex}` : ids[taskIndex]!;
      const known = generated ? undefined : NONDETERMINISTIC_GOLD[id];
      if (known) excluded++;
      try {
        const episode = await runExpertEpisode(env, envId, { taskIndex });
        if (episode.reward !== 1) {
          const evidence = episode.info.evidence as Record<string, unknown> | undefined;
          failures.push({ task: id, reason: known ? `expected: ${known}` : JSON.stringify(evidence ?? episode.info).slice(0, 600) });
        }
      } catch (err) {
        failures.push({ task: id, reason: err instanceof Error ? err.message : String(err) });
      }
      options.onProgress?.(taskIndex + 1, total);
    }
  } finally {
    await env.close();
  }
  return { total, succeeded: total - failures.length, expectedRate: total === 0 ? 1 : (total - excluded) / total, failures };
}
