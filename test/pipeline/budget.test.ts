import { describe, expect, it } from "vitest";
import { grpoDeadline, halfWidthPoints, planBudgetRun, replannedSteps, SftClock, stepsThatFit, tasksForHalfWidth, type BudgetPlan, type Calibration, type PlanRecipe } from "../../src/pipeline/budget.js";
import * as sinkflex from "../../src/index.js";

describe("the time budget", () => {
  it("re-plans only when the steps that fit are 20% or more off the plan", () => {
    // 2,358 of 2,705 (13% short): the deadline cuts the last steps, the plan stays.
    expect(replannedSteps(2705, 2358)).toBe(2705);
    expect(replannedSteps(2705, 2165)).toBe(2705);
    expect(replannedSteps(2705, 2164)).toBe(2164);
    expect(replannedSteps(1000, 1199)).toBe(1000);
    expect(replannedSteps(1000, 1200)).toBe(1200);
  });

  it("plans the steps that fit a time budget, between those done and every epoch's", () => {
    expect(stepsThatFit({ step: 25, totalSteps: 1000, msPerStep: 500, msLeft: 100_000 })).toBe(25 + 196);
    expect(stepsThatFit({ step: 25, totalSteps: 100, msPerStep: 500, msLeft: 100_000 })).toBe(100);
    expect(stepsThatFit({ step: 25, totalSteps: 1000, msPerStep: 500, msLeft: -10 })).toBe(25);
  });

  it("never re-plans or ends a stage without a budget", () => {
    const clock = new SftClock({}, 0);
    expect(clock.deadline).toBe(Infinity);
    for (let step = 1; step <= 400; step++) expect(clock.afterStep(step, { planned: 300, total: 300 })).toBeUndefined();
    expect(clock.outOfTime()).toBe(false);
    expect(grpoDeadline({}, 0, 5_000)).toBe(Infinity);
  });

  it("ends GRPO at the earliest of its time box, its deadline and the room left for the evaluation after RL", () => {
    expect(grpoDeadline({ grpoBudgetMs: 1000 }, 50, 0)).toBe(1050);
    expect(grpoDeadline({ grpoBudgetMs: 1000, grpoDeadline: 900 }, 50, 0)).toBe(900);
    expect(grpoDeadline({ grpoBudgetMs: 1000, evalBy: 1000 }, 50, 100)).toBeCloseTo(885, 9);
  });

  it("is the pipeline's own: the planning helpers are not part of the library's API", () => {
    expect("stepsThatFit" in sinkflex).toBe(false);
    expect("replannedSteps" in sinkflex).toBe(false);
  });
});

