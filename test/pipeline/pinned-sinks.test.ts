// A run with `attention.mode profile` whose profile names token sinks: the layout pins them (logged and
// in the setup metrics), SFT examples carry the flags a rollout of their tokens records, and GRPO's
// rollouts record the flags their sessions were given, the ones attention's `sequencePins` gives, and
// `sinkflex eval --config` evaluates the final checkpoint with the same pins as the run did.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { countPins, SINK_PROFILE_FORMAT, sequencePins, type SinkProfile } from "../../src/attention/index.js";
import { validateConfig } from "../../src/pipeline/config.js";
import type { SftExample } from "../../src/rl/index.js";
import { pinExamples, pinRuleOf } from "../../src/pipeline/stages/attention-profile.js";
import { policyEvalOptions } from "../../src/pipeline/stages/evaluate.js";
import { loadPolicy } from "../../src/pipeline/policy.js";
import { train } from "../../src/pipeline/train.js";
import { runCli } from "../run-cli.js";
import { parityConfig, registerParityEnv } from "./parity-env.js";

registerParityEnv();
const scratch = mkdtempSync(join(tmpdir(), "pinned-sinks-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Every token id below 4000 a token sink of the parity model's one layer (2 heads): any text has some. */
function everyTokenProfile(): SinkProfile {
  return {
    format: SINK_PROFILE_FORMAT, model: "hand-written", numLayers: 1, numHeads: 2,
    settings: { delta: 32, threshold: 0.3, headFraction: 0.25, queries: 64 }, sequences: 1, tokens: 100,
    layers: [{ layer: 0, positions: [{ position: 0, tokenId: 0, mass: 0.5, heads: [0] }], tokens: Array.from({ length: 4000 }, (_, id) => ({ tokenId: id, occurrences: 2, sinkOccurrences: 2, mass: 0.5 })) }],
    layersWithoutSinks: [], prefix: [0, 0, 0, 0],
  };
}

describe("pinned secondary sinks in a run", () => {
  it("SFT examples and GRPO rollouts carry the layout's pins", async () => {
    const file = join(scratch, "profile.json");
    writeFileSync(file, JSON.stringify(everyTokenProfile()));
    const base = parityConfig(join(scratch, "runs"), "pins");
    const cfg = validateConfig({
      ...base, grpo: { ...base.grpo, steps: 1 }, eval: { tasksPerSuite: 1 },
      attention: { mode: "profile", profile: file, sinks: 2, window: 16, pinBudget: 3 },
    });
    const logs: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string | Uint8Array) => {
      logs.push(String(chunk));
      return true;
    }) as typeof process.stderr.write;
    let run;
    try {
      run = await train(cfg, { quiet: false });
    } finally {
      process.stderr.write = write;
    }
    expect(logs.join("")).toMatch(/token sinks #0, #1, .* pinned where they occur, up to 3 per sequence/);
    const setup = readFileSync(join(run.runDir, "metrics.jsonl"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((m) => m.attentionProfile) as { attentionProfile: { pinBudget: number; unpinnedTokens: number[] } };
    expect(setup.attentionProfile.pinBudget).toBe(3);
    expect(setup.attentionProfile.unpinnedTokens).toEqual([]);

    // GRPO's recorded rollouts: the flags their sessions were given, as `sequencePins` recomputes them.
    const policy = loadPolicy(join(run.runDir, "final"));
    const rule = pinRuleOf(cfg, policy)!;
    expect(rule).toMatchObject({ budget: 3, slots: 2 });
    const dir = join(run.runDir, "trajectories");
    const records = readdirSync(dir).filter((n) => n.startsWith("grpo-")).flatMap((n) =>
      readFileSync(join(dir, n), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l) as { tokens?: number[]; lossMask?: number[]; pinned?: number[] }));
    const withTokens = records.filter((r) => r.tokens);
    expect(withTokens.length).toBeGreaterThan(0);
    for (const r of withTokens) {
      expect(r.pinned).toEqual([...sequencePins(rule, r.tokens!, r.lossMask!)]);
      expect(countPins(r.pinned!)).toBe(3);
    }

    // SFT examples: pinned where a rollout appends (never on the assistant's tokens), within the budget.
    const tokens = withTokens[0]!.tokens!;
    const lossMask = Uint8Array.from(withTokens[0]!.lossMask!);
    const example: SftExample = { tokens, lossMask };
    const [ex] = pinExamples(rule, [example]);
    expect([...ex!.pinned!]).toEqual(withTokens[0]!.pinned);
    const [none] = pinExamples(undefined, [example]);
    expect(none!.pinned).toBeUndefined();
    policy.engine.dispose();

    // The options an evaluation outside the run takes for this checkpoint pin as GRPO's rollouts did.
    const saved = validateConfig(JSON.parse(readFileSync(join(run.runDir, "config.json"), "utf8")));
    const evalPins = policyEvalOptions(saved, policy).pins;
    expect(evalPins).toBeDefined();
    expect([...evalPins!(tokens, 0, 0)]).toEqual([...sequencePins(rule, tokens, new Uint8Array(tokens.length))]);

    // `sinkflex eval --config` of the final checkpoint plays the held-out tasks as the run's own
    // evaluation after RL did, pins included: the same rewards and the same tokens, task for task.
    const out = join(scratch, "eval.json");
    const res = await runCli(["eval", join(run.runDir, "final"), "--config", join(run.runDir, "config.json"), "--json", out]);
    expect(res.code, res.output).toBe(0);
    type Row = { successes: number; trials: number; avgReward: number; tokens: number };
    const strip = (t: Record<string, Row>) => Object.fromEntries(Object.entries(t).map(([k, v]) => [k, { successes: v.successes, trials: v.trials, avgReward: v.avgReward, tokens: v.tokens }]));
    const cli = JSON.parse(readFileSync(out, "utf8")) as { suites: Record<string, Row> };
    const runs = JSON.parse(readFileSync(join(run.runDir, "eval.json"), "utf8")) as { stages: { "after-rl": Record<string, Row> } };
    expect(strip(cli.suites)).toEqual(strip(runs.stages["after-rl"]));
  }, 600_000);
});
