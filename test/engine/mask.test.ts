// The canonical sink mask through the engine, on every kernel set: with a window W and K sink slots
// (and a learnable per-head sink logit), session decoding equals the teacher-forced forward; document ids
// keep packed documents apart; the sink logit's gradient matches finite differences.
import { describe, expect, it } from "vitest";
import { createRandomModel } from "../../src/engine/embedded.js";
import { kernelSets } from "../model/fixtures.js";
import { meanCrossEntropy, randomTokens, tinyConfig } from "./helpers.js";

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
});
