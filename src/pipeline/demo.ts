/**
 * `sinkflex demo`: the whole system on a laptop's CPU in one command. It builds a small model, SFTs it
 * on the suites' expert trajectories, trains it with GRPO across four suites, evaluates before and
 * after RL on held-out tasks, and prints the results table. Then it replays the first GRPO steps with
 * the naive pipeline (the whole context re-encoded every turn, nothing shared, full attention) from
 * the same starting policy and seed, and reports the model tokens and wall time each pipeline needs
 * per step. The naive pipeline attends to the whole context and the demo to a window, so once a
 * context outgrows the window their samples (and rewards) differ: the ratios are then per step.
 *
 * The recipe itself (suites, model, SFT and GRPO settings) is data, configs/demo.yaml, loaded by
 * src/pipeline/demo-recipe.ts; this file runs it under the demo's time budget and prints the table. It is not
 * the training pipeline (train.ts).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { registerBundledEnvs } from "../envs/index.js";
import type { MatmulPrecision } from "../kernels/index.js";
import { planBudgetRun, type BudgetPlan, type Calibration, type PlanRecipe } from "./budget.js";
import { demoRecipe } from "./demo-recipe.js";
import { validateConfig, type RecipeScale, type TrainConfig } from "./config.js";
import { improvedBeyondInterval } from "./stats.js";
import { makeChatEnv, taskContentsRange } from "./tasks.js";
import { train, type TrainResult } from "./train.js";
import type { SuiteEval } from "./evaluate.js";
import { join } from "node:path";

export { demoConfig, demoConfigFile } from "./demo-recipe.js";

export interface DemoOptions {
  runsDir: string;
  /** A much smaller run (a minute or two) for smoke tests; its numbers mean nothing. */
  quick?: boolean;
  /** GRPO steps replayed with the naive pipeline (default DEMO_NAIVE_STEPS; 0 skips the comparison). */
  naiveSteps?: number;
  quiet?: boolean;
  shouldStop?: () => boolean;
  seed?: number;
  /** The time the whole demo may take, in minutes (default 20): SFT ends at 52% of it, and GRPO early enough for the evaluation after RL to end by 94%. */
  minutes?: number;
  /** Matrix products in "bf16" or "fp32" (default: bf16 where the CPU has a bf16 unit, AMX or AVX512-BF16; see demoConfig); scales the recipe's counts as its `scale` says. */
  matmul?: MatmulPrecision;
}

/** GRPO steps the naive pipeline replays by default: one step of the demo's is 256 episodes. */
export const DEMO_NAIVE_STEPS = 1;

export interface DemoSuiteRow {
  suite: string;
  afterSft: SuiteEval;
  afterRl: SuiteEval;
  deltaPoints: number;
  improvedBeyondCi: boolean;
}

export interface DemoResult {
  rows: DemoSuiteRow[];
  /** sftSteps of sftAllSteps: SFT's steps taken of every epoch's (both 0 where unknown); grpoSteps of the config's grpoAllSteps. */
  totals: { modelTokens: number; wallSeconds: number; sftSeconds: number; grpoSeconds: number; sftSteps: number; sftAllSteps: number; grpoSteps: number; grpoAllSteps: number };
  naive?: {
    steps: number;
    sameRewards: boolean;
    ours: { tokensPerStep: number; rolloutTokensPerStep: number; secondsPerStep: number; rolloutSecondsPerStep: number; rewards: number[] };
    naive: { tokensPerStep: number; rolloutTokensPerStep: number; secondsPerStep: number; rolloutSecondsPerStep: number; rewards: number[] };
    /** Whole GRPO steps (rollouts + updates). */
    tokenRatio: number;
    wallRatio: number;
    /** Rollouts only (prefill + sampling), where the two pipelines differ. */
    rolloutTokenRatio: number;
    rolloutWallRatio: number;
  };
  runDir: string;
  config: TrainConfig;
  /** The plan the calibration gave (printed at the start), absent for --quick. */
  plan?: string[];
}

