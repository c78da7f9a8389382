/**
 * The demo's task split: every suite of the demo's recipes holds out its evaluation tasks (at most a third
 * of its distinct ones) and keeps enough training tasks for its expert episodes. Heavy: it generates
 * every suite's tasks (12,000 each; household's games are nearly all of the time), so it plans the full
 * recipe once (the split does not depend on the matmul precision or the SFT counts that scaling
 * changes) and the quick one once. Kept apart from demo-config.test.ts, which generates nothing.
 */
import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { demoConfig } from "../../src/pipeline/demo.js";
import { planSuites } from "../../src/pipeline/tasks.js";

registerBundledEnvs();

describe("the demo's task split", () => {
  // Measured on the 2-core machine: 26 s at a load near 2, 40 s at about 7, 89 s at about 12, 106 s at about 15 (household's
  // generation alone 99 s); the limit leaves about three times the slowest.
  it("holds out every suite's evaluation tasks (at most a third of its distinct ones) and leaves the expert tasks to play", async () => {
    for (const quick of [true, false]) {
      // bf16: the larger SFT counts, the stricter bound on the training tasks below.
      const cfg = demoConfig({ runsDir: "unused", quick, matmul: "bf16" });
      expect(cfg.suites).toHaveLength(4);
      const plans = await planSuites(cfg);
      plans.forEach((p, i) => {
        const total = p.trainTasks.length + p.evalTasks.length;
        // At most the suite's count, and at most a third of its distinct tasks (planSuites' own test checks that bound).
        expect(p.evalTasks.length, p.name).toBeLessThanOrEqual(Math.min(cfg.suites[i]!.evalTasks ?? cfg.eval.tasksPerSuite, Math.floor(total / 3)));
        expect(p.evalTasks.length, p.name).toBeGreaterThanOrEqual(quick ? 4 : 80);
        expect(p.trainTasks.length, p.name).toBeGreaterThanOrEqual(2 * p.evalTasks.length);
        expect(new Set([...p.trainTasks, ...p.evalTasks]).size).toBe(p.trainTasks.length + p.evalTasks.length);
        // The expert episodes (one per training task, in order) have tasks of their own to play.
        if (!quick) expect(p.trainTasks.length, p.name).toBeGreaterThanOrEqual(Math.min(cfg.sft.expertEpisodes, total - p.evalTasks.length));
      });
    }
  }, 300_000);
});
