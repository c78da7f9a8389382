// Each model's own sinks in the training pipeline (attention.mode profile), the learnable sink logit
// trained with the policy (attention.sinkLogit), and the errors for settings that do not fit: a profile
// of another model, a window no larger than the sink slots, a mask that differs from the checkpoint's.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  checkProfileFits, describeLayout, parseProfile, profileChanges, profileLayout, SINK_PROFILE_FILE, SINK_PROFILE_FORMAT, type SinkProfile,
} from "../../src/attention/index.js";
import { initSinkLogits } from "../../src/attention/sink-logit.js";
import { EmbeddedEngine, createRandomModel, loadEngine } from "../../src/engine/embedded.js";
import { referenceKernels } from "../../src/kernels/index.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { loadPolicy } from "../../src/pipeline/policy.js";
import { train } from "../../src/pipeline/train.js";
import { probeCommand } from "../../src/cli/commands/sinks.js";
import { parityConfig, registerParityEnv } from "../pipeline/parity-env.js";
import { randomTokens, tinyConfig } from "./helpers.js";

registerParityEnv();
const scratch = mkdtempSync(join(tmpdir(), "pipeline-profile-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const k = referenceKernels;

/** A profile of `layers` x `heads` with position sinks at `positions` in layer 0. */
function profile(layers: number, heads: number, positions: number[], prefix = [10, 11, 12, 13, 14, 15, 16, 17]): SinkProfile {
  return {
    format: SINK_PROFILE_FORMAT, model: "other", numLayers: layers, numHeads: heads,
    settings: { delta: 32, threshold: 0.3, headFraction: 0.25, queries: 64 }, sequences: 4, tokens: 400,
    layers: Array.from({ length: layers }, (_, l) => ({
      layer: l, positions: l === 0 ? positions.map((p) => ({ position: p, tokenId: prefix[p] ?? 0, mass: 0.5, heads: [0] })) : [], tokens: [],
    })),
    layersWithoutSinks: [], prefix,
  };
}

describe("bad input", () => {
  it("a profile from another model names both shapes", () => {
    expect(() => checkProfileFits(profile(3, 8, [0]), { numLayers: 2, numHeads: 4 }, "p.json"))
      .toThrow(/p\.json was probed on a model with 3 layers x 8 heads .*this model has 2 layers x 4 heads/);
    expect(() => parseProfile({ format: "x" }, "q.json")).toThrow(/q\.json: not a sink profile/);
  });

  it("a window no larger than the sink slots names both, in the config and in the profile's layout", () => {
    const base = parityConfig(scratch, "w");
    expect(() => validateConfig({ ...base, attention: { mode: "profile", sinks: 8, window: 8 } }))
      .toThrow(/window \(8\) must be larger than the number of sink slots \(8\)/);
    // sinks 2, but the model's sink at position 5 needs 6 slots: a window of 6 is too small.
    expect(() => profileLayout(profile(2, 4, [5]), { window: 6, sinks: 2, pinBudget: 4 }))
      .toThrow(/window \(6\) must be larger than the sink slots \(6: attention.sinks 2 raised to cover the profile's position sinks 5\)/);
    const ok = profileLayout(profile(2, 4, [5, 40]), { window: 64, sinks: 2, pinBudget: 4 });
    expect(ok.attention).toEqual({ window: 64, sinks: 6 });
    expect(ok.slotTokens).toEqual([10, 11, 12, 13, 14, 15]);
    expect(ok.droppedPositions).toEqual([40]);
  });

  it("the layout pins the profile's token sinks with what the slots leave of the budget, and lists them as kept", () => {
    const withTokens = (positions: number[]): SinkProfile => {
      const p = profile(2, 4, positions);
      p.layers[1]!.tokens = [{ tokenId: 30, occurrences: 9, sinkOccurrences: 8, mass: 0.6 }, { tokenId: 21, occurrences: 9, sinkOccurrences: 5, mass: 0.4 }];
      return p;
    };
    const free = profileLayout(withTokens([0]), { window: 64, sinks: 2, pinBudget: 4 });
    expect(free.pinnedTokens).toEqual([30, 21]);
    expect(free.unpinnedTokens).toEqual([]);
    expect(free.pins).toEqual({ tokenIds: [21, 30], budget: 4, slots: 2 });
    expect(describeLayout(free)).toMatch(/token sinks #30, #21 pinned where they occur, up to 4 per sequence/);
    // a position sink at 5 raises the slots to 6: 4 of the budget go to the slots, none is left to pin
    const spent = profileLayout(withTokens([5]), { window: 64, sinks: 2, pinBudget: 4 });
    expect(spent.pinnedTokens).toEqual([]);
    expect(spent.unpinnedTokens).toEqual([30, 21]);
    expect(spent.pins.budget).toBe(0);
    expect(describeLayout(spent)).toMatch(/token sinks #30, #21 not pinned \(the sink slots took the whole pin budget\)/);
    expect(profileLayout(withTokens([3]), { window: 64, sinks: 2, pinBudget: 4 }).pins).toEqual({ tokenIds: [21, 30], budget: 2, slots: 4 });
  });

  it("profileChanges says what moved", () => {
    expect(profileChanges(profile(2, 4, [3]), profile(2, 4, [3]))).toEqual([]);
    expect(profileChanges(profile(2, 4, [3]), profile(2, 4, [0]))).toEqual(["layer 0: position sink 3 gone; position sink 0 new"]);
  });
});

describe("the sink logit in training", () => {
  it("its gradient through the whole model matches central finite differences", async () => {
    const init = initSinkLogits(createRandomModel(tinyConfig(), 5, { kernels: k, std: 0.3 }).weights, k, [randomTokens(1, 24, 64)]);
    // A sink logit near the heads' own log-sum-exp so that it carries real mass (a larger gradient).
    const engine = new EmbeddedEngine(init.weights, { kernels: k, attention: { window: 8, sinks: 2 } });
    for (const layer of engine.model.params.layers) layer.sinks!.fill(0.5);
    const seqs = [randomTokens(7, 20, 64)];
    const lossOf = async () => {
      const [lp] = await engine.logprobs(seqs);
      return -lp!.reduce((a, x) => a + x, 0);
    };
    engine.zeroGrad();
    await engine.forwardBackward(seqs, (lps) => ({ loss: -lps[0]!.reduce((a, x) => a + x, 0), dLogprobs: [new Float32Array(lps[0]!.length).fill(-1)] }));
    for (const l of [0, 1]) {
      const s = engine.model.params.layers[l]!.sinks!;
      const g = engine.gradParams.layers[l]!.sinks!;
      for (let h = 0; h < 4; h++) {
        const eps = 1e-2;
        const x = s[h]!;
        s[h] = x + eps;
        const up = await lossOf();
        s[h] = x - eps;
        const down = await lossOf();
        s[h] = x;
        const fd = (up - down) / (2 * eps);
        expect(Math.abs(g[h]! - fd)).toBeLessThanOrEqual(2e-3 + 2e-2 * Math.abs(fd));
      }
      expect(Math.max(...[...g].map(Math.abs))).toBeGreaterThan(1e-3);
    }
  });

  it("saved with the checkpoint and restored by the loader, with the profile beside the mask", async () => {
    const init = initSinkLogits(createRandomModel(tinyConfig(), 9, { kernels: k, std: 0.2 }).weights, k, [randomTokens(2, 30, 64)]);
    const engine = new EmbeddedEngine(init.weights, { kernels: k, attention: { window: 16, sinks: 3 } });
    engine.sinkProfile = profile(2, 4, [2]) as unknown as Record<string, unknown>;
    const dir = join(scratch, "roundtrip");
    await engine.save(dir);
    expect(existsSync(join(dir, SINK_PROFILE_FILE))).toBe(true);
    const back = loadEngine(dir, { kernels: k });
    expect(back.model.attention).toEqual({ window: 16, sinks: 3 });
    expect(Array.from(back.model.params.layers[1]!.sinks!)).toEqual(Array.from(engine.model.params.layers[1]!.sinks!));
    expect(back.sinkProfile).toEqual(engine.sinkProfile);
    const seq = [randomTokens(4, 40, 64)];
    const [a] = await engine.logprobs(seq);
    const [b] = await back.logprobs(seq);
    expect(Array.from(b!)).toEqual(Array.from(a!));
  });
});

describe("attention.mode profile in a run", () => {
  const cfgOf = (name: string, attention: Record<string, unknown>) => {
    const base = parityConfig(join(scratch, "runs"), name);
    return validateConfig({ ...base, grpo: { ...base.grpo, steps: 2 }, eval: { tasksPerSuite: 2 }, attention });
  };

  it("probes the policy, lays its slots out, trains the sink logit, saves both with every checkpoint; loaders restore them", async () => {
    const cfg = cfgOf("profile", { mode: "profile", sinks: 1, window: 24, pinBudget: 4, reprobeEvery: 1, probeSequences: 8, sinkLogit: true });
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
    const log = logs.join("");
    expect(log).toMatch(/attention: profile of .* sink slots holding tokens/);
    expect(log).toMatch(/attention: sink logit per head added/);
    expect(log).toMatch(/attention: GRPO step 1: re-probed on \d+ trajectories/);
    const saved = parseProfile(JSON.parse(readFileSync(join(run.runDir, "sink-profile.json"), "utf8")), "run");
    expect(saved.numLayers).toBe(1);
    const final = join(run.runDir, "final");
    expect(existsSync(join(final, SINK_PROFILE_FILE))).toBe(true);
    const policy = loadPolicy(final);
    expect(policy.engine.model.attention.window).toBe(24);
    expect(policy.engine.model.attention.sinks).toBeGreaterThanOrEqual(1);
    expect(policy.engine.model.params.layers[0]!.sinks).not.toBeNull();
    expect(policy.engine.sinkProfile).not.toBeNull();
    policy.engine.dispose();
    // `sinks probe --saved` shows the profile saved with the checkpoint; a checkpoint without one is refused.
    const opts = { episodes: 1, delta: 32, queries: 16, maxTokens: 512, threshold: 0.3 };
    expect(await probeCommand(final, { ...opts, saved: true })).toMatch(/saved profile \(.*sinkflex_sink_profile\.json\):\nlayer/);
    const plain = join(scratch, "plain");
    await createRandomModel(tinyConfig(), 1, { kernels: k }).save(plain);
    await expect(probeCommand(plain, { ...opts, saved: true })).rejects.toThrow(/has no sinkflex_sink_profile\.json .*probe it without --saved/);

    // Starting a run from that checkpoint with another window: the checkpoint's mask and the config's, both named.
    const again = validateConfig({ ...cfgOf("conflict", { mode: "profile", sinks: 1, window: 32, pinBudget: 4, sinkLogit: true }), model: { checkpoint: final } });
    await expect(train(again, { quiet: true })).rejects.toThrow(/trained with sink-window attention \(window 24, sinks \d+\).*gives sink-window attention \(window 32, sinks \d+\)/);
    // ...and without the sink logit it was trained with.
    const noLogit = validateConfig({ ...cfgOf("nologit", { mode: "full" }), model: { checkpoint: final } });
    await expect(train(noLogit, { quiet: true })).rejects.toThrow(/has sink logits .* attention.sinkLogit is false/);
  }, 600_000);
});
