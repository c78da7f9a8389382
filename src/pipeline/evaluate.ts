/**
 * Evaluation: plays held-out tasks with the policy and reports, per suite, the success rate with a
 * 95% Wilson interval, pass@k, the average reward, and the model tokens processed.
 */
import type { Engine } from "../engine/index.js";
import { Rollout, type GroupTask, type PinRule } from "../rollout/index.js";
import { RolloutScheduler } from "../rollout/index.js";
import type { TrainConfig } from "./config.js";
import type { Policy } from "./policy.js";
import { Progress } from "./progress.js";
import { mean, passAtK, wilsonInterval } from "./stats.js";
import { chatEnvKey, makeChatEnv, type SuitePlan } from "./tasks.js";
import { countingCodec, noticeSpelledTokens } from "./vocab-notice.js";

export interface SuiteEval {
  successes: number;
  trials: number;
  rate: number;
  ciLow: number;
  ciHigh: number;
  /** pass@k over the samples of each task (k = samples). */
  passAtK: number;
  k: number;
  avgReward: number;
  /** Model tokens processed (prefill + sampled). */
  tokens: number;
  wallMs: number;
}

export interface EvalOptions {
  samples: number;
  temperature: number;
  seed: number;
  maxTurns: number;
  maxTokensPerTurn: number;
  maxContextTokens: number;
  concurrency: number;
  quiet?: boolean;
  label?: string;
  /**
   * Count, per suite, the tokens a trimmed vocabulary spells from smaller pieces and say so when they are
   * many (vocab-notice.ts): set where the policy is a checkpoint that may have been built on other text.
   */
  vocabNotice?: boolean;
  /** The tool format whose parser reads the sampled turns (rollout.toolFormat); default the template's. */
  toolFormat?: string;
  /** The run's pinned secondary sinks (attention.mode profile), as its GRPO rollouts pin them; default none. */
  pins?: PinRule;
}

/** The evaluation settings of a training config: its eval section, its turn limits and its seed. */
export function evalOptionsOf(cfg: TrainConfig): EvalOptions {
  return {
    samples: cfg.eval.samples,
    temperature: cfg.eval.temperature,
    seed: cfg.seed + 1_000_003,
    maxTurns: cfg.grpo.maxTurns,
    maxTokensPerTurn: cfg.grpo.maxTokensPerTurn,
    maxContextTokens: cfg.grpo.maxContextTokens,
    concurrency: cfg.grpo.concurrency,
    toolFormat: cfg.rollout.toolFormat,
  };
}

export const SUCCESS_THRESHOLD = 1 - 1e-9;

export async function evaluate(policy: Policy, plans: SuitePlan[], opts: EvalOptions, engine: Engine = policy.engine): Promise<Record<string, SuiteEval>> {
  const out: Record<string, SuiteEval> = {};
  const total = plans.reduce((n, p) => n + p.evalTasks.length, 0);
  const progress = new Progress(opts.label ?? "eval", total, "tasks", opts.quiet);
  for (const plan of plans) {
    const t0 = performance.now();
    // A checkpoint's trimmed vocabulary may not cover this env's text: counted here, said once per suite.
    const codec = opts.vocabNotice ? countingCodec(policy.codec) : policy.codec;
    const rollout = new Rollout(engine, codec, policy.template, {
      maxTurns: opts.maxTurns,
      maxTokensPerTurn: opts.maxTokensPerTurn,
      maxContextTokens: opts.maxContextTokens,
      temperature: opts.temperature,
      seed: opts.seed,
      templateVars: policy.templateVars,
      toolFormat: opts.toolFormat,
      pins: opts.pins,
    });
    const tasks: GroupTask[] = plan.evalTasks.map((taskIndex) => ({
      envId: plan.envId,
      makeEnv: () => makeChatEnv(plan.envId, plan.evalOptions),
      envKey: chatEnvKey(plan.envId, plan.evalOptions),
      reset: { seed: opts.seed + taskIndex, options: { taskIndex } },
      groupSize: opts.samples,
    }));
    // Nothing trains between the tasks: every task starts as soon as there is room, and up to
    // `concurrency` episodes decode together.
    const scheduler = new RolloutScheduler(rollout, { maxInFlight: opts.concurrency });
    const groups = await scheduler.runAll(tasks, () => progress.tick(1, plan.name));
    await rollout.close();
    noticeSpelledTokens(plan.name, codec);
    const first = groups.map((g) => g[0]!);
    const successes = first.filter((t) => t.reward >= SUCCESS_THRESHOLD).length;
    const ci = wilsonInterval(successes, first.length);
    out[plan.name] = {
      successes,
      trials: first.length,
      rate: first.length ? successes / first.length : 0,
      ciLow: ci.low,
      ciHigh: ci.high,
      k: opts.samples,
      passAtK: mean(groups.map((g) => passAtK(g.length, g.filter((t) => t.reward >= SUCCESS_THRESHOLD).length, opts.samples))),
      avgReward: mean(groups.flat().map((t) => t.reward)),
      tokens: rollout.stats.prefillTokens + rollout.stats.sampledTokens,
      wallMs: performance.now() - t0,
    };
  }
  progress.finish();
  return out;
}
