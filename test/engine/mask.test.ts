// The canonical sink mask through the engine, on every kernel set: with a window W and K sink slots
// (and a learnable per-head sink logit), session decoding equals the teacher-forced forward; document ids
// keep packed documents apart; documents packed after one shared prefix score and train as if each were
// prefix + document alone; the sink logit's gradient matches finite differences.
import { describe, expect, it } from "vitest";
import { createRandomModel } from "../../src/engine/embedded.js";
import type { TokenLoss } from "../../src/engine/types.js";
import { kernelSets } from "../model/fixtures.js";
import { expectSameGradients, meanCrossEntropy, randomTokens, tinyConfig } from "./helpers.js";

const kernels = await kernelSets();
const V = 64;

describe.each(kernels.map((k) => [k.name, k] as const))("sink mask on %s kernels", (_n, k) => {
  it("window + sink slots + sink logit: sampled log-probs equal teacher-forced ones", async () => {
    const engine = createRandomModel(tinyConfig(), 4, {
      kernels: k, std: 0.2, blockSize: 4, attention: { window: 5, sinks: 2 }, sinkLogits: true,
    });
    const sinks = engine.gradParams.layers[0]!.sinks;
    expect(sinks).not.toBeNull();
    for (const l of engine.model.params.layers) l.sinks!.set([0.5, -1, 2, 0]);
    const prompt = randomTokens(3, 9, V);
    const r = await (await engine.session(prompt)).sample({ maxTokens: 14, seed: 2 });
    const [lp] = await engine.logprobs([[...prompt, ...r.tokens]]);
    let d = 0;
    r.logprobs.forEach((x, i) => (d = Math.max(d, Math.abs(x - lp![prompt.length - 1 + i]!))));
    expect(d).toBeLessThan(1e-4);
    // the window matters: full attention gives other log-probs
    const full = createRandomModel(tinyConfig(), 4, { kernels: k, std: 0.2, sinkLogits: true });
    full.weights.data.set(engine.weights.data);
    const [lpFull] = await full.logprobs([[...prompt, ...r.tokens]]);
    expect(Math.abs(lpFull![20]! - lp![20]!)).toBeGreaterThan(1e-5);
  });

  it("document ids: two packed documents score as if alone; sink logit gradient matches finite differences", async () => {
    const engine = createRandomModel(tinyConfig(), 6, { kernels: k, std: 0.2, sinkLogits: true });
    const a = randomTokens(1, 7, V);
    const b = randomTokens(2, 6, V);
    const docIds = [Int32Array.from([...a.map(() => 0), ...b.map(() => 1)])];
    const [packed] = await engine.logprobs([[...a, ...b]], { docIds });
    const [alone] = await engine.logprobs([a]);
    for (let i = 0; i < a.length - 1; i++) expect(Math.abs(packed![i]! - alone![i]!)).toBeLessThan(1e-5);
    // (the second document's positions continue from the first's, so only the first is compared exactly)

    for (const l of engine.model.params.layers) l.sinks!.fill(0);
    const seqs = [randomTokens(5, 12, V)];
    await engine.forwardBackward(seqs, meanCrossEntropy());
    const g = engine.gradParams.layers[1]!.sinks![2]!;
    const p = engine.model.params.layers[1]!.sinks!;
    const lossAt = async (delta: number) => {
      p[2]! += delta;
      const lp = await engine.logprobs(seqs);
      p[2]! -= delta;
      return -lp[0]!.reduce((x, y) => x + y, 0) / lp[0]!.length;
    };
    const h = 1e-2;
    const fd = ((await lossAt(h)) - (await lossAt(-h))) / (2 * h);
    expect(Math.abs(g)).toBeGreaterThan(1e-4);
    expect(Math.abs(fd - g), `fd ${fd} vs analytic ${g}`).toBeLessThan(1e-2 * Math.abs(g) + 3e-5);
  });

  for (const attention of [{ window: 0, sinks: 0 }, { window: 6, sinks: 2 }]) {
    it(`shared prefix (window ${attention.window}, ${attention.sinks} sinks): packed documents give the log-probs and gradients of prefix + document alone`, async () => {
      const make = () => createRandomModel(tinyConfig(), 8, { kernels: k, std: 0.2, attention, sinkLogits: true });
      const packedEngine = make();
      const aloneEngine = make();
      for (const l of packedEngine.model.params.layers) l.sinks!.set([0.3, -0.5, 1, 0]);
      aloneEngine.weights.data.set(packedEngine.weights.data);
      const prefix = randomTokens(11, 9, V);
      const docs = [randomTokens(12, 7, V), randomTokens(13, 4, V), randomTokens(14, 10, V)];
      const packed = [...prefix, ...docs.flat()];
      const docIds = Int32Array.from([...prefix.map(() => -1), ...docs.flatMap((d, i) => d.map(() => i))]);
      // the loss covers every document token but each document's first (whose row in the packed
      // sequence is another document's last): the same tokens in both layouts
      const starts = docs.map((_, i) => prefix.length + docs.slice(0, i).reduce((n, d) => n + d.length, 0));
      const packedMask = new Uint8Array(packed.length - 1);
      docs.forEach((d, i) => packedMask.fill(1, starts[i]!, starts[i]! + d.length - 1));
      const aloneMasks = docs.map((d) => new Uint8Array(prefix.length + d.length - 1).fill(1, prefix.length));
      const maskedSum = (masks: Uint8Array[]): TokenLoss => (lps) => {
        let loss = 0;
        lps.forEach((l, s) => l.forEach((x, t) => (loss -= masks[s]![t]! * x)));
        return { loss, dLogprobs: masks.map((m) => Float32Array.from(m, (x) => -x)) };
      };
      const [lpPacked] = await packedEngine.logprobs([packed], { docIds: [docIds] });
      const lpAlone = await aloneEngine.logprobs(docs.map((d) => [...prefix, ...d]));
      let worst = 0;
      docs.forEach((d, i) => {
        for (let j = 1; j < d.length; j++) {
          worst = Math.max(worst, Math.abs(lpPacked![starts[i]! + j - 1]! - lpAlone[i]![prefix.length + j - 1]!));
        }
      });
      expect(worst).toBeLessThan(2e-5);
      const a = await packedEngine.forwardBackward([packed], maskedSum([packedMask]), { docIds: [docIds] });
      const b = await aloneEngine.forwardBackward(docs.map((d) => [...prefix, ...d]), maskedSum(aloneMasks));
      expect(Math.abs(a.loss - b.loss)).toBeLessThan(1e-4 * Math.abs(b.loss));
      expectSameGradients(packedEngine, aloneEngine);
      // without the shared prefix id the documents would not see the prefix: other log-probs
      const plain = Int32Array.from([...prefix.map(() => 0), ...docs.flatMap((d, i) => d.map(() => i + 1))]);
      const [lpPlain] = await packedEngine.logprobs([packed], { docIds: [plain] });
      expect(Math.abs(lpPlain![starts[1]! + 1]! - lpPacked![starts[1]! + 1]!)).toBeGreaterThan(1e-4);
    });
  }

  it("rejects document ids that decrease or are below -1", async () => {
    const engine = createRandomModel(tinyConfig(), 8, { kernels: k });
    const seq = randomTokens(3, 5, V);
    await expect(engine.logprobs([seq], { docIds: [Int32Array.from([0, 0, -1, 1, 1])] })).rejects.toThrow(/must not decrease/);
    await expect(engine.logprobs([seq], { docIds: [Int32Array.from([-2, 0, 0, 1, 1])] })).rejects.toThrow(/-1 for a shared prefix/);
  });
});