describe("planBudgetRun (calibrate, then plan)", () => {
  // The demo's recipe as planRecipe reads configs/demo.yaml under fp32 (its counts, capped as the suites cap them).
  const recipe: PlanRecipe = {
    suites: [
      { name: "arith", contents: 12000, evalTasks: 2000, episodes: 500 },
      { name: "spider-sql", contents: 240, evalTasks: 80, episodes: 640 },
      { name: "alfworld-gen", contents: 12000, evalTasks: 1600, episodes: 8000 },
      { name: "restapi", contents: 12000, evalTasks: 2000, episodes: 1500 },
    ],
    sft: { batchSize: 8, drillSteps: 1000, warmupSteps: 50 },
    grpo: { steps: 72, batchTasks: 32, warmupSteps: 5 },
    shares: { copyDrill: 0.45, sftWarmup: 0.05, grpoWarmup: 0.1 },
    grpoMinSteps: 50,
    evalHalfWidthPoints: 5,
    naiveSteps: 1,
  };
  const total = (p: BudgetPlan) => Object.values(p.ms).reduce((a, b) => a + b, 0);

  it("keeps the recipe's counts where they fit the budget", () => {
    const fast: Calibration = { sftMsPerStep: 120, grpoMsPerTask: 150, evalMsPerTask: [10, 10, 12, 10], contentMsPerTask: 1, episodeMs: 4, elapsedMs: 20_000 };
    const plan = planBudgetRun(20 * 60_000, fast, recipe);
    expect(plan.whole).toBe(true);
    expect(plan).toMatchObject({ episodes: [500, 640, 8000, 1500], evalTasks: [2000, 80, 1600, 2000], drillSteps: 1000, sftWarmup: 50, grpoSteps: 72, grpoWarmup: 5 });
    expect(total(plan) + fast.elapsedMs).toBeLessThanOrEqual(20 * 60_000);
  });

  it("on a machine too slow for the recipe, the drill is a share of the SFT steps that fit, GRPO gets its minimum, and the evaluation shrinks, all within the budget", () => {
    // The 2-core AVX2 machine: SFT at 1.75 steps/s, evaluation at 12 tasks/s, a GRPO step of about 40 s.
    const slow: Calibration = { sftMsPerStep: 570, grpoMsPerTask: 1200, evalMsPerTask: [83, 83, 83, 83], contentMsPerTask: 2, episodeMs: 8, elapsedMs: 45_000 };
    const plan = planBudgetRun(20 * 60_000, slow, recipe);
    expect(plan.whole).toBe(false);
    // The old recipe led 1,000 drill steps whatever fit: every one of the 917 steps that fit was the drill.
    expect(plan.drillSteps).toBeLessThanOrEqual(0.45 * plan.sftSteps);
    expect(plan.sftSteps - plan.drillSteps).toBeGreaterThan(0);
    expect(plan.episodes.every((e) => e > 0)).toBe(true);
    expect(plan.grpoSteps).toBeGreaterThanOrEqual(1);
    expect(plan.evalTasks.every((n, i) => n <= recipe.suites[i]!.evalTasks)).toBe(true);
    expect(plan.evalTasks.filter((n) => n >= 385).length).toBeGreaterThanOrEqual(3);
    expect(plan.sftWarmup).toBeLessThanOrEqual(0.05 * plan.sftSteps);
    expect(total(plan) + slow.elapsedMs).toBeLessThanOrEqual(20 * 60_000);
    expect(plan.lines.join("\n")).toMatch(/scaled to fit/);
    expect(plan.lines.join("\n")).toMatch(/95% CI \+-5\.0 points/);
  });

  it("gives GRPO its minimum steps before SFT gets its time", () => {
    const slowish: Calibration = { sftMsPerStep: 300, grpoMsPerTask: 200, evalMsPerTask: [40, 40, 40, 40], contentMsPerTask: 1, episodeMs: 4, elapsedMs: 30_000 };
    const plan = planBudgetRun(20 * 60_000, slowish, recipe);
    expect(plan.whole).toBe(false);
    expect(plan.grpoSteps).toBeGreaterThanOrEqual(50);
    expect(total(plan) + slowish.elapsedMs).toBeLessThanOrEqual(20 * 60_000);
  });

  it("reports the 95% half-width a held-out set buys, and the set a half-width needs", () => {
    expect(tasksForHalfWidth(5)).toBe(385);
    expect(halfWidthPoints(385)).toBeLessThanOrEqual(5);
    expect(halfWidthPoints(2000)).toBeCloseTo(2.19, 2);
  });
});

describe("planBudgetRun on a budget too short for the widest accepted interval", () => {
  it("shrinks the held-out sets below it to fit a fifth of the time, and prints the wider interval", () => {
    const recipe: PlanRecipe = {
      suites: [{ name: "arith", contents: 12000, evalTasks: 2000, episodes: 500 }, { name: "restapi", contents: 12000, evalTasks: 2000, episodes: 1500 }],
      sft: { batchSize: 8, drillSteps: 1000, warmupSteps: 50 },
      grpo: { steps: 72, batchTasks: 32, warmupSteps: 5 },
      shares: { copyDrill: 0.45 },
      grpoMinSteps: 50,
      evalHalfWidthPoints: 5,
      naiveSteps: 0,
    };
    const cal: Calibration = { sftMsPerStep: 1000, grpoMsPerTask: 700, evalMsPerTask: [200, 200], contentMsPerTask: 0.5, episodeMs: 2, elapsedMs: 60_000 };
    const plan = planBudgetRun(6 * 60_000, cal, recipe);
    expect(plan.evalTasks.every((n) => n < 385 && n >= 20)).toBe(true);
    expect(plan.ms.evalBefore + plan.ms.evalAfter).toBeLessThanOrEqual(0.2 * (6 * 60_000 - 60_000));
    expect(Object.values(plan.ms).reduce((a, b) => a + b, 0) + cal.elapsedMs).toBeLessThanOrEqual(6 * 60_000);
  });
});

