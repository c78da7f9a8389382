/**
 * The held-out success of a training config's agent (`suites[].agent`) with a checkpoint: every
 * held-out task of each agent suite (the same tasks, split and seeds as the run's own evaluation) played
 * once by the agent through an in-process recording gateway, as GRPO plays its episodes. Prints, per
 * suite, the success rate with its 95% Wilson interval, and the gateway's counts (calls, merges,
 * splits, failed episodes). Run it with the checkpoint a run starts from and with the one it ends with
 * to see whether the agent's success moved.
 *
 *   npx tsx examples/arith-agent/heldout.ts --config configs/gateway-arith.yaml runs/demo-sft [--json out.json]
 *       [--agent "<command>"]   another program for every agent suite (e.g. another of the examples)
 *       [--tasks <n>]           the first n held-out tasks only
 *
 * The run's own eval.json is the built-in agent loop on the same tasks; this is the agent program's.
 * An example, not part of the library.
 */
import { writeFileSync } from "node:fs";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { loadConfigFile, planSuites } from "../../src/pipeline/index.js";
import { openPolicy } from "../../src/pipeline/policy.js";
import { agentSuites, SuiteRollout, type SuiteGroupTask } from "../../src/pipeline/stages/agent-rollouts.js";
import { attentionOf } from "../../src/pipeline/stages/context.js";
import { wilsonInterval } from "../../src/pipeline/stats.js";
import { chatEnvKey, makeChatEnv } from "../../src/pipeline/tasks.js";
import { SUCCESS_THRESHOLD } from "../../src/pipeline/evaluate.js";
import { RolloutScheduler } from "../../src/rollout/index.js";

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const configFile = flag("--config");
const jsonFile = flag("--json");
const agentCommand = flag("--agent");
const taskLimit = flag("--tasks");
const checkpoint = args[0];
if (!configFile || !checkpoint) {
  console.error('usage: npx tsx examples/arith-agent/heldout.ts --config <config with suites[].agent> <checkpoint folder> [--json <file>] [--agent "<command>"] [--tasks <n>]');
  process.exit(2);
}

registerBundledEnvs();
const cfg = loadConfigFile(configFile);
const plans = await planSuites(cfg);
const agents = agentSuites(cfg, plans);
if (agentCommand) for (const [suite, spec] of agents) agents.set(suite, { ...spec, command: agentCommand, run: undefined });
const limit = taskLimit === undefined ? Infinity : Number(taskLimit);
if (!(limit >= 1) || !Number.isInteger(limit === Infinity ? 1 : limit)) {
  console.error(`--tasks must be a positive integer, got ${taskLimit}`);
  process.exit(2);
}
if (agents.size === 0) {
  console.error(`${configFile} gives no suite an agent (suites[].agent): nothing for this to evaluate; the built-in loop's is \`sinkflex eval --config\``);
  process.exit(2);
}
const policy = await openPolicy(checkpoint, cfg.engine, { attention: attentionOf(cfg) });
const seed = cfg.seed + 1_000_003; // the run's evaluation seed (evalOptionsOf)
const rollout = new SuiteRollout(agents, policy.engine, policy.codec, policy.template, {
  maxTurns: cfg.grpo.maxTurns,
  maxTokensPerTurn: cfg.grpo.maxTokensPerTurn,
  maxContextTokens: cfg.grpo.maxContextTokens,
  temperature: cfg.eval.temperature,
  seed,
  templateVars: policy.templateVars,
});
const out: Record<string, unknown> = {};
try {
  for (const plan of plans.filter((p) => agents.has(p.name))) {
    const t0 = performance.now();
    const tasks: SuiteGroupTask[] = plan.evalTasks.slice(0, limit).map((taskIndex) => ({
      suite: plan.name,
      envId: plan.envId,
      makeEnv: () => makeChatEnv(plan.envId, plan.evalOptions),
      envKey: chatEnvKey(plan.envId, plan.evalOptions),
      reset: { seed: seed + taskIndex, options: { taskIndex } },
      groupSize: 1,
    }));
    rollout.takeCounts();
    const groups = await new RolloutScheduler(rollout, { maxInFlight: cfg.grpo.concurrency }).runAll(tasks);
    const episodes = groups.map((g) => g[0]!);
    const successes = episodes.filter((t) => t.reward >= SUCCESS_THRESHOLD).length;
    const ci = wilsonInterval(successes, episodes.length);
    const counts = rollout.takeCounts().agents!;
    const errors = [...new Set(episodes.filter((t) => t.error).map((t) => t.error!))].slice(0, 3);
    const row = { successes, trials: episodes.length, rate: successes / episodes.length, ciLow: ci.low, ciHigh: ci.high, ...counts, errors, wallMs: performance.now() - t0 };
    out[plan.name] = row;
    const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
    console.log(
      `${plan.name}: ${successes}/${episodes.length} = ${pct(row.rate)} (95% CI ${pct(ci.low)}-${pct(ci.high)}); ` +
        `calls ${counts.calls}, merges ${counts.merges}, splits ${counts.splits}, failed ${counts.failed}; ${(row.wallMs / 1000).toFixed(0)} s`,
    );
    for (const e of errors) console.log(`  failed: ${e}`);
  }
} finally {
  await rollout.close();
  policy.engine.dispose();
}
if (jsonFile) writeFileSync(jsonFile, `${JSON.stringify({ checkpoint, config: configFile, suites: out }, null, 2)}\n`);
