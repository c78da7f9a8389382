import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { planSuites } from "../../src/pipeline/tasks.js";
import { validateConfig } from "../../src/rl/config.js";

registerBundledEnvs();

const config = (suite: Record<string, unknown>, tasksPerSuite = 50) =>
  validateConfig({ suites: [{ env: "sinkflex/arith-v0", options: { difficulty: 1, count: 600 }, ...suite }], model: { init: {} }, eval: { tasksPerSuite } });

describe("planSuites", () => {
  it("holds out a suite's own evalTasks count, else eval.tasksPerSuite, at most a third of the tasks", async () => {
    expect((await planSuites(config({})))[0]!.evalTasks).toHaveLength(50);
    expect((await planSuites(config({ evalTasks: 120 })))[0]!.evalTasks).toHaveLength(120);
    expect((await planSuites(config({ evalTasks: 5000 })))[0]!.evalTasks).toHaveLength(200);
  });

  it("keeps the training tasks' order whatever number is held out, and never trains on a held-out task", async () => {
    const [small] = await planSuites(config({ evalTasks: 20 }));
    const [large] = await planSuites(config({ evalTasks: 150 }));
    expect(large!.trainTasks).toEqual(small!.trainTasks.slice(0, large!.trainTasks.length));
    for (const p of [small!, large!]) {
      expect(p.trainTasks.length + p.evalTasks.length).toBe(600);
      const train = new Set(p.trainTasks);
      expect(p.evalTasks.some((t) => train.has(t))).toBe(false);
    }
    // The larger held-out set contains the smaller one.
    expect(new Set(large!.evalTasks)).toEqual(new Set([...large!.evalTasks, ...small!.evalTasks]));
  });

  it("rejects a count that is not a positive integer, naming the field", () => {
    expect(() => config({ evalTasks: 0 })).toThrow(/suites\.0\.evalTasks/);
    expect(() => config({ evalTasks: 2.5 })).toThrow(/suites\.0\.evalTasks/);
  });
});
