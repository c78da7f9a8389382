import { existsSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import type { Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startDashboard } from "../../src/dashboard/server.js";
import { RunDir } from "../../src/pipeline/run-dir.js";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));

/** Writes a run folder in the pipeline's format, as a training run does. */
function writeRun(runsDir: string, name: string, rewardSlope: number): void {
  const run = RunDir.create(runsDir, name, { resume: false });
  run.writeConfig({ name, suites: [{ env: "sinkflex/arith-v0" }, { env: "sinkflex/spider-sql-v0" }] });
  for (let step = 1; step <= 6; step++) run.appendMetrics({ stage: "sft", step, time: step, loss: 3 / step, tokensPerSec: 1000 });
  for (let step = 1; step <= 10; step++) {
    run.appendMetrics({
      stage: "grpo",
      step,
      time: 10 + step,
      loss: 0.1 / step,
      kl: 0.001 * step,
      clipFraction: 0.05,
      entropy: 1.2 - 0.02 * step,
      tokensPerSec: 900,
      staleness: 0,
      reward: { arith: Math.min(1, 0.2 + rewardSlope * step), sql: 0.1 + 0.02 * step },
    });
  }
  const records = [0, 1, 2, 3].map((index) => ({
    suite: "arith",
    envId: "sinkflex/arith-v0",
    taskIndex: 7,
    group: 0,
    index,
    reward: index % 2,
    advantage: index % 2 ? 1 : -1,
    endReason: "terminated",
    policyVersion: 3,
    evidence: { expected: "12", given: index % 2 ? "12" : "13" },
    messages: [
      { role: "user", content: "What is 5 + 7?" },
      { role: "assistant", content: "", toolCalls: [{ id: "c1", name: "submit_answer", arguments: `{"answer": ${index % 2 ? 12 : 13}}` }] },
      { role: "tool", toolCallId: "c1", name: "submit_answer", content: index % 2 ? "correct" : "wrong" },
    ],
    tokens: [1, 2, 3, 4, 5],
    pieces: ["<|im_start|>", "user", "\n5+7", "<tool_call>", "12"],
    lossMask: [0, 0, 0, 1, 1],
    logprobs: [0, 0, 0, -0.1, -2.5],
  }));
  run.writeTrajectories("grpo", 10, records);
  run.writeEval({
    stages: {
      "before-rl": { arith: { successes: 10, trials: 50, rate: 0.2, ciLow: 0.11, ciHigh: 0.33, avgReward: 0.2 } },
      "after-rl": { arith: { successes: 30, trials: 50, rate: 0.6, ciLow: 0.46, ciHigh: 0.72, avgReward: 0.6 } },
    },
  });
  run.writeStatus({ state: "done", stage: "eval", step: 10, totalSteps: 10, startedAt: new Date().toISOString(), updatedAt: new Date().toISOString() });
}

describe("dashboard server", () => {
  let server: Server;
  let url: string;
  let runsDir: string;
  beforeAll(async () => {
    const root = mkdtempSync(join(tmpdir(), "dash-"));
    runsDir = join(root, "runs");
    mkdirSync(runsDir);
    writeRun(runsDir, "alpha", 0.08);
    writeRun(runsDir, "beta", 0.03);
    writeFileSync(join(root, "secret.txt"), "do not serve");
    symlinkSync(join(root, "secret.txt"), join(runsDir, "alpha", "trajectories", "leak.jsonl"));
    ({ server, url } = await startDashboard({ runsDir, port: 0 }));
  });
  afterAll(() => server?.close());

  it("lists runs and serves metrics incrementally", async () => {
    const runs = (await (await fetch(`${url}api/runs`)).json()) as { name: string }[];
    expect(runs.map((r) => r.name).sort()).toEqual(["alpha", "beta"]);
    const m = (await (await fetch(`${url}api/runs/alpha/metrics?from=10`)).json()) as { records: unknown[]; next: number };
    expect(m.records).toHaveLength(6);
    expect(m.next).toBe(16);
  });

  it("refuses paths outside the runs folder and any write", async () => {
    for (const path of ["api/runs/..%2F..%2Fetc/metrics", "api/runs/alpha/trajectories/..%2F..%2Fconfig.json", "api/runs/alpha/trajectories/leak.jsonl"]) {
      const res = await fetch(`${url}${path}`);
      expect([400, 403, 404]).toContain(res.status);
      expect(await res.text()).not.toContain("do not serve");
    }
    const post = await fetch(`${url}api/runs`, { method: "POST", body: "{}" });
    expect(post.status).toBe(405);
    expect((await fetch(`${url}api/runs/nope/metrics`)).status).toBe(404);
  });

  it.skipIf(!CHROMIUM)("renders charts and a trajectory in a real browser", async () => {
    let browser: Browser | undefined;
    try {
      browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
      const page = await browser.newPage({ viewport: { width: 1400, height: 1600 } });
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      await page.goto(`${url}#alpha`);
      await page.waitForSelector("body[data-ready='1']", { timeout: 20_000 });
      await page.waitForSelector(".rollout", { timeout: 20_000 });
      await page.selectOption("#compare-select", "beta");
      await page.waitForFunction('document.querySelectorAll(".chart")[0]?.querySelectorAll("polyline.series").length === 4', undefined, { timeout: 10_000 });
      const lines = await page.locator("polyline.series").count();
      expect(lines).toBeGreaterThanOrEqual(10);
      expect(await page.locator(".rollout").count()).toBe(4);
      expect(await page.locator(".tok.trained").count()).toBe(8);
      expect(await page.locator("#eval-table").innerText()).toContain("+40.0");
      mkdirSync("test/.artifacts", { recursive: true });
      await page.screenshot({ path: "test/.artifacts/dashboard.png", fullPage: true });
      expect(errors).toEqual([]);
    } finally {
      await browser?.close();
    }
  });
});
