// Three GRPO updates (rl/grpo.ts: clipped ratio, TIS, k3 KL against a frozen reference, AdamW with
// clipping) from one checkpoint on the embedded engine and on the torch engine (fp32, CPU) give the same
// parameters within tolerance, and the same losses and gradient norms on the way. Skipped with a printed
// reason when the Python side is missing (a failure when SINKFLEX_REQUIRE_TORCH=1).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadEngine } from "../../src/engine/embedded.js";
import { openTorchEngine } from "../../src/engine/torch/index.js";
import { grpoUpdate, type GrpoHparams, type TrainSequence } from "../../src/rl/grpo.js";
import { randomTokens } from "./helpers.js";
import { tinyCheckpoint, testDevice, torchUnavailable } from "./torch-helpers.js";

const missing = torchUnavailable();

const HP: GrpoHparams = {
  estimator: "grpo", clipLow: 0.2, clipHigh: 0.28, aggregation: "token", klCoef: 0.04, tisCap: 2, epochs: 2,
  lr: 1e-3, weightDecay: 0.01, maxGradNorm: 1, filterDegenerateGroups: true, microBatch: 3, packPrefixes: false,
};

/** Two groups of four sequences (prompt of 6 tokens, a sampled tail), mixed rewards; behaviour log-probs given. */
function groups(behaviour: (tokens: number[][]) => Promise<Float32Array[]>): Promise<TrainSequence[][]> {
  const seqs = Array.from({ length: 8 }, (_, i) => [...randomTokens(100 + (i >> 2), 6, 64), ...randomTokens(200 + i, 5 + 3 * (i % 4), 64)]);
  return behaviour(seqs).then((lps) =>
    [0, 1].map((g) =>
      seqs.slice(4 * g, 4 * g + 4).map((tokens, k) => {
        const lossMask = new Uint8Array(tokens.length).fill(1, 6);
        const behaviourLogprobs = new Float32Array(tokens.length);
        for (let t = 6; t < tokens.length; t++) behaviourLogprobs[t] = lps[4 * g + k]![t - 1]! - 0.05 * ((t + k) % 3);
        return { tokens, lossMask, behaviourLogprobs, reward: (k + g) % 3 === 0 ? 1 : 0, policyVersion: 0 };
      }),
    ),
  );
}

(missing ? describe.skip : describe)(`GRPO on the torch engine vs the embedded engine${missing ? ` (${missing})` : ""}`, () => {
  it("three GRPO steps from one checkpoint give the same parameters (fp32, CPU)", async () => {
    const dir = tinyCheckpoint();
    const emb = loadEngine(dir);
    const embRef = loadEngine(dir);
    const torch = await openTorchEngine({ model: dir, threads: 1, ...testDevice() });
    const torchRef = await openTorchEngine({ model: dir, threads: 1, ...testDevice() });
    try {
      const initial = emb.weights.data.slice();
      for (let step = 0; step < 3; step++) {
        const batch = await groups((s) => emb.logprobs(s));
        const a = await grpoUpdate(emb, embRef, batch, HP);
        const b = await grpoUpdate(torch, torchRef, batch, HP);
        expect(a.gradNorm).toBeGreaterThan(0);
        expect(Math.abs(a.loss - b.loss)).toBeLessThan(1e-4);
        expect(Math.abs(a.kl - b.kl)).toBeLessThan(1e-5);
        expect(Math.abs(a.gradNorm - b.gradNorm) / a.gradNorm).toBeLessThan(1e-3);
      }
      expect(torch.policyVersion).toBe(emb.policyVersion);
      const out = join(mkdtempSync(join(tmpdir(), "sinkflex-grpo-parity-")), "torch");
      await torch.save(out);
      const fromTorch = loadEngine(out).weights.data;
      const after = emb.weights.data;
      let maxDiff = 0;
      let diff2 = 0;
      let moved2 = 0;
      for (let i = 0; i < after.length; i++) {
        maxDiff = Math.max(maxDiff, Math.abs(fromTorch[i]! - after[i]!));
        diff2 += (fromTorch[i]! - after[i]!) ** 2;
        moved2 += (after[i]! - initial[i]!) ** 2;
      }
      console.log(`GRPO parity after 3 steps: max |torch - embedded| ${maxDiff.toExponential(2)}, ||torch - embedded|| / ||embedded - initial|| ${Math.sqrt(diff2 / moved2).toExponential(2)}`);
      expect(Math.sqrt(moved2)).toBeGreaterThan(1e-3); // the steps moved the model
      expect(maxDiff).toBeLessThan(1e-5); // measured 4.8e-7
      expect(Math.sqrt(diff2 / moved2)).toBeLessThan(1e-3); // measured 5e-6
    } finally {
      torch.dispose();
      torchRef.dispose();
    }
  }, 300_000);
});
