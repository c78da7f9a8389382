import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { demoConfig } from "../../src/pipeline/demo.js";
import { planSuites } from "../../src/pipeline/tasks.js";

registerBundledEnvs();

describe("the demo's config", () => {
  it("is valid, and every suite holds out its evaluation tasks (a third of them where it has fewer than three times as many)", async () => {
    for (const quick of [true, false]) {
      const cfg = demoConfig({ runsDir: "unused", quick });
      expect(cfg.suites).toHaveLength(4);
      const plans = await planSuites(cfg);
      plans.forEach((p, i) => {
        const total = p.trainTasks.length + p.evalTasks.length;
        expect(p.evalTasks, p.name).toHaveLength(Math.min(cfg.suites[i]!.evalTasks ?? cfg.eval.tasksPerSuite, Math.floor(total / 3)));
        expect(p.evalTasks.length, p.name).toBeGreaterThanOrEqual(quick ? 4 : 80);
        expect(p.trainTasks.length, p.name).toBeGreaterThanOrEqual(2 * p.evalTasks.length);
        expect(new Set([...p.trainTasks, ...p.evalTasks]).size).toBe(p.trainTasks.length + p.evalTasks.length);
        // The expert episodes (one per training task, in order) have tasks of their own to play.
        if (!quick) expect(p.trainTasks.length, p.name).toBeGreaterThanOrEqual(Math.min(cfg.sft.expertEpisodes, total - p.evalTasks.length));
      });
    }
  }, 60_000);
});
