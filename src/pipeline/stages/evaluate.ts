/**
 * Stage 3 (and 5), evaluate: plays the held-out tasks with the policy and records the table in the run's
 * eval.json under "before-rl" (the policy entering RL) or "after-rl" (the policy GRPO ended with), with
 * a metrics record of the success rates. The table before RL is kept across resumes: a continued run
 * does not evaluate it again.
 *
 * How a policy is evaluated (suites, seeds, pass@k, intervals) is ../evaluate.ts's; this file only
 * places the evaluation in the run.
 */
import { existsSync, readFileSync } from "node:fs";
import type { TrainConfig } from "../config.js";
import { evalOptionsOf, evaluate, type EvalOptions, type SuiteEval } from "../evaluate.js";
import type { Policy } from "../policy.js";
import type { SuitePlan } from "../tasks.js";
import { pinRuleOf, rolloutPins } from "./attention-profile.js";
import type { RunContext } from "./context.js";

export type EvalStage = "before-rl" | "after-rl";

/** eval.json: the tables of the run's evaluations so far. */
export interface EvalTables {
  stages: Partial<Record<EvalStage, Record<string, SuiteEval>>>;
}

export function readEvalTables(ctx: RunContext): EvalTables {
  const file = ctx.run.file("eval.json");
  return (existsSync(file) ? JSON.parse(readFileSync(file, "utf8")) : { stages: {} }) as EvalTables;
}

/**
 * How a run evaluates this policy: the config's evaluation settings, with the pins its sink profile
 * asks for (attention.mode profile), so that an evaluation outside the run (`sinkflex eval --config`)
 * plays the tasks under the same mask as the run's own.
 */
export function policyEvalOptions(cfg: TrainConfig, policy: Policy): EvalOptions {
  return { ...evalOptionsOf(cfg), pins: rolloutPins(pinRuleOf(cfg, policy)) };
}

/**
 * Evaluates the policy as `which` and records it (for "before-rl", only when the run has no such
 * table yet); `step` is the GRPO step the policy is at. Returns the table.
 */
export async function runEvaluation(ctx: RunContext, policy: Policy, plans: SuitePlan[], which: EvalStage, step: number): Promise<Record<string, SuiteEval>> {
  const tables = readEvalTables(ctx);
  const kept = tables.stages[which];
  if (which === "before-rl" && kept) return kept;
  // A held-out set smaller than asked is said every time one is evaluated (never only in a table's task count).
  for (const p of plans) if (p.heldOutWarning) process.stderr.write(`warning: ${p.name}: ${p.heldOutWarning}\n`);
  const metricsStage = which === "before-rl" ? "eval-before" : "eval-after";
  ctx.status({ stage: metricsStage, step, totalSteps: which === "before-rl" ? 0 : ctx.cfg.grpo.enabled ? ctx.cfg.grpo.steps : 0 });
  const table = await evaluate(policy, plans, { ...policyEvalOptions(ctx.cfg, policy), quiet: ctx.options.quiet, label: which === "before-rl" ? "eval before RL" : "eval after RL", vocabNotice: ctx.cfg.model.checkpoint !== undefined });
  tables.stages[which] = table;
  ctx.run.writeEval(tables);
  ctx.metrics({ stage: metricsStage, step, success: Object.fromEntries(Object.entries(table).map(([k, v]) => [k, v.rate])) });
  return table;
}
