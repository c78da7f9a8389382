import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { train } from "../../src/pipeline/train.js";
import { learningRateAt } from "../../src/rl/lr-schedule.js";
import { parityConfig, registerParityEnv } from "./parity-env.js";
import { startEndpoint } from "../reward/judge-endpoint.js";

registerParityEnv();

// Every run folder of this file lives under one scratch folder, removed at the end.
const scratch = mkdtempSync(join(tmpdir(), "train-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const config = parityConfig;

const learning = (path: string) =>
  readFileSync(path, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l))
    .filter((r) => r.stage === "grpo" || r.stage === "sft")
    .map(({ time: _t, tokensPerSec: _s, phaseMs: _p, ...rest }) => rest);

describe("the training pipeline", () => {
  it("runs SFT -> eval -> GRPO -> eval, writes metrics, trajectories and checkpoints, and resumes exactly", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const full = await train(config(runsDir, "full"), { quiet: true });
    expect(full.stopped).toBe(false);
    expect(Object.keys(full.evalBefore!)).toEqual(["parity"]);
    expect(full.evalAfter!.parity!.trials).toBe(4);
    const fullMetrics = learning(join(full.runDir, "metrics.jsonl"));
    const grpo = fullMetrics.filter((r) => r.stage === "grpo");
    expect(grpo.map((r) => r.step)).toEqual([1, 2, 3]);
    // Warm-up over the first two GRPO steps, from lr / 2 to lr.
    expect(grpo.map((r) => r.lr)).toEqual([5e-3, 1e-2, 1e-2]);
    // RL started a fresh optimizer: its step count is the GRPO updates alone, not SFT's as well.
    const sftSteps = fullMetrics.filter((r) => r.stage === "sft").length;
    const latest = readFileSync(join(full.runDir, "checkpoints", "latest"), "utf8").trim();
    const meta = JSON.parse(readFileSync(join(full.runDir, "checkpoints", latest, "sinkflex.json"), "utf8"));
    expect(sftSteps).toBeGreaterThan(0);
    // Every SFT batch comes from the one suite: its loss is reported under the suite's name.
    expect(fullMetrics.filter((r) => r.stage === "sft").every((r) => r.source === "parity")).toBe(true);
    expect(meta.optimizerStep).toBe(meta.policyVersion - sftSteps);
    // Every SFT step ran (no time budget), and the result says so.
    expect(full.sft).toEqual({ steps: sftSteps, allSteps: sftSteps });
    expect(meta.optimizerStep).toBeGreaterThan(0);
    // The policy learned from something: some group had mixed rewards and the weights moved.
    expect(grpo.some((r) => r.degenerateGroups < 2 && r.gradNorm > 0)).toBe(true);
    // How each step's episodes ended, per suite: the model's turns and the share a limit cut off, as the
    // step's trajectory records show them.
    for (const r of grpo) {
      const records = readFileSync(join(full.runDir, "trajectories", `grpo-${String(r.step).padStart(5, "0")}.jsonl`), "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
      expect(r.episodes.parity.turns).toBeCloseTo(avg(records.map((t) => t.messages.filter((m: { role: string }) => m.role === "assistant").length)), 10);
      expect(r.episodes.parity.truncated).toBeCloseTo(avg(records.map((t) => (t.endReason.startsWith("truncated") ? 1 : 0))), 10);
    }
    expect(grpo.some((r) => r.episodes.parity.turns > 0)).toBe(true);
    expect(readdirSync(join(full.runDir, "trajectories")).filter((f) => f.endsWith(".jsonl"))).toHaveLength(3);
    expect(existsSync(join(full.runDir, "final", "model.safetensors"))).toBe(true);
    const status = JSON.parse(readFileSync(join(full.runDir, "status.json"), "utf8"));
    expect(status.state).toBe("done");

    // Interrupted after GRPO step 1, then resumed: the learning metrics equal the uninterrupted run's.
    // Stop the second run at step 1 by starting it over with a stop request.
    const runsDir2 = mkdtempSync(join(scratch, "runs-"));
    let seen = 0;
    const stopped = await train(config(runsDir2, "resumed"), {
      quiet: true,
      onMetrics: (r) => {
        if (r.stage === "grpo") seen++;
      },
      shouldStop: () => seen >= 1,
    });
    expect(stopped.stopped).toBe(true);
    expect(JSON.parse(readFileSync(join(stopped.runDir, "status.json"), "utf8")).state).toBe("stopped");
    const resumed = await train(config(runsDir2, "resumed"), { quiet: true, resume: true });
    expect(resumed.stopped).toBe(false);
    expect(learning(join(resumed.runDir, "metrics.jsonl"))).toEqual(fullMetrics);
    expect(resumed.sft).toEqual(full.sft);
  }, 300_000);

  it("learns from the suite's reward rubric while success stays the verifier's", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const base = config(runsDir, "rubric");
    const cfg = { ...base, sft: { ...base.sft, enabled: false }, grpo: { ...base.grpo, steps: 2 }, suites: [{ ...base.suites[0]!, reward: { verifier: 1, progress: 1, format: 0 } }] };
    const run = await train(cfg, { quiet: true, skipEval: true });
    const grpo = learning(join(run.runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo");
    const steps = ["grpo-00001.jsonl", "grpo-00002.jsonl"].map((f) =>
      readFileSync(join(run.runDir, "trajectories", f), "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l)),
    );
    expect(grpo).toHaveLength(2);
    for (const [i, records] of steps.entries()) {
      expect(records).toHaveLength(8);
      for (const r of records) {
        const { verifier, progress } = r.rewardComponents;
        expect(r.reward).toBeCloseTo((verifier.score + progress.score) / 2, 12);
        expect(r.success).toBe(verifier.score === 1);
      }
      // The metrics' success counts the verifier; their reward is the rubric's.
      expect(grpo[i]!.success.parity).toBeCloseTo(records.filter((r) => r.success).length / 8, 12);
      expect(grpo[i]!.reward.parity).toBeCloseTo(records.reduce((a, r) => a + r.reward, 0) / 8, 12);
      expect(grpo[i]!.rewardErrors).toBe(0);
    }
    // Some trajectory was not solved yet made progress: a reward strictly between 0 and 1/2.
    expect(steps.flat().some((r) => !r.success && r.reward > 0)).toBe(true);
  }, 120_000);

  it("trains the copy drill's batches first, then the suites' (sft.copyDrill)", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const base = config(runsDir, "copy-drill");
    const cfg = { ...base, sft: { ...base.sft, batchBy: "prefix" as const, copyDrill: { examples: 8, spanTokens: [2, 4] as [number, number], tokens: 16 } }, grpo: { ...base.grpo, enabled: false } };
    const run = await train(cfg, { quiet: true, skipEval: true });
    const sft = learning(join(run.runDir, "metrics.jsonl")).filter((r) => r.stage === "sft");
    // 8 drill examples in batches of 4: the first two steps; then the suite's episodes.
    expect(sft.map((r) => r.source)).toEqual(["copy-drill", "copy-drill", ...sft.slice(2).map(() => "parity")]);
    expect(sft.length).toBeGreaterThan(2);
    // The drill's loss is on its second copies alone, even in the context-loss phase: an example of 16 to
    // 23 tokens holds at most 11 span tokens twice, at most 10 of them in the loss (every token from the
    // second would be at least 15).
    expect(sft[0]!.lossOn).toBe("context");
    expect(sft[0]!.tokens).toBeGreaterThan(0);
    expect(sft[0]!.tokens).toBeLessThanOrEqual(4 * 10);
  }, 120_000);

  it("drills on while the drill's loss stays at or above untilLoss, and resumes exactly in the middle of it (sft.copyDrill.untilLoss)", async () => {
    const drilled = (runsDir: string) => {
      const base = config(runsDir, "drill-until");
      // A target no loss reaches: the drill runs to its maxExamples, 16 examples, 4 steps of 4.
      const copyDrill = { examples: 8, spanTokens: [2, 4] as [number, number], tokens: 16, untilLoss: 1e-6, lossSteps: 2, maxExamples: 16 };
      return { ...base, sft: { ...base.sft, batchBy: "prefix" as const, copyDrill }, grpo: { ...base.grpo, enabled: false } };
    };
    const cfg = drilled(mkdtempSync(join(scratch, "runs-")));
    const full = await train(cfg, { quiet: true, skipEval: true });
    const sft = learning(join(full.runDir, "metrics.jsonl")).filter((r) => r.stage === "sft");
    expect(sft.slice(0, 5).map((r) => [r.source, r.extension ?? false])).toEqual([
      ["copy-drill", false],
      ["copy-drill", false],
      ["copy-drill", true],
      ["copy-drill", true],
      ["parity", false],
    ]);
    // Every step ran, the drill's extension counted among them, and the schedule ends on the last.
    expect(full.sft).toEqual({ steps: sft.length, allSteps: sft.length });
    expect(sft.at(-1)!.lr).toBeCloseTo(learningRateAt(sft.length, sft.length, cfg.sft), 15);

    // Stopped after the extension's first step, then resumed: the same steps and losses.
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    let seen = 0;
    const stopped = await train(drilled(runsDir), { quiet: true, skipEval: true, onMetrics: (r) => void (r.stage === "sft" && seen++), shouldStop: () => seen >= 3 });
    expect(stopped.stopped).toBe(true);
    const resumed = await train(drilled(runsDir), { quiet: true, skipEval: true, resume: true });
    expect(learning(join(resumed.runDir, "metrics.jsonl"))).toEqual(learning(join(full.runDir, "metrics.jsonl")));
    expect(resumed.sft).toEqual(full.sft);
  }, 120_000);

  it("decays GRPO's learning rate along a cosine over its planned steps (grpo.lrSchedule)", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const base = config(runsDir, "grpo-cosine");
    const cfg = { ...base, sft: { ...base.sft, enabled: false }, grpo: { ...base.grpo, steps: 4, lrSchedule: "cosine" as const, minLrRatio: 0.2 } };
    const run = await train(cfg, { quiet: true, skipEval: true });
    const lrs = learning(join(run.runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo").map((r) => r.lr as number);
    // Warm-up over two steps to 1e-2, then half-way down the cosine (0.6 x lr), then its floor (0.2 x lr).
    expect(lrs).toHaveLength(4);
    [5e-3, 1e-2, 6e-3, 2e-3].forEach((lr, i) => expect(lrs[i]).toBeCloseTo(lr, 12));
  }, 120_000);

  it("ends GRPO early enough for the evaluation after RL when told when that must end (evalBy)", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const base = config(runsDir, "eval-by");
    const cfg = { ...base, sft: { ...base.sft, enabled: false }, grpo: { ...base.grpo, steps: 4 } };
    // Already past: GRPO ends after its first step (the one that crosses the deadline), then evaluates.
    const late = await train(cfg, { quiet: true, evalBy: performance.now() });
    expect(learning(join(late.runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo")).toHaveLength(1);
    expect(late.evalAfter!.parity!.trials).toBe(4);
    // Far off: every step runs.
    const early = await train({ ...cfg, name: "eval-by-early" }, { quiet: true, evalBy: performance.now() + 3_600_000 });
    expect(learning(join(early.runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo")).toHaveLength(4);
  }, 300_000);

  it("scores with an LLM judge on loopback; a judge that answers badly leaves its trajectories out, the run goes on", async () => {
    // The judge scores by the answer's length; its second endpoint never answers in the required form.
    const good = await startEndpoint((body) => {
      const answer = /ASSISTANT: (.*)/.exec(body.messages[1].content)?.[1] ?? "";
      return { content: JSON.stringify({ score: Math.min(1, answer.length / 10), reason: "length" }) };
    });
    const bad = await startEndpoint(() => ({ content: "Score: 7/10" }));
    try {
      const runsDir = mkdtempSync(join(scratch, "runs-"));
      const base = config(runsDir, "judged");
      const judged = (baseUrl: string, name: string) => ({
        ...base,
        name,
        sft: { ...base.sft, enabled: false },
        grpo: { ...base.grpo, steps: 1 },
        suites: [{ ...base.suites[0]!, reward: { verifier: 1, progress: 0, format: 0, judge: { weight: 1, baseUrl, model: "judge", rubric: "Longer answers are better.", concurrency: 4, requestsPerSecond: 0, timeoutMs: 5_000, retries: 0 } } }],
      });
      const run = await train(judged(good.baseUrl, "judged"), { quiet: true, skipEval: true });
      const records = readFileSync(join(run.runDir, "trajectories", "grpo-00001.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
      expect(good.calls()).toBeGreaterThan(0);
      for (const r of records) {
        const { verifier, judge } = r.rewardComponents;
        expect(judge.score).toBeGreaterThanOrEqual(0);
        expect(r.reward).toBeCloseTo((verifier.score + judge.score) / 2, 12);
      }

      const failed = await train(judged(bad.baseUrl, "judge-fails"), { quiet: true, skipEval: true });
      const [metrics] = learning(join(failed.runDir, "metrics.jsonl")).filter((r) => r.stage === "grpo");
      expect(metrics.rewardErrors).toBe(8);
      expect(metrics.tokens.trained).toBe(0); // nothing left to learn from
      const failedRecords = readFileSync(join(failed.runDir, "trajectories", "grpo-00001.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
      expect(failedRecords.every((r) => /judge: .*not a JSON object/.test(r.error))).toBe(true);
    } finally {
      good.server.close();
      bad.server.close();
    }
  }, 120_000);

  it("refuses to overwrite a run, or to resume one that does not exist", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    await expect(train(config(runsDir, "nothing"), { quiet: true, resume: true })).rejects.toThrow(/cannot resume/);
  });

  it("starts over a run that failed in setup once its config is fixed, but never one that trained", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const base = config(runsDir, "again");
    const short = { ...base, sft: { ...base.sft, enabled: false }, grpo: { ...base.grpo, steps: 1 } };
    // A judge whose key variable is not set: refused in setup, before anything trains.
    delete process.env.SINKFLEX_TEST_UNSET_KEY;
    const judge = { weight: 1, baseUrl: "http://127.0.0.1:9/v1", model: "m", rubric: "r", apiKeyEnv: "SINKFLEX_TEST_UNSET_KEY", concurrency: 1, requestsPerSecond: 0, timeoutMs: 1000, retries: 0 };
    const broken = { ...short, suites: [{ ...short.suites[0]!, reward: { verifier: 1, progress: 0, format: 0, judge } }] };
    const failure = await train(broken, { quiet: true, skipEval: true }).catch((e: Error) => e);
    expect((failure as Error).message).toMatch(/SINKFLEX_TEST_UNSET_KEY is not set/);
    expect(JSON.parse(readFileSync(join(runsDir, "again", "status.json"), "utf8"))).toMatchObject({ state: "failed", stage: "setup" });
    const fixed = await train(short, { quiet: true, skipEval: true });
    expect(fixed.stopped).toBe(false);
    await expect(train(short, { quiet: true, skipEval: true })).rejects.toThrow(/already exists/);
  }, 120_000);
});
