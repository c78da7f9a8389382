/**
 * A run's time budget: every deadline of the SFT and GRPO stages and every rule that re-plans SFT's
 * schedule to the steps that fit. Nothing here trains or decides what a step computes: the stages ask
 * "is time up?" and "how many steps to plan for?", and a run without a budget never hears "yes" or a
 * new plan, so it trains exactly as planned.
 *
 * A time-boxed run is not repeatable step for step (the steps that fit depend on the machine's speed),
 * so `--resume` is not exact for it.
 */

/** The time limits a run may be given (all optional; none means no limit). */
export interface TimeBudget {
  /** Time boxes (milliseconds) for SFT and for GRPO, from each stage's start. */
  sftBudgetMs?: number;
  grpoBudgetMs?: number;
  /**
   * Deadlines (`performance.now()` times) for the end of SFT and of GRPO, whatever came before: the demo
   * sets them from its own start, so slow data preparation shortens SFT instead of overrunning its time.
   */
  sftDeadline?: number;
  grpoDeadline?: number;
  /**
   * A time (`performance.now()`) by which the evaluation after RL should be done: GRPO then also ends
   * early enough for an evaluation 15% longer than the one before RL took.
   */
  evalBy?: number;
}

/**
 * The steps a run can plan for under a time budget: those done, plus what the time left buys at the
 * measured rate (with 2% to spare), never more than every epoch's nor fewer than those done.
 */
export function stepsThatFit(o: { step: number; totalSteps: number; msPerStep: number; msLeft: number }): number {
  const more = o.msPerStep > 0 ? Math.floor((0.98 * Math.max(0, o.msLeft)) / o.msPerStep) : Infinity;
  return Math.min(o.totalSteps, o.step + more);
}

/**
 * The plan after a new measure: kept unless the steps that fit differ from it by 20% or more. The last
 * steps of a decaying schedule have its smallest learning rates, so a deadline that cuts some of them
 * costs little; re-planning moves the whole schedule and the context-loss phase, and makes a run's
 * result depend on the noise in its step times. (In the demo, SFT re-planned over 2,358 of its 2,705
 * steps, because its first steps measured 5% slower, left arith at 2% on its held-out tasks; the
 * whole plan cut at that same step left it at 62%, and cut at step 2,633 at 77%.)
 */
export function replannedSteps(planned: number, fits: number): number {
  return 5 * Math.abs(fits - planned) >= planned ? fits : planned;
}

/**
 * SFT's clock. Under a deadline, the learning-rate schedule and the context-loss phase are planned over
 * the steps that fit: measured over the first 120 steps and again every 100 steps until 90% of the plan,
 * and re-planned only when the measure is 20% or more off the plan (steps of different suites take
 * different times: a measure over 20 steps was 13% off the run's rate once). The first steps
 * (allocations, caches warming up) are left out of the measure.
 */
export class SftClock {
  /** The `performance.now()` time SFT must end by (Infinity: none). */
  readonly deadline: number;
  private measuredFrom: { step: number; at: number };
  private refitAt: number;

  constructor(budget: TimeBudget, startStep: number, start = performance.now()) {
    this.deadline = Math.min(start + (budget.sftBudgetMs ?? Infinity), budget.sftDeadline ?? Infinity);
    this.measuredFrom = { step: startStep + 5, at: Infinity };
    this.refitAt = Number.isFinite(this.deadline) ? startStep + 125 : Infinity;
  }

  outOfTime(): boolean {
    return performance.now() > this.deadline;
  }

  /**
   * Called after each SFT step with the steps planned now and every epoch's: the steps to plan for
   * instead, with the measured time per step, when a measure is due and re-planning is called for;
   * undefined otherwise (always, without a deadline).
   */
  afterStep(step: number, plan: { planned: number; total: number }): { steps: number; msPerStep: number } | undefined {
    if (step === this.measuredFrom.step) this.measuredFrom = { step, at: performance.now() };
    if (step < this.refitAt) return undefined;
    const msPerStep = (performance.now() - this.measuredFrom.at) / (step - this.measuredFrom.step);
    const fits = stepsThatFit({ step, totalSteps: plan.total, msPerStep, msLeft: this.deadline - performance.now() });
    const replan = replannedSteps(plan.planned, fits) !== plan.planned;
    const planned = replan ? fits : plan.planned;
    this.refitAt = step < 0.9 * planned ? step + 100 : Infinity;
    return replan ? { steps: fits, msPerStep } : undefined;
  }
}

