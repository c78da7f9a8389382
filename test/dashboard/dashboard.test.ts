import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import type { Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startDashboard } from "../../src/dashboard/server.js";
import { train } from "../../src/pipeline/train.js";
import { parityConfig, registerParityEnv } from "../pipeline/parity-env.js";

registerParityEnv();

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));

describe("dashboard server", () => {
  let server: Server;
  let url: string;
  let runsDir: string;
  let root: string;
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "dash-"));
    runsDir = join(root, "runs");
    mkdirSync(runsDir);
    // Two real (tiny) training runs: the page is checked against the files a run writes.
    // Alpha learns from a reward rubric (the verifier and the env's progress), which the viewer shows.
    const alpha = parityConfig(runsDir, "alpha", 3);
    await train({ ...alpha, suites: [{ ...alpha.suites[0]!, reward: { verifier: 1, progress: 1, format: 0 } }] }, { quiet: true });
    await train(parityConfig(runsDir, "beta", 4), { quiet: true });
    writeFileSync(join(root, "secret.txt"), "do not serve");
    symlinkSync(join(root, "secret.txt"), join(runsDir, "alpha", "trajectories", "leak.jsonl"));
    ({ server, url } = await startDashboard({ runsDir, port: 0 }));
  }, 180_000);
  afterAll(() => {
    server?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it("lists runs and serves metrics incrementally", async () => {
    const runs = (await (await fetch(`${url}api/runs`)).json()) as { name: string }[];
    expect(runs.map((r) => r.name).sort()).toEqual(["alpha", "beta"]);
    const all = (await (await fetch(`${url}api/runs/alpha/metrics`)).json()) as { records: { stage: string }[]; next: number; file: string; skipped: number };
    expect(all.records.filter((r) => r.stage === "grpo")).toHaveLength(3);
    expect(all.skipped).toBe(0);
    // The next poll starts where this one stopped (a byte offset in that file): nothing new yet.
    const m = (await (await fetch(`${url}api/runs/alpha/metrics?from=${all.next}&file=${all.file}`)).json()) as { records: unknown[]; next: number };
    expect(m.records).toHaveLength(0);
    expect(m.next).toBe(all.next);
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
      // Comparing: the reward chart holds one line per run.
      await page.waitForFunction('document.querySelectorAll(".chart")[0]?.querySelectorAll("polyline.series").length === 2', undefined, { timeout: 10_000 });
      // The per-suite episode charts: turns per episode and the share a limit cut off, one line per run.
      expect(await page.locator(".chart", { hasText: "model turns per episode" }).locator("polyline.series").count()).toBe(2);
      expect(await page.locator(".chart", { hasText: "episodes cut off by a limit" }).locator("polyline.series").count()).toBe(2);
      const lines = await page.locator("polyline.series").count();
      expect(lines).toBeGreaterThanOrEqual(10);
      // The viewer shows the group's 4 rollouts side by side, with trained tokens marked.
      expect(await page.locator(".rollout").count()).toBe(4);
      expect(await page.locator(".tok.trained").count()).toBeGreaterThan(0);
      expect(await page.locator(".rollout .msg.user").count()).toBe(4);
      // Each rollout's reward with its rubric components.
      expect(await page.locator(".rollout header .reward").first().innerText()).toMatch(/^reward \d\.\d\d = verifier [01]\.00 · progress \d\.\d\d/);
      const table = await page.locator("#eval-table").innerText();
      expect(table).toContain("parity");
      expect(table).toMatch(/before RL[\s\S]*after RL/);
      mkdirSync("test/.artifacts", { recursive: true });
      await page.screenshot({ path: "test/.artifacts/dashboard.png", fullPage: true });
      expect(errors).toEqual([]);
    } finally {
      await browser?.close();
    }
  });
});
