// Parity of the torch engine with the embedded engine under sink-normalized attention (fp32, CPU): one
// checkpoint saved with a sink window (window 6, sinks 2) and one that also has a learnable per-head sink
// logit give the same teacher-forced log-probs within 1e-4 (plain sequences, sequences packing several
// documents after a shared prefix, pinned positions) before and after one identical AdamW step; sampling
// past the window in a batch of sessions gives the log-probs the embedded engine scores for the sampled
// tokens. Skipped with a printed reason when the Python side is missing (a failure when SINKFLEX_REQUIRE_TORCH=1).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { withSinkLogits } from "../../src/attention/index.js";
import { createRandomModel, EmbeddedEngine, loadEngine } from "../../src/engine/embedded.js";
import { openTorchEngine } from "../../src/engine/torch/index.js";
import type { SequenceMasks } from "../../src/engine/types.js";
import { meanCrossEntropy, randomTokens, tinyConfig } from "./helpers.js";
import { maxDiff, testDevice, torchUnavailable } from "./torch-helpers.js";

const TOL = 1e-4;
const ATTENTION = { window: 6, sinks: 2 };
const missing = torchUnavailable();

/** A tiny checkpoint with the sink window, and with sink logits (per layer, head h: 0.4 h - 0.6) when asked. */
function sinkCheckpoint(sinkLogit: boolean): string {
  const dir = join(mkdtempSync(join(tmpdir(), "sinkflex-torch-sink-")), sinkLogit ? "logit" : "window");
  const base = createRandomModel(tinyConfig(), 21, { std: 0.15 });
  const cfg = base.weights.cfg;
  const weights = sinkLogit
    ? withSinkLogits(base.weights, Array.from({ length: cfg.numLayers }, () => Float32Array.from({ length: cfg.numHeads }, (_, h) => 0.4 * h - 0.6)))
    : base.weights;
  new EmbeddedEngine(weights, { attention: ATTENTION }).saveSync(dir);
  return dir;
}

/** Two documents after a 3-token shared prefix, and pinned positions 4 and 9. */
function packedMasks(lengths: number[]): SequenceMasks {
  return {
    docIds: lengths.map((L) => Int32Array.from({ length: L }, (_, t) => (t < 3 ? -1 : t < 3 + Math.floor((L - 3) / 2) ? 0 : 1))),
    pinned: lengths.map((L) => Uint8Array.from({ length: L }, (_, t) => (t === 4 || t === 9 ? 1 : 0))),
  };
}

(missing ? describe.skip : describe)(`torch engine parity under sink-normalized attention${missing ? ` (${missing})` : ""}`, () => {
  for (const sinkLogit of [false, true]) {
    it(`window ${ATTENTION.window}, sinks ${ATTENTION.sinks}${sinkLogit ? ", sink logit" : ""}: log-probs (plain, packed documents, pinned) within 1e-4 before and after an AdamW step`, async () => {
      const dir = sinkCheckpoint(sinkLogit);
      const emb = loadEngine(dir);
      expect(emb.model.attention).toEqual(ATTENTION);
      const torch = await openTorchEngine({ model: dir, threads: 1, ...testDevice() });
      try {
        expect(torch.attention).toMatchObject({ ...ATTENTION, sinkLogit });
        const seqs = [randomTokens(1, 40, 64), randomTokens(2, 17, 64), randomTokens(3, 2, 64)];
        const packed = [randomTokens(4, 30, 64), randomTokens(5, 21, 64)];
        const masks = packedMasks(packed.map((s) => s.length));
        const a = await emb.logprobs(seqs);
        const b = await torch.logprobs(seqs);
        expect(maxDiff(a, b)).toBeLessThan(TOL);
        const pa = await emb.logprobs(packed, masks);
        const pb = await torch.logprobs(packed, masks);
        expect(maxDiff(pa, pb)).toBeLessThan(TOL);
        // The mask matters: the same sequences under full attention differ by far more than the tolerance.
        const full = loadEngine(dir, { attention: { window: 0, sinks: 0 }, overrideAttention: true });
        expect(maxDiff(await full.logprobs(seqs), a)).toBeGreaterThan(100 * TOL);
        expect(maxDiff(await emb.logprobs(packed), pa)).toBeGreaterThan(100 * TOL);
        if (sinkLogit) expect(maxDiff(await loadEngine(sinkCheckpoint(false)).logprobs(seqs), a)).toBeGreaterThan(100 * TOL);

        const hp = { lr: 1e-2, maxGradNorm: 1, weightDecay: 0.01 };
        await emb.forwardBackward([...seqs, ...packed], meanCrossEntropy(), { docIds: [...seqs.map((s) => new Int32Array(s.length)), ...masks.docIds!] });
        const ga = await emb.optimStep(hp);
        await torch.forwardBackward([...seqs, ...packed], meanCrossEntropy(), { docIds: [...seqs.map((s) => new Int32Array(s.length)), ...masks.docIds!] });
        const gb = await torch.optimStep(hp);
        expect(Math.abs(ga.gradNorm - gb.gradNorm) / ga.gradNorm).toBeLessThan(1e-3);
        const a2 = await emb.logprobs(seqs);
        const b2 = await torch.logprobs(seqs);
        expect(maxDiff(a2, a)).toBeGreaterThan(10 * TOL); // the step moved the model
        expect(maxDiff(a2, b2)).toBeLessThan(TOL);
        expect(maxDiff(await emb.logprobs(packed, masks), await torch.logprobs(packed, masks))).toBeLessThan(TOL);

        // Batched decoding past the window: the sampled tokens' log-probs (temperature 1) are the embedded
        // engine's teacher-forced ones.
        const prompts = [randomTokens(6, 9, 64), randomTokens(7, 3, 64), randomTokens(8, 14, 64)];
        const sessions = await Promise.all(prompts.map((p) => torch.session(p)));
        const out = await torch.sampleBatch(sessions, prompts.map((_, i) => ({ maxTokens: 12 + 4 * i, seed: 30 + i })));
        for (let i = 0; i < prompts.length; i++) {
          const full = sessions[i]!.tokens();
          expect(full.length).toBe(prompts[i]!.length + out[i]!.tokens.length);
          const ref = (await emb.logprobs([full]))[0]!.slice(prompts[i]!.length - 1);
          expect(maxDiff([ref], [Float32Array.from(out[i]!.logprobs)])).toBeLessThan(TOL);
        }
        if (sinkLogit) {
          const sd = torch.attention;
          expect(sd.kernel).toBe(testDevice().device.startsWith("cuda") ? "flex" : "eager");
        }
      } finally {
        torch.dispose();
      }
    }, 240_000);
  }
});
