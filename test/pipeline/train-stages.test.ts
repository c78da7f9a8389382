// The pipeline's stages run one at a time from a run folder (`sinkflex train --stage`), and a run
// killed anywhere continues exactly: SFT checkpoints on an interval, a resume keeps each metrics
// record once and clears half-written checkpoints, and the dashboard's records carry the advantages
// the update trained on. Counts beyond their declared bounds are refused at validation.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { groupAdvantage } from "../../src/rl/advantages.js";
import { ConfigError, validateConfig } from "../../src/pipeline/config.js";
import { train } from "../../src/pipeline/train.js";
import { parityConfig, registerParityEnv } from "./parity-env.js";
import { runCli } from "../run-cli.js";

registerParityEnv();
const scratch = mkdtempSync(join(tmpdir(), "train-stages-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** metrics.jsonl's records without wall-clock fields. */
const records = (runDir: string) =>
  readFileSync(join(runDir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l))
    .map(({ time: _t, tokensPerSec: _s, phaseMs: _p, ...rest }) => rest);
const keys = (rs: { stage: string; step: number }[]) => rs.map((r) => `${r.stage} ${r.step}`);
const weights = (runDir: string) => readFileSync(join(runDir, "final", "model.safetensors"));

/** The parity config with more SFT steps (12 at 4 examples a batch) and an SFT checkpoint every 4. */
function sftConfig(runsDir: string, name: string) {
  const base = parityConfig(runsDir, name);
  return validateConfig({ ...base, sft: { ...base.sft, expertEpisodes: 24, epochs: 2, checkpointEvery: 4 }, grpo: { ...base.grpo, steps: 2 } });
}

class Killed extends Error {}

describe("crash safety", () => {
  it("a run killed during SFT resumes from its last SFT checkpoint, each metrics record once, the same final weights", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const full = await train(sftConfig(runsDir, "full"), { quiet: true });
    const fullRecords = records(full.runDir);
    const sftSteps = fullRecords.filter((r) => r.stage === "sft").length;
    expect(sftSteps).toBeGreaterThanOrEqual(8);

    // Killed right after SFT step 6's record is written: the checkpoint of step 4 is the latest.
    const cfg = sftConfig(runsDir, "killed");
    await expect(train(cfg, { quiet: true, onMetrics: (r) => {
      if (r.stage === "sft" && r.step === 6) throw new Killed("killed");
    } })).rejects.toThrow(Killed);
    const runDir = join(runsDir, "killed");
    expect(readFileSync(join(runDir, "checkpoints", "latest"), "utf8").trim()).toBe("sft-00004");
    // A kill during a checkpoint write leaves its temp folder behind.
    const partial = join(runDir, "checkpoints", ".sft-00008.partial-99999");
    mkdirSync(partial, { recursive: true });
    writeFileSync(join(partial, "model.safetensors"), "torn");

    const resumed = await train(cfg, { quiet: true, resume: true });
    expect(resumed.stopped).toBe(false);
    expect(existsSync(partial)).toBe(false);
    expect(readdirSync(join(runDir, "checkpoints")).filter((n) => n.includes(".partial"))).toEqual([]);
    const resumedRecords = records(runDir);
    expect(new Set(keys(resumedRecords)).size).toBe(resumedRecords.length);
    expect(resumedRecords).toEqual(fullRecords);
    expect(resumed.sft).toEqual(full.sft);
    expect(weights(runDir).equals(weights(full.runDir))).toBe(true);
  }, 600_000);

  it("a resume after a kill in GRPO, between a step's record and its checkpoint, writes that step once", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const base = parityConfig(runsDir, "grpo-kill");
    const cfg = validateConfig({ ...base, checkpointEvery: 2 });
    await expect(train(cfg, { quiet: true, onMetrics: (r) => {
      if (r.stage === "grpo" && r.step === 3) throw new Killed("killed");
    } })).rejects.toThrow(Killed);
    const runDir = join(runsDir, "grpo-kill");
    expect(readFileSync(join(runDir, "checkpoints", "latest"), "utf8").trim()).toBe("grpo-00002");
    await train(cfg, { quiet: true, resume: true });
    const rs = records(runDir);
    expect(new Set(keys(rs)).size).toBe(rs.length);
    expect(keys(rs).filter((k) => k.startsWith("grpo"))).toEqual(["grpo 1", "grpo 2", "grpo 3"]);
  }, 600_000);
});

