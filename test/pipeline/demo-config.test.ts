/**
 * The demo's recipe as data: configs/demo.yaml and configs/demo-quick.yaml, loaded and scaled by
 * demoConfig, must give exactly the configs the recipe gave when it was code (captured into
 * fixtures/demo-configs.json from that code), and the results table's wording. Light: no task is
 * generated here (the suites' held-out split is checked in demo-plan.test.ts).
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { bf16Available } from "../../src/kernels/index.js";
import { loadConfigFile, validateConfig } from "../../src/pipeline/config.js";
import { demoSuiteRow, formatDemoTable, grpoCutShort, sftCutShort } from "../../src/pipeline/demo.js";
import { demoConfig, demoConfigFile } from "../../src/pipeline/demo.js";
import type { SuiteEval } from "../../src/pipeline/evaluate.js";
import { wilsonInterval } from "../../src/pipeline/stats.js";

/**
 * Keyed "full|quick"-"<minutes>min"-"bf16|fp32", each demoConfig({ runsDir: "runs", quick, minutes, matmul })
 * of the code recipe, validated again here so that a field the schema gained since (with its default) is
 * filled in; every value the recipe set stays pinned.
 */
const captured = JSON.parse(readFileSync(new URL("./fixtures/demo-configs.json", import.meta.url), "utf8")) as Record<string, unknown>;
const plain = (x: unknown) => JSON.parse(JSON.stringify(x)) as unknown;
const expected = Object.fromEntries(Object.entries(captured).map(([key, config]) => [key, plain(validateConfig(config, key))]));
const auto = bf16Available() ? "bf16" : "fp32";

describe("the demo's config, loaded from configs/demo.yaml", () => {
  it("is deep-equal to the code recipe's for the default run, --quick, --minutes 40 and --matmul fp32", () => {
    expect(plain(demoConfig({ runsDir: "runs" }))).toStrictEqual(expected[`full-20min-${auto}`]);
    expect(plain(demoConfig({ runsDir: "runs", quick: true }))).toStrictEqual(expected[`quick-20min-${auto}`]);
    expect(plain(demoConfig({ runsDir: "runs", minutes: 40 }))).toStrictEqual(expected[`full-40min-${auto}`]);
    expect(plain(demoConfig({ runsDir: "runs", matmul: "fp32" }))).toStrictEqual(expected["full-20min-fp32"]);
  });

  it("is deep-equal to the code recipe's for every captured run (quick or not, 10 to 40 minutes, bf16 and fp32)", () => {
    expect(Object.keys(expected)).toHaveLength(12);
    for (const [key, config] of Object.entries(expected)) {
      const [size, minutes, matmul] = key.split("-") as [string, string, "bf16" | "fp32"];
      const m = Number.parseInt(minutes, 10);
      expect(plain(demoConfig({ runsDir: "runs", quick: size === "quick", minutes: m === 20 ? undefined : m, matmul })), key).toStrictEqual(config);
    }
  });

  it("scales SFT's counts with the minutes (never below 20's) and by 1.4 under bf16 products, as the file's scale section declares", () => {
    const fp32 = demoConfig({ runsDir: "runs", matmul: "fp32" });
    const bf16 = demoConfig({ runsDir: "runs", matmul: "bf16" });
    expect(bf16.sft.expertEpisodes).toBe(Math.round(fp32.sft.expertEpisodes * 1.4));
    expect(demoConfig({ runsDir: "runs", matmul: "fp32", minutes: 40 }).sft.expertEpisodes).toBe(2 * fp32.sft.expertEpisodes);
    expect(demoConfig({ runsDir: "runs", matmul: "fp32", minutes: 5 }).sft.expertEpisodes).toBe(fp32.sft.expertEpisodes);
    bf16.suites.forEach((s, i) => {
      if (s.sftEpisodes !== undefined) expect(s.sftEpisodes).toBe(Math.round(fp32.suites[i]!.sftEpisodes! * 1.4));
    });
    // The quick recipe declares no scale: its counts stay.
    expect(demoConfig({ runsDir: "runs", quick: true, minutes: 60, matmul: "bf16" }).sft.expertEpisodes).toBe(8);
    expect(demoConfig({ runsDir: "runs" }).model.matmul).toBe(auto);
  });

  it("is usable as it is by `sinkflex train --config`: the file alone gives the fp32, 20-minute recipe", () => {
    expect(plain(loadConfigFile(demoConfigFile()))).toStrictEqual(expected["full-20min-fp32"]);
    expect(plain(loadConfigFile(demoConfigFile(true)))).toStrictEqual(expected["quick-20min-fp32"]);
    expect(plain(loadConfigFile(demoConfigFile(), { matmul: "bf16", minutes: 40 }))).toStrictEqual(expected["full-40min-bf16"]);
  });

  it("takes the seed, the run folder and a name from its caller", () => {
    const cfg = demoConfig({ runsDir: "elsewhere", seed: 3, name: "mine", matmul: "fp32" });
    expect(cfg).toMatchObject({ runsDir: "elsewhere", seed: 3, name: "mine" });
    expect(demoConfig({ runsDir: "runs", quick: true }).name).toBe("demo-quick");
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