/**
 * The `performance.now()` time GRPO must end by: its own time box from its start, its deadline, and
 * room before `evalBy` for an evaluation 15% longer than the one before RL (`evalBeforeMs`).
 */
export function grpoDeadline(budget: TimeBudget, start: number, evalBeforeMs: number): number {
  return Math.min(start + (budget.grpoBudgetMs ?? Infinity), budget.grpoDeadline ?? Infinity, (budget.evalBy ?? Infinity) - 1.15 * evalBeforeMs);
}

/**
 * What a short calibration run measured on this machine (milliseconds): the inputs of `planBudgetRun`.
 * Per-unit times are taken over the calibration's own steps, so on a loaded machine they are on the slow side.
 */
export interface Calibration {
  /** One SFT step (batchSize examples). */
  sftMsPerStep: number;
  /** One task's share of a GRPO step (its group's rollouts and update): a step costs batchTasks of them. */
  grpoMsPerTask: number;
  /** How grpoMsPerTask was found, printed with the plan (e.g. from the expert episodes' length in tokens). */
  grpoBasis?: string;
  /** One held-out task's evaluation, per suite (in the suites' order). */
  evalMsPerTask: number[];
  /** Reading one task's contents when the suites are planned, and playing one expert episode. */
  contentMsPerTask: number;
  episodeMs: number;
  /** The calibration's own time, spent before the plan starts. */
  elapsedMs: number;
}

/** The recipe's counts a planned run starts from (those `sinkflex train --config` would run). */
export interface PlanRecipe {
  suites: { name: string; contents: number; evalTasks: number; episodes: number }[];
  sft: { batchSize: number; drillSteps: number; warmupSteps: number };
  grpo: { steps: number; batchTasks: number; warmupSteps: number };
  shares: { copyDrill?: number; sftWarmup?: number; grpoWarmup?: number };
  grpoMinSteps: number;
  evalHalfWidthPoints: number;
  /** GRPO steps the naive pipeline replays after the run (each about NAIVE_STEP_FACTOR of a step). */
  naiveSteps: number;
}

/** The run a time budget buys: every stage's counts, their estimated times, and why (printable lines). */
export interface BudgetPlan {
  /** Whether the recipe's own counts fit (then every count below is the recipe's). */
  whole: boolean;
  /** Per suite: expert episodes and held-out tasks, with the 95% half-width (points, at 50%) it buys. */
  episodes: number[];
  evalTasks: number[];
  halfWidthPoints: number[];
  drillSteps: number;
  sftSteps: number;
  sftWarmup: number;
  grpoSteps: number;
  grpoWarmup: number;
  /** Estimated times (ms) from the plan's start (after the calibration): prep, SFT, each evaluation, GRPO, the naive replay, the margin kept. */
  ms: { prep: number; sft: number; evalBefore: number; grpo: number; evalAfter: number; naive: number; margin: number };
  lines: string[];
}

/** A naive-pipeline GRPO step (the whole context re-encoded every turn) against one of the run's. */
export const NAIVE_STEP_FACTOR = 3;
/** The evaluation after RL is planned 15% longer than the one before (grpoDeadline leaves that room). */
const EVAL_AFTER_FACTOR = 1.15;
/** The share of the time the two evaluations may take where the recipe's held-out sets do not fit. */
const EVAL_SHARE = 0.2;

/** The 95% interval's half-width, in points, of a success rate of 50% over n tasks (its widest). */
export function halfWidthPoints(n: number): number {
  return n > 0 ? 100 * 1.96 * Math.sqrt(0.25 / n) : Infinity;
}

/** The fewest tasks whose 95% interval at 50% is at most `points` wide either side. */
export function tasksForHalfWidth(points: number): number {
  return Math.ceil((1.96 * 0.5 * 100 / points) ** 2);
}