describe("the dashboard's trajectory records", () => {
  it("carry the advantages the update trained on: none for a group left out as degenerate", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const base = parityConfig(runsDir, "advantages");
    const cfg = validateConfig({ ...base, grpo: { ...base.grpo, steps: 4, negativeAdvantageScale: 0.5 } });
    const run = await train(cfg, { quiet: true, skipEval: true });
    let degenerate = 0;
    for (const r of records(run.runDir).filter((x) => x.stage === "grpo")) {
      const trajectories = readFileSync(join(run.runDir, "trajectories", `grpo-${String(r.step).padStart(5, "0")}.jsonl`), "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { group: number; reward: number; advantage?: number });
      const groups = new Map<number, typeof trajectories>();
      for (const t of trajectories) groups.set(t.group, [...(groups.get(t.group) ?? []), t]);
      const untrained = [...groups.values()].filter((g) => g.every((t) => t.advantage === undefined));
      expect(untrained.length).toBe(r.degenerateGroups);
      degenerate += untrained.length;
      for (const g of groups.values()) {
        if (g.every((t) => t.advantage === undefined)) continue;
        // The estimator's advantages over the group's rewards, the negatives halved.
        const expected = groupAdvantage(g.map((t) => t.reward), cfg.grpo.estimator).map((a) => (a < 0 ? 0.5 * a : a));
        g.forEach((t, i) => expect(t.advantage).toBeCloseTo(expected[i]!, 9));
      }
    }
    expect(degenerate).toBeGreaterThan(0);
  }, 300_000);
});

describe("sinkflex train --stage", () => {
  it("runs prepare, sft, evaluate, grpo, evaluate from the run folder, as one whole run does", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const whole = await train(parityConfig(runsDir, "whole"), { quiet: true });
    const cfgFile = join(scratch, "staged.json");
    writeFileSync(cfgFile, JSON.stringify(parityConfig(runsDir, "staged")));
    const runDir = join(runsDir, "staged");

    // Each stage refuses a folder that lacks what it needs, and says what to run first.
    const early = await runCli(["train", "--stage", "grpo", "--config", cfgFile, "--quiet", "--no-dashboard"]);
    expect(early.code).toBe(2);
    expect(early.output).toMatch(/holds no run \(no config\.json\)/);
    const prepare = await runCli(["train", "--stage", "prepare", "--config", cfgFile, "--quiet", "--no-dashboard"]);
    expect(prepare.code, prepare.output).toBe(0);
    const noSft = await runCli(["train", "--stage", "grpo", "--run", runDir, "--quiet", "--no-dashboard"]);
    expect(noSft.code).toBe(2);
    expect(noSft.output).toMatch(/--stage grpo needs the policy SFT handed over .* its latest checkpoint is sft-00000: run `sinkflex train --stage sft --run .*staged` first/);

    for (const stage of ["sft", "evaluate", "grpo", "evaluate"]) {
      const res = await runCli(["train", "--stage", stage, "--run", runDir, "--quiet", "--no-dashboard"]);
      expect(res.code, `${stage}: ${res.output}`).toBe(0);
    }
    expect(records(runDir)).toEqual(records(whole.runDir));
    expect(weights(runDir).equals(weights(whole.runDir))).toBe(true);
    const done = await runCli(["train", "--stage", "sft", "--run", runDir, "--quiet", "--no-dashboard"]);
    expect(done.code).toBe(2);
    expect(done.output).toMatch(/SFT is done/);
    const bad = await runCli(["train", "--stage", "rl", "--run", runDir, "--no-dashboard"]);
    expect(bad.code).toBe(2);
    expect(bad.output).toMatch(/--stage must be one of prepare, sft, grpo, evaluate/);
  }, 600_000);
});

describe("config bounds", () => {
  it("refuses counts past their declared bounds, naming the field", () => {
    const base = parityConfig(scratch, "bounds");
    const refused = (patch: Record<string, unknown>, field: RegExp) => {
      expect(() => validateConfig({ ...base, ...patch })).toThrow(ConfigError);
      expect(() => validateConfig({ ...base, ...patch })).toThrow(field);
    };
    refused({ grpo: { ...base.grpo, steps: 1e12 } }, /grpo\.steps: must be at most/);
    refused({ sft: { ...base.sft, epochs: 1e9 } }, /sft\.epochs: must be at most/);
    refused({ sft: { ...base.sft, checkpointEvery: 1e12 } }, /sft\.checkpointEvery: must be at most/);
    refused({ eval: { ...base.eval, tasksPerSuite: 1e12 } }, /eval\.tasksPerSuite: must be at most/);
    refused({ grpo: { ...base.grpo, groupSize: 1e7 } }, /grpo\.groupSize: must be at most/);
    refused({ keepCheckpoints: 1e9 }, /keepCheckpoints: must be at most/);
  });
});
