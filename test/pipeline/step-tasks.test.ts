import { describe, expect, it } from "vitest";
import { validateConfig } from "../../src/pipeline/config.js";
import { stepTasks } from "../../src/pipeline/train.js";
import type { SuitePlan } from "../../src/pipeline/tasks.js";

const plan = (name: string, weight: number): SuitePlan => ({
  name,
  envId: `test/${name}-v0`,
  options: {},
  evalOptions: {},
  weight,
  trainTasks: Array.from({ length: 50 }, (_, i) => i),
  // Tasks 0..49 hold 10 distinct contents: each one's first task.
  trainContents: Array.from({ length: 10 }, (_, i) => i),
  sftTasks: Array.from({ length: 50 }, (_, i) => i),
  evalTasks: [],
});
const config = (batchTasks: number, taskSampling: "task" | "content" = "task") =>
  validateConfig({ name: "t", suites: [{ env: "test/a-v0" }], model: { init: {} }, grpo: { batchTasks, groupSize: 2, taskSampling }, sft: { enabled: false } }, "test");
const names = (tasks: { plan: SuitePlan }[]) => tasks.map((t) => t.plan.name);
const count = (tasks: { plan: SuitePlan }[], name: string) => names(tasks).filter((n) => n === name).length;

describe("the GRPO step's tasks", () => {
  it("gives equal weights equal shares, in turns", () => {
    const plans = ["a", "b", "c", "d"].map((n) => plan(n, 1));
    expect(names(stepTasks(config(8), plans, 1))).toEqual(["a", "b", "c", "d", "a", "b", "c", "d"]);
  });

  it("gives each suite the whole part of its weighted share and draws the rest by weight", () => {
    const plans = [plan("a", 1), plan("b", 0.5), plan("c", 2), plan("d", 1)];
    for (let step = 1; step <= 20; step++) {
      const tasks = stepTasks(config(16), plans, step);
      expect(tasks).toHaveLength(16);
      // Shares 16 x (1, 0.5, 2, 1) / 4.5 = 3.56, 1.78, 7.11, 3.56: at least 3, 1, 7 and 3 tasks.
      expect(count(tasks, "a")).toBeGreaterThanOrEqual(3);
      expect(count(tasks, "b")).toBeGreaterThanOrEqual(1);
      expect(count(tasks, "c")).toBeGreaterThanOrEqual(7);
      expect(count(tasks, "d")).toBeGreaterThanOrEqual(3);
      expect(names(tasks).slice(0, 6)).toEqual(["a", "b", "c", "d", "a", "c"]);
    }
  });

  it("is the same for the same seed and step, and differs between steps", () => {
    const plans = [plan("a", 1), plan("b", 1)];
    const s1 = stepTasks(config(6), plans, 1);
    expect(stepTasks(config(6), plans, 1)).toEqual(s1);
    expect(stepTasks(config(6), plans, 2).map((t) => t.taskIndex)).not.toEqual(s1.map((t) => t.taskIndex));
  });

  it("draws every task by weight when the batch is smaller than the suites", () => {
    const plans = [plan("a", 1), plan("b", 1), plan("c", 1)];
    const seen = new Set<string>();
    for (let step = 1; step <= 30; step++) {
      const tasks = stepTasks(config(2), plans, step);
      expect(tasks).toHaveLength(2);
      names(tasks).forEach((n) => seen.add(n));
    }
    expect([...seen].sort()).toEqual(["a", "b", "c"]);
  });

  it("draws from the training tasks, or with taskSampling \"content\" from one task per distinct contents", () => {
    const plans = [plan("a", 1)];
    const drawn = (sampling: "task" | "content") => new Set(Array.from({ length: 40 }, (_, step) => stepTasks(config(8, sampling), plans, step + 1).map((t) => t.taskIndex)).flat());
    const byTask = drawn("task");
    const byContent = drawn("content");
    expect([...byContent].every((t) => t < 10)).toBe(true);
    expect(byContent.size).toBe(10);
    expect([...byTask].some((t) => t >= 10)).toBe(true);
  });

  it("draws only from a suite's GRPO-only tasks when it has them, under either sampling", () => {
    const plans = [{ ...plan("a", 1), rlTasks: [100, 101, 102] }, plan("b", 1)];
    for (const sampling of ["task", "content"] as const) {
      const tasks = Array.from({ length: 20 }, (_, step) => stepTasks(config(8, sampling), plans, step + 1)).flat();
      const a = new Set(tasks.filter((t) => t.plan.name === "a").map((t) => t.taskIndex));
      expect([...a].sort()).toEqual([100, 101, 102]);
      expect(tasks.filter((t) => t.plan.name === "b").every((t) => t.taskIndex < 50)).toBe(true);
    }
  });
});