/** The time kept unplanned at the end of a budget, for the noise in the estimates: 4%, 10 s to 45 s. */
export function planMargin(budgetMs: number): number {
  return Math.min(45_000, Math.max(10_000, 0.04 * budgetMs));
}

const sec = (ms: number) => `${Math.round(ms / 1000)}s`;

/**
 * Plans a run to a time budget from a calibration: the recipe's own counts where they fit; otherwise
 * held-out sets shrunk toward the narrowest interval the recipe accepts (within a fifth of the time),
 * GRPO's minimum steps, SFT's steps in the time left (the drill and the warm-ups as shares of them, the
 * suites' episodes in proportion), and what SFT leaves back to GRPO up to its recipe's steps.
 */
export function planBudgetRun(budgetMs: number, cal: Calibration, r: PlanRecipe): BudgetPlan {
  const margin = planMargin(budgetMs);
  const time = budgetMs - cal.elapsedMs - margin;
  const grpoStepMs = cal.grpoMsPerTask * r.grpo.batchTasks;
  const naive = r.naiveSteps * NAIVE_STEP_FACTOR * grpoStepMs;
  const contentsMs = r.suites.reduce((ms, s) => ms + s.contents * cal.contentMsPerTask, 0);
  const evalMs = (n: number[]) => n.reduce((ms, k, i) => ms + k * (cal.evalMsPerTask[i] ?? 0), 0);
  const episodeSteps = (eps: number[]) => eps.reduce((n, e) => n + Math.ceil(e / r.sft.batchSize), 0);
  const fullEpisodes = r.suites.map((s) => s.episodes);
  const fullEval = r.suites.map((s) => s.evalTasks);
  const fullSft = r.sft.drillSteps + episodeSteps(fullEpisodes);
  const episodesMs = (eps: number[]) => eps.reduce((n, e) => n + e, 0) * cal.episodeMs;
  const need = contentsMs + episodesMs(fullEpisodes) + fullSft * cal.sftMsPerStep + (1 + EVAL_AFTER_FACTOR) * evalMs(fullEval) + r.grpo.steps * grpoStepMs + naive;

  let plan: Omit<BudgetPlan, "ms" | "lines" | "halfWidthPoints">;
  if (need <= time) {
    plan = { whole: true, episodes: fullEpisodes, evalTasks: fullEval, drillSteps: r.sft.drillSteps, sftSteps: fullSft, sftWarmup: r.sft.warmupSteps, grpoSteps: r.grpo.steps, grpoWarmup: r.grpo.warmupSteps };
  } else {
    // Held-out sets: the recipe's where they fit a fifth of the time, never below the widest interval accepted.
    const floor = tasksForHalfWidth(r.evalHalfWidthPoints);
    const k = Math.min(1, (EVAL_SHARE * time) / Math.max(1, (1 + EVAL_AFTER_FACTOR) * evalMs(fullEval)));
    // Where even the widest accepted interval does not fit that fifth, the sets shrink to it (at least 20
    // tasks) and the plan prints the wider interval they buy.
    const floorFits = (1 + EVAL_AFTER_FACTOR) * evalMs(fullEval.map((n) => Math.min(n, floor))) <= EVAL_SHARE * time;
    const evalTasks = fullEval.map((n) => Math.min(n, Math.max(floorFits ? floor : 20, Math.round(k * n))));
    const rest = time - (1 + EVAL_AFTER_FACTOR) * evalMs(evalTasks) - naive - contentsMs;
    // GRPO's minimum first (at most 60% of what is left), then SFT, then GRPO again up to its steps.
    let grpoSteps = Math.min(r.grpo.steps, r.grpoMinSteps);
    if (grpoSteps * grpoStepMs > 0.6 * rest) grpoSteps = Math.max(1, Math.floor((0.6 * rest) / grpoStepMs));
    const sftTime = Math.max(0, rest - grpoSteps * grpoStepMs);
    const drillShare = r.sft.drillSteps > 0 ? (r.shares.copyDrill ?? 1) : 0;
    const totalEpisodes = fullEpisodes.reduce((n, e) => n + e, 0);
    // A step of episodes costs its batch's expert episodes as well; the drill's are made from them.
    const perStep = cal.sftMsPerStep + (1 - drillShare) * r.sft.batchSize * cal.episodeMs;
    // Less one step a suite, for the rounding up of each suite's last batch.
    let sftSteps = Math.min(fullSft, Math.max(0, Math.floor(sftTime / perStep) - r.suites.length));
    const drillSteps = Math.min(r.sft.drillSteps, Math.round(drillShare * sftSteps));
    const scale = totalEpisodes > 0 ? Math.min(1, ((sftSteps - drillSteps) * r.sft.batchSize) / totalEpisodes) : 0;
    const episodes = fullEpisodes.map((e) => Math.floor(scale * e));
    sftSteps = drillSteps + episodeSteps(episodes);
    const left = sftTime - sftSteps * cal.sftMsPerStep - episodesMs(episodes);
    if (scale >= 1 && left > 0) grpoSteps = Math.min(r.grpo.steps, grpoSteps + Math.floor(left / grpoStepMs));
    const share = (count: number, s: number | undefined, steps: number) => (s === undefined ? count : Math.min(count, Math.floor(s * steps)));
    plan = {
      whole: false,
      episodes,
      evalTasks,
      drillSteps,
      sftSteps,
      sftWarmup: share(r.sft.warmupSteps, r.shares.sftWarmup, sftSteps),
      grpoSteps,
      grpoWarmup: share(r.grpo.warmupSteps, r.shares.grpoWarmup, grpoSteps),
    };
  }
  const ms = {
    prep: contentsMs + episodesMs(plan.episodes),
    sft: plan.sftSteps * cal.sftMsPerStep,
    evalBefore: evalMs(plan.evalTasks),
    grpo: plan.grpoSteps * grpoStepMs,
    evalAfter: EVAL_AFTER_FACTOR * evalMs(plan.evalTasks),
    naive,
    margin,
  };
  const halfWidths = plan.evalTasks.map(halfWidthPoints);
  const lines = [
    `calibration (${sec(cal.elapsedMs)}): SFT ${(cal.sftMsPerStep / 1000).toFixed(2)}s a step; GRPO ${sec(grpoStepMs)} a step of ${r.grpo.batchTasks} tasks${cal.grpoBasis ? ` (${cal.grpoBasis})` : ""}; ` +
      `evaluation ${r.suites.map((s, i) => `${s.name} ${(1000 / (cal.evalMsPerTask[i] ?? 1)).toFixed(0)}`).join(", ")} tasks/s; expert episodes ${(cal.episodeMs).toFixed(0)}ms each`,
    plan.whole
      ? `plan: the recipe's counts fit ${sec(budgetMs)} (an estimated ${sec(need + cal.elapsedMs)} with the calibration)`
      : `plan: the recipe's counts need an estimated ${sec(need)} of the ${sec(time)} left after the calibration and a ${sec(margin)} margin; scaled to fit:`,
    `  data ${sec(ms.prep)}: ${r.suites.map((s, i) => `${s.name} ${plan.episodes[i]}`).join(", ")} expert episodes${plan.whole ? "" : ` (recipe: ${fullEpisodes.join(", ")})`}`,
    `  SFT ${sec(ms.sft)}: ${plan.sftSteps} steps, the copy drill leading ${plan.drillSteps} (recipe ${r.sft.drillSteps}), warm-up ${plan.sftWarmup}`,
    `  GRPO ${sec(ms.grpo)}: ${plan.grpoSteps} of the recipe's ${r.grpo.steps} steps (at least ${Math.min(r.grpoMinSteps, r.grpo.steps)} where they fit), warm-up ${plan.grpoWarmup}`,
    `  evaluation ${sec(ms.evalBefore)} before RL and ${sec(ms.evalAfter)} after: ${r.suites.map((s, i) => `${s.name} ${plan.evalTasks[i]} tasks (95% CI +-${halfWidths[i]!.toFixed(1)} points)`).join(", ")}`,
    ...(naive > 0 ? [`  naive replay ${sec(naive)}`] : []),
  ];
  return { ...plan, halfWidthPoints: halfWidths, ms, lines };
}