/** One suite's row of the results table: success after SFT and after RL, the change, and its verdict. */
export function demoSuiteRow(suite: string, afterSft: SuiteEval, afterRl: SuiteEval): DemoSuiteRow {
  return {
    suite,
    afterSft,
    afterRl,
    deltaPoints: 100 * (afterRl.rate - afterSft.rate),
    improvedBeyondCi: improvedBeyondInterval({ successes: afterSft.successes, trials: afterSft.trials }, { successes: afterRl.successes, trials: afterRl.trials }),
  };
}

export async function runDemo(options: DemoOptions): Promise<DemoResult> {
  const recipe = demoRecipe({ quick: options.quick, runsDir: options.runsDir, seed: options.seed, minutes: options.minutes, matmul: options.matmul });
  const budgetMs = (options.minutes ?? 20) * 60_000;
  const start = performance.now();
  const say = (line: string) => {
    if (!options.quiet) process.stderr.write(`${line}\n`);
  };
  let config = recipe.config;
  let budget = {};
  let plan: BudgetPlan | undefined;
  if (!options.quick) {
    // Calibrate, then plan: every stage's counts from this machine's measured speed, so that SFT, GRPO
    // and both evaluations fit the minutes together; the deadlines stay as a net under the plan.
    say("calibrating: a few SFT steps, a GRPO step and a few evaluation tasks of every suite on this machine");
    const cal = await calibrate(config, options, start);
    plan = planBudgetRun(budgetMs, cal, planRecipe(config, recipe.scale, options.naiveSteps ?? DEMO_NAIVE_STEPS));
    for (const line of plan.lines) say(line);
    config = plannedConfig(config, plan);
    const afterCal = start + cal.elapsedMs;
    const evalBy = start + budgetMs - plan.ms.margin - plan.ms.naive;
    const grpoFloor = Math.min(plan.grpoSteps, recipe.scale?.grpoMinSteps ?? 1) * (plan.ms.grpo / Math.max(1, plan.grpoSteps));
    const sftBy = Math.min(evalBy - (plan.ms.evalBefore + plan.ms.evalAfter) - grpoFloor, Math.max(start + 0.52 * budgetMs, afterCal + 1.15 * (plan.ms.prep + plan.ms.sft)));
    budget = { sftDeadline: sftBy, evalBy };
  }
  const main = await train(config, { quiet: options.quiet, shouldStop: options.shouldStop, ...budget });
  if (main.stopped) throw new Error(`the demo was stopped; its run folder is ${main.runDir} (continue it with \`sinkflex train --config ${join(main.runDir, "config.json")} --resume\`)`);
  const rows = Object.keys(main.evalAfter!).map((suite) => demoSuiteRow(suite, main.evalBefore![suite]!, main.evalAfter![suite]!));
  const evalTokens = rows.reduce((n, r) => n + r.afterSft.tokens + r.afterRl.tokens, 0);
  const result: DemoResult = {
    rows,
    totals: {
      modelTokens: main.grpo.rolloutTokens + main.grpo.trainTokens + evalTokens,
      wallSeconds: main.totalMs / 1000,
      sftSeconds: main.sftMs / 1000,
      grpoSeconds: (main.grpo.rolloutMs + main.grpo.trainMs) / 1000,
      sftSteps: main.sft?.steps ?? 0,
      sftAllSteps: main.sft?.allSteps ?? 0,
      grpoSteps: main.rewardCurve.length,
      grpoAllSteps: config.grpo.steps,
    },
    runDir: main.runDir,
    config,
    ...(plan ? { plan: plan.lines } : {}),
  };

  let naiveSteps = Math.min(options.naiveSteps ?? DEMO_NAIVE_STEPS, main.rewardCurve.length);
  if (naiveSteps > 0 && plan && !options.quick) {
    // The replay only where it fits what is left of the budget (a naive step, about 3 of the run's).
    const stepMs = (main.grpo.rolloutMs + main.grpo.trainMs) / Math.max(1, main.rewardCurve.length);
    const left = start + budgetMs - performance.now();
    if (naiveSteps * 3 * stepMs > left) {
      say(`naive replay skipped: ${naiveSteps} step(s) would take about ${Math.round((naiveSteps * 3 * stepMs) / 1000)}s, and ${Math.max(0, Math.round(left / 1000))}s of the budget are left`);
      naiveSteps = 0;
    }
  }
  if (naiveSteps > 0 && !options.shouldStop?.()) {
    result.naive = await naiveComparison(config, main, naiveSteps, options);
  }
  return result;
}

