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
