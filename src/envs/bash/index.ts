/**
 * The bash suite (NL2Bash): registers `sinkflex/nl2bash-v0` (the NL2Bash execution tasks) and
 * `sinkflex/nl2bash-gen-v0` (generated tasks, levels 1-3) with the gym registry, and the suite
 * (scripted expert, gold replay) with the suite list. Called once from src/envs/index.ts.
 */
import { make, register } from "../../gym/index.js";
import { SEED_RULE, TASK_INDEX_RESET_OPTIONS, type ClientOptionRules } from "../../gym/index.js";
import { registerSuite, runExpertEpisode, type ReplayOptions, type ReplayReport } from "../suite.js";
import { createBashEnv } from "./env.js";
import { BashExpert, wrongAnswer } from "./expert.js";
import { loadNl2BashTasks, parseTreeName, type BashTask } from "./tasks.js";

export const NL2BASH_ENV_ID = "sinkflex/nl2bash-v0";
export const NL2BASH_GEN_ENV_ID = "sinkflex/nl2bash-gen-v0";
const GENERATED_COUNT = 300;

/**
 * NL2Bash tasks whose reference command does not give the same result twice on identical trees, or
 * depends on the machine rather than the tree: their gold replay may fail. Keyed by what the task is
 * (`bashTaskKey`: its tree and reference command), so a task counts here in any file and at any
 * position, and no other task does. `task` is where it is in the bundled files.
 */
export const NONDETERMINISTIC_GOLD: Record<string, { task: string; why: string }> = {
  "5fcb43dffe0c8055": { task: "nl2bash/fs_1/11", why: "runs its pipeline in the background (&); the sandbox ends it when the shell exits, after a varying part of its output" },
  "3ed91049c9b7a971": { task: "nl2bash/fs_1/6", why: "searches the whole root file system (the host's /usr included); the order of what it lists varies between runs" },
  cce22eb5d32e7590: { task: "nl2bash/fs_2/36", why: "prints the free space of the host disk holding the tree, which changes while other programs write" },
  f5d0aec0fd25daa8: { task: "nl2bash/fs_2/42", why: "writes the current date and time (to the second) into a file" },
  "55d72e2225e736df": { task: "nl2bash/fs_3/44", why: "prints the used and free blocks of the host disk holding the tree, which change while other programs write" },
  "3633877c00794dc0": { task: "nl2bash/fs_3/50", why: "prints the used percentage of the host disk holding the tree, which can change between runs" },
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
    wrongAnswer: (_envId, task) => wrongAnswer(task as BashTask),
    replay: replayBash,
  });
}

/**
 * `envs replay`: the scripted expert (which submits the reference command) plays every task through
 * the env; the reward compares it with the reference run on a fresh tree. The tasks that may fail are
 * those whose key is in NONDETERMINISTIC_GOLD (none for generated tasks); the replay passes only when
 * every failure is one of them (`expectedToFail`), and `expectedRate` is the share of the others.
 */
async function replayBash(envId: string, options: ReplayOptions): Promise<ReplayReport> {
  if (options.dbDir || options.games) throw new Error("bash: replay takes --tasks FILE (NL2Bash [{query, gold}]) and --tree, not --db-dir or --games");
  const generated = envId === NL2BASH_GEN_ENV_ID;
  if (generated && (options.tasks || options.tree)) throw new Error(`bash: ${NL2BASH_GEN_ENV_ID} generates its tasks; replay ${NL2BASH_ENV_ID} --tasks FILE --tree NAME instead`);
  if (options.tree && !options.tasks) throw new Error("bash: --tree names the tree of a task file given with --tasks FILE; the bundled tasks have theirs");
  const fs = options.tree === undefined ? undefined : parseTreeName(options.tree, "--tree");
  const env = await make(envId, { ...(options.tasks ? { tasks: options.tasks } : {}), ...(fs ? { tree: fs } : {}) });
  const size = env.metadata.taskCount ?? 0;
  const total = Math.min(options.limit ?? size, size);
  const tasks = generated ? [] : loadNl2BashTasks({ ...(options.tasks ? { file: options.tasks } : {}), ...(fs ? { fs } : {}) });
  const failures: ReplayReport["failures"] = [];
  const expectedToFail: NonNullable<ReplayReport["expectedToFail"]> = [];
  try {
    for (let taskIndex = 0; taskIndex < total; taskIndex++) {
      const task = generated ? undefined : tasks[taskIndex]!;
      const id = task ? task.id : `gen/${taskIndex}`;
      const known = task ? NONDETERMINISTIC_GOLD[task.key] : undefined;
      if (known) expectedToFail.push({ task: id, reason: known.why });
      try {
        const episode = await runExpertEpisode(env, envId, { taskIndex });
        if (episode.reward !== 1) {
          const evidence = episode.info.evidence as Record<string, unknown> | undefined;
          failures.push({ task: id, reason: known ? `expected: ${known.why}` : JSON.stringify(evidence ?? episode.info).slice(0, 600) });
        }
      } catch (err) {
        failures.push({ task: id, reason: err instanceof Error ? err.message : String(err) });
      }
      options.onProgress?.(taskIndex + 1, total);
    }
  } finally {
    await env.close();
  }
  return { total, succeeded: total - failures.length, expectedRate: total === 0 ? 1 : (total - expectedToFail.length) / total, failures, expectedToFail };
}
