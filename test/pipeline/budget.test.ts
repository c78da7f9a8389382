import { describe, expect, it } from "vitest";
import { grpoDeadline, replannedSteps, SftClock, stepsThatFit } from "../../src/pipeline/budget.js";
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