/**
 * Measures this machine on the run's own config, shrunk: a few hundred tasks a suite, 16 expert
 * episodes a suite, two drill steps, two GRPO steps of 8 tasks and 8 held-out tasks a suite, in a
 * temporary folder. The per-unit times come from the metrics' timestamps (the first steps, which
 * allocate, are left out); small batches are less efficient than the run's, so the times err long.
 */
export async function calibrate(cfg: TrainConfig, options: Pick<DemoOptions, "shouldStop">, start = performance.now()): Promise<Calibration> {
  const dir = mkdtempSync(join(tmpdir(), "sinkflex-calibration-"));
  const CONTENTS = 200;
  const EPISODES = 16;
  const EVAL = 24;
  // Reading task contents, timed on this thread over 40 tasks a suite; the run spreads it over its
  // preparation workers (the cores, at most 4).
  const READ = 40;
  let readMs = 0;
  let read = 0;
  registerBundledEnvs();
  for (const s of cfg.suites) {
    if (typeof s.options.count !== "number") continue;
    const env = await makeChatEnv(s.env, s.options);
    const t = performance.now();
    await taskContentsRange(env, 0, Math.min(READ, s.options.count));
    readMs += performance.now() - t;
    read += Math.min(READ, s.options.count);
    await env.close();
  }
  const contentMsPerTask = readMs / Math.max(1, read) / Math.min(4, availableParallelism());
  const calCfg = validateConfig(
    {
      ...cfg,
      name: "calibration",
      runsDir: dir,
      suites: cfg.suites.map((s) => ({ ...s, options: typeof s.options.count === "number" ? { ...s.options, count: Math.min(s.options.count, CONTENTS) } : s.options, evalTasks: EVAL, sftEpisodes: EPISODES })),
      sft: { ...cfg.sft, warmupSteps: 0, checkpointEvery: 1_000_000, ...(cfg.sft.copyDrill ? { copyDrill: { ...cfg.sft.copyDrill, examples: 2 * cfg.sft.batchSize, untilLoss: undefined, lossSteps: undefined, maxExamples: undefined } } : {}) },
      // Every group is trained, degenerate or not: a barely trained policy's groups are mostly all
      // failures, and a step that skips them would measure rollouts without their update.
      grpo: { ...cfg.grpo, steps: 2, batchTasks: 8, warmupSteps: 0, filterDegenerateGroups: false },
      eval: { ...cfg.eval, tasksPerSuite: EVAL },
      checkpointEvery: 1_000_000,
    },
    "the demo's calibration config",
  );
  const sftTimes: number[] = [];
  let grpoMs = Number.NaN;
  let grpoTokens = 0;
  try {
    const r = await train(calCfg, {
      quiet: true,
      shouldStop: options.shouldStop,
      onMetrics: (m) => {
        if (m.stage === "sft") sftTimes.push(performance.now());
        const phase = m.phaseMs as { rollout?: number; train?: number } | undefined;
        if (m.stage === "grpo" && phase) {
          grpoMs = (phase.rollout ?? 0) + (phase.train ?? 0);
          grpoTokens = (m.tokens as { trained?: number } | undefined)?.trained ?? 0;
        }
      },
    });
    if (r.stopped) throw new Error("the demo was stopped during its calibration");
    const steady = sftTimes.slice(Math.min(2, sftTimes.length - 2));
    const sftMsPerStep = steady.length >= 2 ? (steady.at(-1)! - steady[0]!) / (steady.length - 1) : r.sftMs / Math.max(1, sftTimes.length);
    // An expert episode taken as four task readings (a reset and a few steps against one).
    const unit = contentMsPerTask;
    const evalMsPerTask = Object.values(r.evalBefore ?? {}).map((e) => e.wallMs / Math.max(1, e.trials));
    // The GRPO step as measured, rollouts and update, on the calibration policy's own episodes (their
    // length is not the run's: scaling by the expert episodes' length overestimated a step twofold,
    // since a group's shared prompt is trained once; so the plan's GRPO estimate is rough either way).
    const measuredMs = Number.isFinite(grpoMs) ? grpoMs : r.grpo.rolloutMs + r.grpo.trainMs;
    const perTrajectory = grpoTokens / (calCfg.grpo.batchTasks * cfg.grpo.groupSize);
    return {
      sftMsPerStep,
      grpoMsPerTask: measuredMs / calCfg.grpo.batchTasks,
      grpoBasis: `rollouts and update measured on the calibration policy's episodes, ${perTrajectory.toFixed(0)} trained tokens each`,
      evalMsPerTask,
      contentMsPerTask: unit,
      episodeMs: 4 * unit,
      elapsedMs: performance.now() - start,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The recipe's counts as a planned run sees them (held-out and expert counts capped as the suites' plans cap them). */
export function planRecipe(cfg: TrainConfig, scale: RecipeScale | undefined, naiveSteps: number): PlanRecipe {
  return {
    suites: cfg.suites.map((s) => {
      const count = typeof s.options.count === "number" ? s.options.count : 0;
      const asked = s.evalTasks ?? cfg.eval.tasksPerSuite;
      // At most a third of a suite's tasks are held out; an expert plays each training task at most four times.
      const evalTasks = count > 0 ? Math.min(asked, Math.floor(count / 3)) : asked;
      const wanted = s.sftEpisodes ?? cfg.sft.expertEpisodes;
      return { name: s.env.split("/")[1]!.replace(/-v\d+$/, ""), contents: count, evalTasks, episodes: count > 0 ? Math.min(wanted, 4 * (count - evalTasks)) : wanted };
    }),
    sft: { batchSize: cfg.sft.batchSize, drillSteps: cfg.sft.enabled && cfg.sft.copyDrill ? Math.ceil(cfg.sft.copyDrill.examples / cfg.sft.batchSize) : 0, warmupSteps: cfg.sft.warmupSteps },
    grpo: { steps: cfg.grpo.enabled ? cfg.grpo.steps : 0, batchTasks: cfg.grpo.batchTasks, warmupSteps: cfg.grpo.warmupSteps },
    shares: scale?.shares ?? {},
    grpoMinSteps: scale?.grpoMinSteps ?? 1,
    evalHalfWidthPoints: scale?.evalHalfWidthPoints ?? 5,
    naiveSteps,
  };
}

/** The config a plan gives: the recipe's own where the whole recipe fits, its counts replaced otherwise. */
export function plannedConfig(cfg: TrainConfig, plan: BudgetPlan): TrainConfig {
  if (plan.whole) return cfg;
  const { copyDrill, ...sft } = cfg.sft;
  return validateConfig(
    {
      ...cfg,
      suites: cfg.suites.map((s, i) => ({ ...s, sftEpisodes: plan.episodes[i]!, evalTasks: plan.evalTasks[i]! })),
      sft: { ...sft, warmupSteps: plan.sftWarmup, ...(copyDrill && plan.drillSteps > 0 ? { copyDrill: { ...copyDrill, examples: plan.drillSteps * cfg.sft.batchSize } } : {}) },
      grpo: { ...cfg.grpo, steps: plan.grpoSteps, warmupSteps: Math.min(plan.grpoWarmup, plan.grpoSteps) },
    },
    "the demo's planned config",
  );
}

async function naiveComparison(config: TrainConfig, main: TrainResult, steps: number, options: DemoOptions): Promise<DemoResult["naive"]> {
  // Ours, over the same first steps, from the metrics of the main run.
  const { readFileSync } = await import("node:fs");
  const records = readFileSync(join(main.runDir, "metrics.jsonl"), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, any>)
    .filter((r) => r.stage === "grpo" && r.step <= steps);
  const oursRolloutTokens = records.reduce((n, r) => n + r.tokens.prefill + r.tokens.sampled, 0);
  const oursTokens = oursRolloutTokens + records.reduce((n, r) => n + r.tokens.trained, 0);
  const oursRolloutMs = records.reduce((n, r) => n + r.phaseMs.rollout, 0);
  const oursMs = oursRolloutMs + records.reduce((n, r) => n + r.phaseMs.train, 0);
  const naiveConfig = validateConfig(
    {
      ...config,
      name: `${config.name}-naive`,
      model: { checkpoint: join(main.runDir, "checkpoints", "reference"), matmul: config.model.matmul },
      attention: { mode: "full", sinks: config.attention.sinks, window: config.attention.window },
      sft: { ...config.sft, enabled: false },
      grpo: { ...config.grpo, steps, packPrefixes: false },
    },
    "the naive demo config",
  );
  if (!options.quiet) process.stderr.write(`\nnaive pipeline: the first ${steps} GRPO step(s) again, re-encoding every turn with nothing shared\n`);
  const naive = await train(naiveConfig, { quiet: options.quiet, rolloutMode: "recompute", skipEval: true, shouldStop: options.shouldStop, attentionOverride: { window: 0, sinks: 0 } });
  const naiveTokens = naive.grpo.rolloutTokens + naive.grpo.trainTokens;
  const naiveMs = naive.grpo.rolloutMs + naive.grpo.trainMs;
  const per = (x: number) => x / steps;
  const oursRewards = main.rewardCurve.slice(0, steps);
  return {
    steps,
    sameRewards: JSON.stringify(oursRewards) === JSON.stringify(naive.rewardCurve.slice(0, steps)),
    ours: { tokensPerStep: per(oursTokens), rolloutTokensPerStep: per(oursRolloutTokens), secondsPerStep: per(oursMs) / 1000, rolloutSecondsPerStep: per(oursRolloutMs) / 1000, rewards: oursRewards },
    naive: {
      tokensPerStep: per(naiveTokens),
      rolloutTokensPerStep: per(naive.grpo.rolloutTokens),
      secondsPerStep: per(naiveMs) / 1000,
      rolloutSecondsPerStep: per(naive.grpo.rolloutMs) / 1000,
      rewards: naive.rewardCurve,
    },
    tokenRatio: naiveTokens / Math.max(oursTokens, 1),
    wallRatio: naiveMs / Math.max(oursMs, 1),
    rolloutTokenRatio: naive.grpo.rolloutTokens / Math.max(oursRolloutTokens, 1),
    rolloutWallRatio: naive.grpo.rolloutMs / Math.max(oursRolloutMs, 1),
  };
}

/**
 * A warning when the time budget ended SFT well before its planned steps: the demo's recipe was fitted on
 * runs where every step fit, and a small model's SFT policy depends steeply on its steps, so on a slower
 * machine the results table can show little learned. Undefined when (nearly) every step ran.
 */
export function sftCutShort(t: Pick<DemoResult["totals"], "sftSteps" | "sftAllSteps" | "sftSeconds">): string | undefined {
  if (t.sftAllSteps === 0 || t.sftSteps >= 0.9 * t.sftAllSteps) return undefined;
  const perStep = t.sftSteps > 0 ? ` (${(t.sftSeconds / t.sftSteps).toFixed(2)}s a step)` : "";
  return (
    `note: SFT ran ${t.sftSteps.toLocaleString("en-US")} of its ${t.sftAllSteps.toLocaleString("en-US")} steps in its share of the time${perStep}. ` +
    `The demo's recipe was fitted on runs where every step ran, and what a small model learns in SFT depends steeply on its steps: ` +
    `on a slower machine the suites may learn too little, and the table above then shows little learned (see "The demo" in the README).`
  );
}

/** A note under the table when the time budget ended GRPO before the recipe's steps; undefined otherwise. */
export function grpoCutShort(t: Pick<DemoResult["totals"], "grpoSteps" | "grpoAllSteps" | "grpoSeconds">): string | undefined {
  if (t.grpoAllSteps === 0 || t.grpoSteps >= t.grpoAllSteps) return undefined;
  const perStep = t.grpoSteps > 0 ? ` (${(t.grpoSeconds / t.grpoSteps).toFixed(1)}s a step)` : "";
  return (
    `note: GRPO ran ${t.grpoSteps} of its ${t.grpoAllSteps} steps in its share of the time${perStep}. ` +
    `The recipe's gains were measured after 57 to 72 on the 2-core host; with fewer, the suites' gains may stay inside their intervals (see "The demo" in the README).`
  );
}

function pct(e: SuiteEval): string {
  return `${(100 * e.rate).toFixed(1)}%`;
}

export function formatDemoTable(r: DemoResult): string {
  const lines: string[] = [];
  const head = ["suite", "tasks", "after SFT", "after RL", "Δ points", "95% CI after RL", "beyond CI", "avg reward", "eval tokens", "eval wall"];
  const rows = r.rows.map((x) => [
    x.suite,
    String(x.afterRl.trials),
    pct(x.afterSft),
    pct(x.afterRl),
    `${x.deltaPoints >= 0 ? "+" : ""}${x.deltaPoints.toFixed(1)}`,
    `${(100 * x.afterRl.ciLow).toFixed(0)}-${(100 * x.afterRl.ciHigh).toFixed(0)}%`,
    x.improvedBeyondCi ? "yes" : "no",
    x.afterRl.avgReward.toFixed(3),
    String(x.afterSft.tokens + x.afterRl.tokens),
    `${((x.afterSft.wallMs + x.afterRl.wallMs) / 1000).toFixed(0)}s`,
  ]);
  const all = [head, ...rows];
  const widths = head.map((_, c) => Math.max(...all.map((row) => row[c]!.length)));
  const fmt = (row: string[]) => row.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join("  ");
  lines.push(`Results (held-out tasks, success sampled at temperature ${r.config.eval.temperature}):`);
  lines.push(fmt(head), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(fmt));
  const improved = r.rows.filter((x) => x.improvedBeyondCi).length;
  lines.push(`improved beyond the 95% intervals on ${improved} of ${r.rows.length} suites`);
  lines.push(
    `model tokens processed: ${r.totals.modelTokens.toLocaleString("en-US")} (GRPO rollouts + updates + evaluations); wall time ${r.totals.wallSeconds.toFixed(0)}s (SFT ${r.totals.sftSeconds.toFixed(0)}s, GRPO ${r.totals.grpoSeconds.toFixed(0)}s)`,
  );
  const shortSft = sftCutShort(r.totals);
  if (shortSft) lines.push(shortSft);
  const shortGrpo = grpoCutShort(r.totals);
  if (shortGrpo) lines.push(shortGrpo);
  if (r.naive) {
    const n = r.naive;
    lines.push("");
    lines.push(`Naive pipeline vs sinkflex, first ${n.steps} GRPO step(s) from the same policy and seed:`);
    const k = (x: number) => Math.round(x).toLocaleString("en-US");
    lines.push(`                              naive     sinkflex   ratio`);
    lines.push(`  rollout tokens per step  ${k(n.naive.rolloutTokensPerStep).padStart(9)}  ${k(n.ours.rolloutTokensPerStep).padStart(9)}   ${n.rolloutTokenRatio.toFixed(2)}x fewer`);
    lines.push(`  rollout seconds per step ${n.naive.rolloutSecondsPerStep.toFixed(1).padStart(9)}  ${n.ours.rolloutSecondsPerStep.toFixed(1).padStart(9)}   ${n.rolloutWallRatio.toFixed(2)}x less`);
    lines.push(`  all tokens per step      ${k(n.naive.tokensPerStep).padStart(9)}  ${k(n.ours.tokensPerStep).padStart(9)}   ${n.tokenRatio.toFixed(2)}x fewer (updates: sinkflex packs shared prompts)`);
    lines.push(`  all seconds per step     ${n.naive.secondsPerStep.toFixed(1).padStart(9)}  ${n.ours.secondsPerStep.toFixed(1).padStart(9)}   ${n.wallRatio.toFixed(2)}x less`);
    lines.push(
      n.sameRewards
        ? "  same rewards at every step (identical sampled tokens), so these are also the ratios to reach the same reward"
        : `  rewards differ between the pipelines (sinkflex ${n.ours.rewards.map((x) => x.toFixed(3)).join(", ")}; naive ${n.naive.rewards.map((x) => x.toFixed(3)).join(", ")}): the ratios are per step only`,
    );
  }
  lines.push(`\nrun folder: ${r.runDir}  (watch it with \`sinkflex dashboard --runs ${r.config.runsDir}\`)`);
  return lines.join("\n");
}
