/**
 * The dashboard against run folders made by real (tiny) training runs: the API (runs, metrics cursor,
 * checkpoints, CSV export, the static report) and the page in headless Chromium at 1280 px (no
 * horizontal overflow with a group of 8 rollouts, axis titles on every chart, each view free of console
 * errors, compare mode, the same task of two runs or two steps side by side), why each run ended as the
 * pipeline recorded it (completed, a time budget, stopped by the user, failed). It saves the screenshots docs/dashboard.md shows:
 * to docs/images/ with SINKFLEX_UPDATE_SCREENSHOTS=1, else to a folder under the system's temp folder.
 * It is not the hostile-input suite (hostile.test.ts).
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import type { Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildReport, startDashboard } from "../../src/dashboard/index.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { train } from "../../src/pipeline/train.js";
import { parityConfig, registerParityEnv } from "../pipeline/parity-env.js";

/** Where the screenshots go: the docs' own folder only when asked, so a test run leaves the tree unchanged. */
const SHOTS = process.env.SINKFLEX_UPDATE_SCREENSHOTS === "1" ? "docs/images" : join(tmpdir(), "sinkflex-dashboard-shots");

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
    // Real (tiny) training runs: the page is checked against the files a run writes.
    // Alpha, the newest run that is no replay, learns from a reward rubric (the verifier and the env's progress), with groups of 8 rollouts.
    await train(parityConfig(runsDir, "beta", 4), { quiet: true });
    const alpha = parityConfig(runsDir, "alpha", 3);
    await train({ ...alpha, grpo: { ...alpha.grpo, groupSize: 8 }, suites: [{ ...alpha.suites[0]!, reward: { verifier: 1, progress: 1, format: 0 } }] }, { quiet: true });
    // A replay of alpha's first GRPO step from its reference checkpoint, as the demo's naive comparison
    // makes: the newest run, yet not the one the page opens on. Its time budget (none) ends GRPO after
    // the first of 2 planned steps.
    const replay = parityConfig(runsDir, "alpha-naive", 3);
    await train(
      validateConfig({ ...replay, model: { checkpoint: join(runsDir, "alpha", "checkpoints", "reference"), matmul: replay.model.matmul }, sft: { ...replay.sft, enabled: false }, grpo: { ...replay.grpo, steps: 2 } }, "replay"),
      { quiet: true, rolloutMode: "recompute", skipEval: true, grpoBudgetMs: 0 },
    );
    // Runs that end otherwise, in a folder of their own: stopped by the user, and failed.
    const others = join(root, "others");
    mkdirSync(others);
    await train(parityConfig(others, "stopped", 3), { quiet: true, shouldStop: () => true });
    await expect(
      train(parityConfig(others, "failed", 3), {
        quiet: true,
        onMetrics: () => {
          throw new Error("disk full");
        },
      }),
    ).rejects.toThrow("disk full");
    writeFileSync(join(root, "secret.txt"), "do not serve");
    symlinkSync(join(root, "secret.txt"), join(runsDir, "alpha", "trajectories", "leak.jsonl"));
    ({ server, url } = await startDashboard({ runsDir, port: 0 }));
  }, 180_000);
  afterAll(() => {
    server?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it("lists runs (naming a replay's source) and serves metrics incrementally", async () => {
    const runs = (await (await fetch(`${url}api/runs`)).json()) as { name: string; replayOf?: string }[];
    expect(runs.map((r) => r.name).sort()).toEqual(["alpha", "alpha-naive", "beta"]);
    expect(runs.find((r) => r.name === "alpha-naive")?.replayOf).toBe("alpha");
    expect(runs.find((r) => r.name === "alpha")?.replayOf).toBeUndefined();
    const all = (await (await fetch(`${url}api/runs/alpha/metrics`)).json()) as { records: { stage: string }[]; next: number; file: string; skipped: number };
    expect(all.records.filter((r) => r.stage === "grpo")).toHaveLength(3);
    expect(all.skipped).toBe(0);
    // The next poll starts where this one stopped (a byte offset in that file): nothing new yet.
    const m = (await (await fetch(`${url}api/runs/alpha/metrics?from=${all.next}&file=${all.file}`)).json()) as { records: unknown[]; next: number };
    expect(m.records).toHaveLength(0);
    expect(m.next).toBe(all.next);
  });

  it("records why each run ended in status.json: completed, a time budget, stopped by the user, failed", () => {
    const status = (dir: string, run: string) => JSON.parse(readFileSync(join(dir, run, "status.json"), "utf8")) as { state: string; endReason?: string };
    expect(status(runsDir, "alpha")).toMatchObject({ state: "done", endReason: "completed" });
    expect(status(runsDir, "alpha-naive")).toMatchObject({ state: "done", endReason: "time budget: grpo took 1 of 2 planned steps" });
    expect(status(join(root, "others"), "stopped")).toMatchObject({ state: "stopped", endReason: "stopped by the user" });
    expect(status(join(root, "others"), "failed")).toMatchObject({ state: "failed", endReason: "failed: disk full" });
  });

  it("lists the checkpoints on disk with their trainer state, and the latest", async () => {
    const cps = (await (await fetch(`${url}api/runs/alpha/checkpoints`)).json()) as { checkpoints: { name: string; where: string; step: number | null; bytes: number; trainer: { step?: number } | null }[]; latest: string };
    expect(cps.checkpoints.map((c) => c.name)).toEqual(["reference", "grpo-00002", "grpo-00003", "final"]);
    expect(cps.latest).toBe("grpo-00003");
    const last = cps.checkpoints.find((c) => c.name === "grpo-00003")!;
    expect(last.step).toBe(3);
    expect(last.trainer?.step).toBe(3);
    expect(last.bytes).toBeGreaterThan(1000);
  });

  it("exports a run's metrics as CSV, one column per figure", async () => {
    const res = await fetch(`${url}api/runs/alpha/metrics.csv`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/csv/);
    const lines = (await res.text()).trim().split("\n");
    const header = lines[0]!.split(",");
    expect(header.slice(0, 3)).toEqual(["stage", "step", "time"]);
    for (const col of ["reward.parity", "success.parity", "kl", "gradNorm", "lr", "ratioMean", "degenerateGroups", "phaseMs.rollout", "phaseMs.train", "tokensPerSec", "loss"]) expect(header).toContain(col);
    const records = (await (await fetch(`${url}api/runs/alpha/metrics`)).json()) as { records: unknown[] };
    expect(lines).toHaveLength(records.records.length + 1);
    const grpo3 = lines.find((l) => l.startsWith("grpo,3,"))!.split(",");
    expect(Number(grpo3[header.indexOf("kl")])).toBeGreaterThan(0);
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
    expect((await fetch(`${url}api/runs/nope/metrics.csv`)).status).toBe(404);
  });

  it.skipIf(!CHROMIUM)("renders every view in a real browser at 1280 px, and a static report without the server", async () => {
    let browser: Browser | undefined;
    try {
      browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      page.on("console", (m) => {
        if (m.type() === "error") errors.push(`${m.text()} (${m.location().url})`);
      });
      page.on("response", (r) => {
        if (r.status() >= 400) errors.push(`${r.status()} ${r.request().method()} ${r.url()}`);
      });
      const noOverflow = async (p: Page, what: string) => {
        const [scroll, client] = (await p.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")) as number[];
        expect(scroll, `${what}: the page is ${scroll} px wide in a ${client} px window`).toBeLessThanOrEqual(client);
      };
      const view = async (p: Page, name: string) => {
        await p.click(`.tabs button[data-view="${name}"]`);
        await p.waitForSelector(`#view-${name}:not([hidden])`);
      };
      mkdirSync(SHOTS, { recursive: true });

      // Opens on the main run, not the newer replay.
      await page.goto(url);
      await page.waitForSelector("body[data-ready='1']", { timeout: 20_000 });
      expect(await page.locator("#run-select").inputValue()).toBe("alpha");
      // The run page: why it ended, steps planned and taken, intervals with one decimal, the checkpoints.
      expect(await page.locator("#why-ended").innerText()).toMatch(/^completed: all 3 GRPO steps, then the evaluation after RL$/);
      // The reason shown is the one recorded, for every way a run ends.
      const reasons = JSON.stringify(["stopped", "failed"].map((r) => JSON.parse(readFileSync(join(root, "others", r, "status.json"), "utf8"))));
      const shown = (await page.evaluate(
        `(async () => { const m = await import('/runpage.js'); return ${reasons}.map((s) => m.whyEnded(s, {}, [], undefined)); })()`,
      )) as string[];
      expect(shown[0]).toMatch(/^stopped by the user at sft step \d+: continue it with `sinkflex train --resume`$/);
      expect(shown[1]).toMatch(/^failed: disk full \(in [a-z-]+\)$/);
      expect(await page.locator("table.steps").innerText()).toMatch(/GRPO\s+3\s+3/);
      expect(await page.locator("#eval-table").innerText()).toMatch(/\d+\.\d% \[\d+\.\d–\d+\.\d\]/);
      expect(await page.locator("table.checkpoints tr[data-checkpoint]").count()).toBe(4);
      expect(await page.locator('tr[data-checkpoint="reference"]').innerText()).toContain("before RL");
      await noOverflow(page, "run page");
      await page.screenshot({ path: `${SHOTS}/dashboard-run.png`, fullPage: true });

      // Curves: every chart has both axis titles; GRPO steps tick as whole numbers, no label twice.
      await view(page, "curves");
      await page.selectOption("#curve-set", "all");
      await page.waitForSelector('.chart[data-id="lr"]');
      const charts = await page.locator(".chart").evaluateAll((els) =>
        els.map((el) => ({
          title: el.getAttribute("data-title"),
          x: el.querySelector(".axis-title.x")?.textContent ?? "",
          y: el.querySelector(".axis-title.y")?.textContent ?? "",
          xTicks: [...el.querySelectorAll(".tick.x")].map((t) => t.textContent ?? ""),
          yTicks: [...el.querySelectorAll(".tick.y")].map((t) => t.textContent ?? ""),
        })),
      );
      expect(charts.length).toBeGreaterThanOrEqual(20);
      for (const c of charts) {
        expect(c.x, `${c.title}: x axis title`).not.toBe("");
        expect(c.y, `${c.title}: y axis title`).not.toBe("");
        expect(new Set(c.xTicks).size, `${c.title}: repeated x labels ${c.xTicks}`).toBe(c.xTicks.length);
        expect(new Set(c.yTicks).size, `${c.title}: repeated y labels ${c.yTicks}`).toBe(c.yTicks.length);
        if (c.x === "GRPO step" || c.x === "SFT step") for (const t of c.xTicks) expect(t, `${c.title}: x tick`).toMatch(/^\d+$/);
      }
      const ids = await page.locator(".chart").evaluateAll((els) => els.map((el) => el.getAttribute("data-id")));
      for (const id of ["reward-mean", "reward-suite", "success-suite", "grad-norm", "lr", "ratio", "degenerate", "step-time", "tokens-per-sec", "staleness", "kl", "entropy", "clip"]) expect(ids).toContain(id);
      // Phase markers: evaluations, SFT -> GRPO, SFT's switch to the assistant's tokens.
      expect(await page.locator('.chart[data-id="grad-norm"] .marker[data-kind="handover"]').count()).toBe(1);
      expect(await page.locator('.chart[data-id="reward-mean"] .marker[data-kind="eval"]').count()).toBe(2);
      expect(await page.locator('.chart[data-id="sft-loss"] .marker[data-kind="sft-phase"]').count()).toBe(1);
      // Hover shows the values at the nearest step.
      const hover = page.locator('.chart[data-id="reward-mean"] rect.hover');
      await hover.hover();
      expect(await page.locator('.chart[data-id="reward-mean"] .readout').innerText()).toMatch(/GRPO step \d/);
      // Ticks for one point at step 1 and for a flat 4770: whole steps, each label once.
      // (A string, so the test runner leaves its import() alone: it runs in the page.)
      const ticks = (await page.evaluate(
        "(async () => { const m = await import('/charts.js'); return { one: m.niceTicks(0, 2, 5, true), flat: m.tickLabels(m.niceTicks(4769.6, 4770.4, 4)).map((t) => t[1]) }; })()",
      )) as { one: number[]; flat: string[] };
      expect(ticks.one).toEqual([0, 1, 2]);
      expect(new Set(ticks.flat).size).toBe(ticks.flat.length);
      await noOverflow(page, "curves");
      await page.selectOption("#curve-set", "key");
      await page.screenshot({ path: `${SHOTS}/dashboard-curves.png`, fullPage: true });

      // Trajectories: a group of 8 scrolls inside its panel; opens on the group with the most reward spread.
      await view(page, "trajectories");
      await page.waitForSelector(".rollout");
      expect(await page.locator(".rollout").count()).toBe(8);
      expect(await page.locator(".tok.trained").count()).toBeGreaterThan(0);
      expect(await page.locator(".rollout header .reward").first().innerText()).toMatch(/^reward \d\.\d\d = verifier [01]\.00 · progress \d\.\d\d/);
      const spreads = await page.locator(".group-list tbody tr").evaluateAll((rows) => rows.map((r) => Number(r.children[4]!.textContent)));
      expect(spreads[0]).toBe(Math.max(...spreads));
      // A group whose tokens were not recorded says so in each rollout.
      expect(await page.locator(".group-list tbody tr").count()).toBe(2);
      await page.locator(".group-list tbody tr", { hasText: "(no tokens)" }).click();
      expect(await page.locator(".rollout .tokens-missing").count()).toBe(8);
      await page.selectOption(".t-sort", "reward-asc");
      await page.click(".t-next-failed");
      expect(await page.locator(".rollout.focus.failed").count()).toBe(1);
      await noOverflow(page, "trajectories");
      await page.screenshot({ path: `${SHOTS}/dashboard-trajectories.png`, fullPage: false });

      // Compare: no run offered against itself; one colour per run; the success table side by side.
      await view(page, "curves");
      const offered = await page.locator("#compare-select option").evaluateAll((os) => os.map((o) => o.getAttribute("value")));
      expect(offered).not.toContain("alpha");
      await page.selectOption("#compare-select", "beta");
      await page.waitForFunction('document.querySelector(\'.chart[data-id="reward-mean"]\')?.querySelectorAll("polyline.series").length === 2', undefined, { timeout: 10_000 });
      const strokes = await page.locator('.chart[data-id="reward-mean"] polyline.series').evaluateAll((ls) => ls.map((l) => l.getAttribute("stroke")));
      expect(new Set(strokes).size).toBe(2);
      const rewardStrokes = await page.locator('.chart[data-id="reward-suite"] polyline.series').evaluateAll((ls) => ls.map((l) => l.getAttribute("stroke")));
      expect(rewardStrokes).toEqual(strokes);
      await noOverflow(page, "compare");
      await page.screenshot({ path: `${SHOTS}/dashboard-compare.png`, fullPage: false });
      await view(page, "run");
      // The run page is drawn again once the compared run's results arrive.
      await page.waitForFunction('document.querySelectorAll("#eval-table th.run-head").length === 2', undefined, { timeout: 10_000 });
      expect(await page.locator("#eval-table th.run-head").allInnerTexts()).toEqual(["alpha", "beta"]);
      await view(page, "trajectories");
      expect(await page.locator("#traj-run option").allInnerTexts()).toEqual(["alpha", "beta"]);

      // The same task side by side: alpha's first GRPO step beside the replay's (the same tasks, by seed).
      await page.selectOption("#compare-select", "alpha-naive");
      await view(page, "run");
      expect(await page.locator("#why-ended").innerText()).toMatch(/^completed/);
      await page.selectOption("#run-select", "alpha-naive");
      await page.waitForFunction('document.getElementById("why-ended")?.textContent.startsWith("ended by its time budget: grpo took 1 of 2 planned steps")', undefined, { timeout: 10_000 });
      await page.selectOption("#run-select", "alpha");
      await page.selectOption("#compare-select", "alpha-naive");
      await view(page, "trajectories");
      await page.waitForFunction('document.querySelectorAll("#traj-file option").length === 3', undefined, { timeout: 10_000 });
      await page.selectOption("#traj-file", "grpo-00001.jsonl");
      await page.selectOption("#traj-side", "alpha-naive");
      await page.waitForSelector(".side.other .rollout");
      expect(await page.locator("#traj-side-file").inputValue()).toBe("grpo-00001.jsonl");
      expect(await page.locator(".side.main h3").innerText()).toBe("alpha · grpo-00001.jsonl");
      expect(await page.locator(".side.other h3").innerText()).toBe("alpha-naive · grpo-00001.jsonl");
      const taskOf = async (side: string) => (await page.locator(`.side.${side} .panel > .hint`).innerText()).match(/of (task \d+ \(parity\))/)?.[1];
      const rows = await page.locator(".group-list tbody tr").count();
      expect(rows).toBe(2);
      for (let i = 0; i < rows; i++) {
        await page.locator(".group-list tbody tr").nth(i).click();
        expect(await taskOf("main")).toBeTruthy();
        expect(await taskOf("other")).toBe(await taskOf("main"));
        expect(await page.locator(".side.main .rollout").count()).toBe(8);
        expect(await page.locator(".side.other .rollout").count()).toBe(4);
      }
      await noOverflow(page, "side by side");
      await page.screenshot({ path: `${SHOTS}/dashboard-side-by-side.png`, fullPage: false });
      // Two steps of one run: the tasks both steps share are listed, each beside its twin.
      await page.selectOption("#traj-side", "alpha");
      await page.waitForFunction('document.querySelector(".side.other h3")?.textContent.startsWith("alpha ·")', undefined, { timeout: 10_000 });
      const sideStep = await page.locator("#traj-side-file").inputValue();
      expect(sideStep).not.toBe("grpo-00001.jsonl");
      const tasks = async (file: string) => {
        const { records } = (await (await fetch(`${url}api/runs/alpha/trajectories/${file}`)).json()) as { records: { suite: string; taskIndex: number }[] };
        return new Set(records.map((r) => `${r.suite}#${r.taskIndex}`));
      };
      const mine = await tasks("grpo-00001.jsonl");
      const theirs = await tasks(sideStep);
      const shared = [...mine].filter((t) => theirs.has(t)).length;
      if (shared > 0) {
        expect(await page.locator(".t-outcome").inputValue()).toBe("both");
        expect(await page.locator(".group-list tbody tr").count()).toBe(shared);
        expect(await taskOf("other")).toBe(await taskOf("main"));
      } else {
        expect(await page.locator(".t-outcome").inputValue()).toBe("all");
        expect(await page.locator(".side.other .empty").innerText()).toMatch(/^task \d+ \(parity\) is not in alpha · grpo-\d+\.jsonl/);
      }
      expect(errors).toEqual([]);

      // The static report opens from a file, with no server, and shows the same views.
      const reportFile = join(root, "alpha.html");
      writeFileSync(reportFile, await buildReport(runsDir, "alpha"));
      const offline = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      const offlineErrors: string[] = [];
      offline.on("pageerror", (e) => offlineErrors.push(e.message));
      offline.on("console", (m) => {
        if (m.type() === "error") offlineErrors.push(m.text());
      });
      await offline.route("http://**", (r) => (offlineErrors.push(`fetched ${r.request().url()}`), r.abort()));
      await offline.goto(`file://${reportFile}`);
      await offline.waitForSelector("body[data-ready='1']", { timeout: 20_000 });
      expect(await offline.locator("#why-ended").innerText()).toMatch(/^completed/);
      await view(offline, "curves");
      expect(await offline.locator(".chart").count()).toBeGreaterThanOrEqual(8);
      await view(offline, "trajectories");
      expect(await offline.locator(".rollout").count()).toBe(8);
      expect(offlineErrors).toEqual([]);
    } finally {
      await browser?.close();
    }
  }, 90_000);
});
