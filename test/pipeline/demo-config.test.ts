import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { demoConfig } from "../../src/pipeline/demo.js";
import { planSuites } from "../../src/pipeline/tasks.js";

registerBundledEnvs();

describe("the demo's config", () => {
  it("is valid, and every suite makes its tasks with a full held-out set", async () => {
    for (const quick of [true, false]) {
      const cfg = demoConfig({ runsDir: "unused", quick });
      expect(cfg.suites).toHaveLength(4);
      const plans = await planSuites(cfg);
      for (const p of plans) {
        expect(p.evalTasks, p.name).toHaveLength(cfg.eval.tasksPerSuite);
        expect(p.trainTasks.length, p.name).toBeGreaterThanOrEqual(cfg.eval.tasksPerSuite);
        expect(new Set([...p.trainTasks, ...p.evalTasks]).size).toBe(p.trainTasks.length + p.evalTasks.length);
      }
    }
  }, 60_000);
});
