/**
 * The code suite (modeled on SWE-bench and MINT): registers `sinkflex/swe-v0` (fix a planted bug in a
 * generated repository) and `sinkflex/mint-v0` (MINT and HumanEval problems with a Python tool) with
 * the gym registry, and the suite (scripted experts and replay) with the suite list. The envs are in
 * swe-env.ts and mint-env.ts.
 */
import { register } from "../../gym/index.js";
import { SEED_RULE, TASK_INDEX_RESET_OPTIONS, type ClientOptionRules } from "../../gym/index.js";
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import type { Env } from "../../gym/index.js";
import { registerSuite, runExpertEpisode, type ReplayOptions, type ReplayReport, type Suite } from "../suite.js";
import { createMintEnv, MINT_ENV_ID, type MintEnvOptions } from "./mint-env.js";
import { MintExpert, wrongAnswer as wrongMintAnswer } from "./mint-expert.js";
import { MINT_SOURCES, type MintTask } from "./mint-tasks.js";
import { createSweEnv, SWE_ENV_ID, type SweEnvOptions } from "./swe-env.js";
import { SweExpert, wrongAnswer as wrongSweAnswer } from "./swe-expert.js";
import type { SweTask } from "./swe-tasks.js";

export { createSweEnv, runHiddenTests, SWE_ENV_ID, SWE_SYSTEM_PROMPT, type SweEnvOptions, type SweState } from "./swe-env.js";
export { createMintEnv, checkCode, MINT_ENV_ID, MINT_SYSTEM_PROMPT, type MintEnvOptions, type MintState } from "./mint-env.js";
export { generateSweTask, generateSweTasks, SWE_TEST_COMMANDS, type SweTask, type SweLevel } from "./swe-tasks.js";
export { BUG_TEMPLATES, type BugTemplate } from "./bugs.js";
export { loadMintTasks, loadMintSource, dataDir, MINT_SOURCES, DEFAULT_MINT_SOURCES, type MintTask, type MintSource } from "./mint-tasks.js";
export { checkAnswer, checkProgram, normalizeText, parseNumber } from "./mint-check.js";
export { SweExpert } from "./swe-expert.js";
export { MintExpert } from "./mint-expert.js";
export { Workspace, MOUNT_POINT } from "./workspace.js";

/**
 * Replays the scripted expert over the env's tasks. SWE: the known fix of every generated task
 * (expected 100%). MINT: the benchmark's gold (canonical code, reference answers printed through
 * run_code) over every task of the default sources (571; expected 100%).
 */
export async function replayCode(envId: string, options: ReplayOptions): Promise<ReplayReport> {
  if (options.tasks || options.dbDir || options.games) throw new Error("the code suite takes no --tasks, --db-dir or --games; choose sources or levels with env options");
  let env: Env<ChatObservation, AgentTurn>;
  if (envId === SWE_ENV_ID) env = createSweEnv();
  else if (envId === MINT_ENV_ID) env = createMintEnv();
  else throw new Error(`the code suite has no env "${envId}"; use ${SWE_ENV_ID} or ${MINT_ENV_ID}`);
  const report: ReplayReport = { total: 0, succeeded: 0, expectedRate: 1, failures: [] };
  try {
    const n = Math.min(env.metadata.taskCount ?? 0, options.limit ?? Infinity);
    for (let i = 0; i < n; i++) {
      const ep = await runExpertEpisode(env, envId, { taskIndex: i, seed: i });
      report.total++;
      if (ep.reward === 1) report.succeeded++;
      else {
        const ev = (ep.info.evidence ?? {}) as Record<string, unknown>;
        report.failures.push({ task: String(ev.taskId ?? i), reason: String(ep.info.rewardError ?? JSON.stringify(ev).slice(0, 500)) });
      }
      options.onProgress?.(i + 1, n);
    }
  } finally {
    await env.close();
  }
  return report;
}

export const codeSuite: Suite = {
  name: "code",
  envIds: [SWE_ENV_ID, MINT_ENV_ID],
  createExpert: (envId, task) => (envId === SWE_ENV_ID ? new SweExpert(task as SweTask) : new MintExpert(task as MintTask)),
  wrongAnswer: (envId, task) => (envId === SWE_ENV_ID ? wrongSweAnswer(task as SweTask) : wrongMintAnswer(task as MintTask)),
  replay: replayCode,
};

let registered = false;

/** What a remote client of `envs serve` may set for the SWE env (see docs/remote-protocol.md). */
const SWE_CLIENT_OPTIONS: ClientOptionRules = {
  session: {
    count: { type: "integer", min: 1, max: 500 },
    taskSeed: SEED_RULE,
    levels: { type: "list", item: { type: "enum", values: [1, 2, 3] }, maxItems: 3 },
    languages: { type: "list", item: { type: "enum", values: ["python", "javascript"] }, maxItems: 2 },
  },
  reset: TASK_INDEX_RESET_OPTIONS,
};

/** What a remote client of `envs serve` may set for the MINT env: never the data folder. */
const MINT_CLIENT_OPTIONS: ClientOptionRules = {
  session: {
    sources: { type: "list", item: { type: "enum", values: MINT_SOURCES }, maxItems: MINT_SOURCES.length },
    perSource: { type: "integer", min: 1, max: 1_000 },
    runTimeoutMs: { type: "integer", min: 100, max: 60_000 },
    checkTimeoutMs: { type: "integer", min: 100, max: 60_000 },
  },
  reset: TASK_INDEX_RESET_OPTIONS,
};

export function registerCodeSuite(): void {
  if (registered) return;
  registered = true;
  register(SWE_ENV_ID, (options) => createSweEnv(options as SweEnvOptions), {
    suite: "code",
    description: "SWE-style: fix a planted bug in a small generated Python or JavaScript repository (3 levels); hidden tests decide.",
    taskCount: 48,
    maxEpisodeSteps: 40,
    clientOptions: SWE_CLIENT_OPTIONS,
  });
  register(MINT_ENV_ID, (options) => createMintEnv(options as MintEnvOptions), {
    suite: "code",
    description: "MINT-style: gsm8k, math, theoremqa, mmlu, hotpotqa, mbpp and HumanEval problems with a sandboxed Python tool; answer check or tests.",
    taskCount: 571,
    maxEpisodeSteps: 20,
    clientOptions: MINT_CLIENT_OPTIONS,
  });
  registerSuite(codeSuite);
}
