import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { bf16Available } from "../../src/kernels/index.js";
import { demoConfig, demoSuiteRow, formatDemoTable, grpoCutShort, sftCutShort } from "../../src/pipeline/demo.js";
import type { SuiteEval } from "../../src/pipeline/evaluate.js";
import { wilsonInterval } from "../../src/pipeline/stats.js";
import { planSuites } from "../../src/pipeline/tasks.js";

registerBundledEnvs();

describe("the demo's config", () => {
  it("is valid, and every suite holds out its evaluation tasks (at most a third of its distinct ones)", async () => {
    for (const [quick, matmul] of [[true, "fp32"], [false, "fp32"], [false, "bf16"]] as const) {
      const cfg = demoConfig({ runsDir: "unused", quick, matmul });
      expect(cfg.model.matmul).toBe(matmul);
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
  }, 60_000);

  it("gives SFT 1.4 times the expert episodes with bf16 products, and picks bf16 by itself only where the CPU has a bf16 unit (AMX or AVX512-BF16)", () => {
    const fp32 = demoConfig({ runsDir: "unused", matmul: "fp32" });
    const bf16 = demoConfig({ runsDir: "unused", matmul: "bf16" });
    expect(bf16.sft.expertEpisodes).toBe(Math.round(fp32.sft.expertEpisodes * 1.4));
    bf16.suites.forEach((s, i) => {
      if (s.sftEpisodes !== undefined) expect(s.sftEpisodes).toBe(Math.round(fp32.suites[i]!.sftEpisodes! * 1.4));
    });
    expect(demoConfig({ runsDir: "unused" }).model.matmul).toBe(bf16Available() ? "bf16" : "fp32");
  });
});

describe("the demo's results table", () => {
  const suiteEval = (successes: number, trials: number): SuiteEval => {
    const ci = wilsonInterval(successes, trials);
    return { successes, trials, rate: successes / trials, ciLow: ci.low, ciHigh: ci.high, passAtK: successes / trials, k: 1, avgReward: successes / trials, tokens: 10, wallMs: 1000 };
  };
  it("gives every suite's own number of held-out tasks and whether it moved beyond the intervals", () => {
    const text = formatDemoTable({
      rows: [demoSuiteRow("arith", suiteEval(1440, 2000), suiteEval(1540, 2000)), demoSuiteRow("sql", suiteEval(0, 80), suiteEval(1, 80))],
      totals: { modelTokens: 100, wallSeconds: 60, sftSeconds: 20, grpoSeconds: 30, sftSteps: 200, sftAllSteps: 200, grpoSteps: 52, grpoAllSteps: 52 },
      runDir: "runs/demo",
      config: demoConfig({ runsDir: "runs", quick: true }),
    });
    const lines = text.split("\n");
    expect(lines.find((l) => l.startsWith("arith"))).toMatch(/^arith\s+2000\s+72\.0%\s+77\.0%\s+\+5\.0\s+75-79%\s+yes/);
    expect(lines.find((l) => l.startsWith("sql"))).toMatch(/^sql\s+80\s+0\.0%\s+1\.3%\s+\+1\.3\s+\S+\s+no/);
    expect(text).toContain("improved beyond the 95% intervals on 1 of 2 suites");
    expect(text).not.toContain("note: SFT ran");
  });

  it("warns when the time budget ended SFT well before its planned steps", () => {
    expect(sftCutShort({ sftSteps: 4455, sftAllSteps: 4455, sftSeconds: 483 })).toBeUndefined();
    expect(sftCutShort({ sftSteps: 4100, sftAllSteps: 4455, sftSeconds: 483 })).toBeUndefined(); // 92%: the last, smallest learning rates
    expect(sftCutShort({ sftSteps: 0, sftAllSteps: 0, sftSeconds: 0 })).toBeUndefined(); // no SFT
    const table = formatDemoTable({ rows: [], totals: { modelTokens: 1, wallSeconds: 60, sftSeconds: 10, grpoSeconds: 30, sftSteps: 100, sftAllSteps: 200, grpoSteps: 2, grpoAllSteps: 2 }, runDir: "runs/demo", config: demoConfig({ runsDir: "runs", quick: true }) });
    expect(table).toContain("note: SFT ran 100 of its 200 steps in its share of the time (0.10s a step)");
    expect(sftCutShort({ sftSteps: 2444, sftAllSteps: 4455, sftSeconds: 438 })).toMatch(/^note: SFT ran 2,444 of its 4,455 steps in its share of the time \(0\.18s a step\)\. .*may learn too little/);
  });

  it("says when the time budget ended GRPO before the recipe's steps", () => {
    expect(grpoCutShort({ grpoSteps: 52, grpoAllSteps: 52, grpoSeconds: 330 })).toBeUndefined();
    expect(grpoCutShort({ grpoSteps: 0, grpoAllSteps: 0, grpoSeconds: 0 })).toBeUndefined(); // no GRPO
    const table = formatDemoTable({ rows: [], totals: { modelTokens: 1, wallSeconds: 60, sftSeconds: 10, grpoSeconds: 280, sftSteps: 200, sftAllSteps: 200, grpoSteps: 40, grpoAllSteps: 52 }, runDir: "runs/demo", config: demoConfig({ runsDir: "runs", quick: true }) });
    expect(table).toContain("note: GRPO ran 40 of its 52 steps in its share of the time (7.0s a step).");
    expect(table).not.toContain("note: SFT ran");
  });
});
