// The decoder's forward and backward against transformers fixtures, on every kernel set:
// logits within 1e-4 absolute, loss within 1e-4, every parameter gradient within 1e-4 relative to the
// tensor's largest gradient (plus 1e-7 absolute).
import { describe, expect, it } from "vitest";
import { loadCheckpoint } from "../../src/model/checkpoint.js";
import { bindParams } from "../../src/model/params.js";
import { buildModel, randomWeights } from "../../src/model/instance.js";
import { packSequences, trainBackward, trainForward, TrainWorkspace } from "../../src/model/transformer.js";
import { expectSameValues } from "../engine/helpers.js";
import { FIXTURE_MODELS, kernelSets, loadFixture } from "./fixtures.js";

const kernels = await kernelSets();
/** A tiny random Qwen2 for the tests that need no fixture. */
const TINY_CFG = { arch: "qwen2", hiddenSize: 32, numLayers: 1, numHeads: 4, numKvHeads: 2, headDim: 8, intermediateSize: 48,
  vocabSize: 50, rmsNormEps: 1e-6, ropeTheta: 10000, ropeScaling: { type: "none" }, maxPositionEmbeddings: 512,
  tieWordEmbeddings: true, qkvBias: true } as const;

describe.each(kernels.map((k) => [k.name, k] as const))("decoder vs transformers on %s kernels", (_n, k) => {
  it.each(FIXTURE_MODELS)("%s: logits, loss and every gradient match", (name) => {
    const fx = loadFixture(name);
    const ck = loadCheckpoint(fx.checkpoint);
    const model = buildModel(ck, k);
    const ws = new TrainWorkspace(ck.cfg);
    const batch = packSequences(fx.inputIds);
    trainForward(model, ws, batch);
    const V = ck.cfg.vocabSize;
    const N = batch.ids.length;
    const want = fx.expected.get("logits")!.data;
    expect(want.length).toBe(N * V);
    let maxDiff = 0;
    for (let i = 0; i < N * V; i++) maxDiff = Math.max(maxDiff, Math.abs(ws.logits[i]! - want[i]!));
    expect(maxDiff).toBeLessThan(1e-4);

    let count = 0;
    let sum = 0;
    for (let n = 0; n < N; n++) if (batch.targets[n]! >= 0) { count++; sum += ws.logprob[n]!; }
    expect(Math.abs(-sum / count - fx.meta.loss)).toBeLessThan(1e-4);

    const dLogprob = new Float32Array(N);
    for (let n = 0; n < N; n++) dLogprob[n] = batch.targets[n]! >= 0 ? -1 / count : 0;
    const grads = new Float32Array(ck.data.length);
    trainBackward(model, ws, batch, dLogprob, bindParams(ck.cfg, ck.entries, grads));
    for (const e of ck.entries) {
      const g = fx.expected.get(`grad.${e.name}`);
      expect(g, e.name).toBeDefined();
      const ours = grads.subarray(e.offset, e.offset + e.size);
      let scale = 0;
      let diff = 0;
      for (let i = 0; i < e.size; i++) {
        scale = Math.max(scale, Math.abs(g!.data[i]!));
        diff = Math.max(diff, Math.abs(ours[i]! - g!.data[i]!));
      }
      expect(diff, `${e.name}: max |diff| ${diff} vs max |grad| ${scale}`).toBeLessThanOrEqual(1e-4 * scale + 1e-7);
    }
  });
});

describe("LM head in row chunks", () => {
  it("gives the same log-probs and gradients as one block", () => {
    const cfg = TINY_CFG;
    const w = randomWeights(cfg, 3, { std: 0.2 });
    const model = buildModel(w, kernels[0]!);
    const batch = packSequences([[1, 5, 9, 2, 7, 3, 3, 8], [4, 4, 1, 0, 49, 12, 6]]);
    const N = batch.ids.length;
    const dLogprob = Float32Array.from(batch.targets, (t, i) => (t >= 0 ? -0.1 * ((i % 3) + 1) : 0));
    const run = (ws: TrainWorkspace) => {
      trainForward(model, ws, batch);
      const lp = ws.logprob.slice(0, N);
      const g = new Float32Array(w.data.length);
      trainBackward(model, ws, batch, dLogprob, bindParams(w.cfg, w.entries, g));
      return { lp, g };
    };
    const whole = run(new TrainWorkspace(w.cfg));
    const chunked = run(new TrainWorkspace(w.cfg, 4 * cfg.vocabSize)); // 4 rows at a time
    for (let i = 0; i < N; i++) expect(Math.abs(chunked.lp[i]! - whole.lp[i]!)).toBeLessThan(1e-6);
    let d = 0;
    for (let i = 0; i < whole.g.length; i++) d = Math.max(d, Math.abs(chunked.g[i]! - whole.g[i]!));
    expect(d).toBeLessThan(1e-6);
  });
});

describe("LM head on the scored rows only", () => {
  it("gives the scored rows' log-probs and the same gradients as every row, with 0 elsewhere", () => {
    const cfg = { ...TINY_CFG, numLayers: 2 };
    const w = randomWeights(cfg, 4, { std: 0.2 });
    const model = buildModel(w, kernels[0]!);
    const seqs = [[1, 5, 9, 2, 7, 3, 3, 8, 11, 13], [4, 4, 1, 0, 49, 12, 6]];
    // Predictions wanted: a few of each sequence (one per prediction, length - 1).
    const scored = [Uint8Array.from([0, 0, 1, 1, 0, 1, 0, 1, 1]), Uint8Array.from([1, 0, 0, 1, 1, 0])];
    const all = packSequences(seqs);
    const some = packSequences(seqs, null, null, scored);
    expect([...some.scored!]).toEqual([2, 3, 5, 7, 8, 10, 13, 14]);
    const N = all.ids.length;
    const wanted = new Uint8Array(N);
    for (const r of some.scored!) wanted[r] = 1;
    // A loss on the scored rows only.
    const dLogprob = Float32Array.from(all.targets, (_, i) => (wanted[i] ? -0.1 * ((i % 3) + 1) : 0));
    const run = (batch: typeof all, ws: TrainWorkspace) => {
      trainForward(model, ws, batch);
      const lp = ws.logprob.slice(0, N);
      const g = new Float32Array(w.data.length);
      trainBackward(model, ws, batch, dLogprob, bindParams(w.cfg, w.entries, g));
      return { lp, g };
    };
    const full = run(all, new TrainWorkspace(w.cfg));
    for (const ws of [new TrainWorkspace(w.cfg), new TrainWorkspace(w.cfg, 3 * cfg.vocabSize)]) {
      const part = run(some, ws);
      for (let i = 0; i < N; i++) expect(part.lp[i]!).toBeCloseTo(wanted[i] ? full.lp[i]! : 0, 6);
      expectSameValues(part.g, full.g, 1e-5);
    }
  });
});
