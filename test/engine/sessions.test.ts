// The embedded engine's sessions on every kernel set, beyond the shared contract (contract.ts):
// incremental KV-cache appends equal the full forward, forks share prefix blocks (copy on write),
// truncate releases blocks, lazy computation of sampled tokens, save/load with optimizer state,
// continuous batching of concurrent callers, samples independent of the batch.
import { describe, expect, it } from "vitest";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRandomModel, EmbeddedSession, EngineError, loadEngine } from "../../src/engine/embedded.js";
import type { SampleResult } from "../../src/engine/types.js";
import { packSequences, trainForward, TrainWorkspace } from "../../src/model/transformer.js";
import { bf16Available, setMatmulPrecision } from "../../src/kernels/index.js";
import { kernelSets } from "../model/fixtures.js";
import { randomTokens, tinyConfig } from "./helpers.js";

const kernels = await kernelSets();
const V = 64;

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

describe.each(kernels.map((k) => [k.name, k] as const))("sessions on %s kernels", (_n, k) => {
  const make = (seed = 11, over = {}) => createRandomModel(tinyConfig(over), seed, { kernels: k, std: 0.15, blockSize: 4 });

  it.each([["qwen2", {}], ["qwen3", { arch: "qwen3", qkvBias: false, headDim: 16 }]] as const)("%s: appending in pieces gives the logits of the full forward at every step", async (_a, over) => {
    const engine = make(11, over);
    const seq = randomTokens(5, 23, V);
    const ws = new TrainWorkspace(engine.config);
    trainForward(engine.model, ws, packSequences([seq]), false);
    const s = (await engine.session(seq.slice(0, 6))) as EmbeddedSession;
    expect(maxAbsDiff(s.nextLogits(), ws.logits.subarray(5 * V, 6 * V))).toBeLessThan(1e-4);
    await s.append(seq.slice(6, 15));
    expect(maxAbsDiff(s.nextLogits(), ws.logits.subarray(14 * V, 15 * V))).toBeLessThan(1e-4);
    for (let t = 15; t < seq.length; t++) {
      await s.append([seq[t]!]);
      expect(maxAbsDiff(s.nextLogits(), ws.logits.subarray(t * V, (t + 1) * V))).toBeLessThan(1e-4);
    }
    expect(s.tokens()).toEqual(seq);
    expect(s.length).toBe(23);
  });

  it("same seed, same tokens; sampled log-probs equal teacher-forced log-probs at temperature 1", async () => {
    const engine = make();
    const prompt = randomTokens(9, 7, V);
    const a = await engine.session(prompt);
    const b = await engine.session(prompt);
    const ra = await a.sample({ maxTokens: 20, seed: 42 });
    const rb = await b.sample({ maxTokens: 20, seed: 42 });
    expect(ra.tokens).toEqual(rb.tokens);
    expect(ra.finishReason).toBe("length");
    const rc = await (await engine.session(prompt)).sample({ maxTokens: 20, seed: 43 });
    expect(rc.tokens).not.toEqual(ra.tokens);
    const [lp] = await engine.logprobs([[...prompt, ...ra.tokens]]);
    expect(maxAbsDiff(lp!.subarray(prompt.length - 1), ra.logprobs)).toBeLessThan(1e-4);
    expect(a.tokens()).toEqual([...prompt, ...ra.tokens]);
    // sampling goes on from where it stopped, with the last sampled token computed lazily
    const more = await a.sample({ maxTokens: 5, seed: 1 });
    const [lp2] = await engine.logprobs([a.tokens()]);
    expect(maxAbsDiff(lp2!.subarray(prompt.length + 19), more.logprobs)).toBeLessThan(1e-4);
  });

  it("forks share the parent's prefix blocks and diverge independently", async () => {
    const engine = make();
    const prompt = randomTokens(4, 10, V); // blocks of 4: two full, one half full
    const parent = (await engine.session(prompt)) as EmbeddedSession;
    expect(parent.blockIds.length).toBe(0); // the prompt is computed by the first call that needs it
    const kids = [parent.fork()]; // computes the prompt once
    const used = engine.pool.usedBlocks;
    expect(parent.blockIds.length).toBe(3);
    for (let i = 1; i < 8; i++) kids.push(parent.fork());
    expect(engine.pool.usedBlocks).toBe(used); // nothing copied
    expect(engine.stats.prefillTokens).toBe(prompt.length);
    for (const kid of kids) expect(kid.blockIds).toEqual(parent.blockIds);
    const res = await engine.sampleBatch(kids, kids.map((_, i) => ({ maxTokens: 6, seed: i })));
    // each child now owns a copy of the half-full block plus new blocks; the two full blocks stay shared
    for (const kid of kids) expect(kid.blockIds.slice(0, 2)).toEqual(parent.blockIds.slice(0, 2));
    expect(engine.pool.refCount(parent.blockIds[0]!)).toBe(9);
    expect(new Set(res.map((r) => r.tokens.join(","))).size).toBeGreaterThan(1);
    const lps = await engine.logprobs(kids.map((kid) => kid.tokens()));
    res.forEach((r, i) => expect(maxAbsDiff(lps[i]!.subarray(prompt.length - 1), r.logprobs)).toBeLessThan(1e-4));
    // the parent is untouched and still samples like a fresh session
    const p1 = await parent.sample({ maxTokens: 5, seed: 3 });
    const fresh = await (await engine.session(prompt)).sample({ maxTokens: 5, seed: 3 });
    expect(p1.tokens).toEqual(fresh.tokens);
    for (const kid of kids) kid.close();
    expect(engine.pool.refCount(parent.blockIds[0]!)).toBe(1);
  });

  it("truncate drops tokens and resampling with the same seed repeats itself", async () => {
    const engine = make();
    const prompt = randomTokens(6, 9, V);
    const s = await engine.session(prompt);
    const first = await s.sample({ maxTokens: 10, seed: 5 });
    s.truncate(prompt.length);
    expect(s.tokens()).toEqual(prompt);
    const again = await s.sample({ maxTokens: 10, seed: 5 });
    expect(again.tokens).toEqual(first.tokens);
    expect(maxAbsDiff(again.logprobs, first.logprobs)).toBeLessThan(1e-5);
    s.truncate(3);
    await s.append(prompt.slice(3));
    const third = await s.sample({ maxTokens: 10, seed: 5 });
    expect(third.tokens).toEqual(first.tokens);
    // other tokens of the same length after a truncate: computed afresh, not the logits held before
    const other = randomTokens(7, prompt.length, V);
    s.truncate(prompt.length);
    (s as EmbeddedSession).nextLogits(); // logits held for a sequence of this length
    s.truncate(3);
    await s.append(other.slice(3));
    const fresh = await engine.session([...prompt.slice(0, 3), ...other.slice(3)]);
    expect(maxAbsDiff((s as EmbeddedSession).nextLogits(), (fresh as EmbeddedSession).nextLogits())).toBeLessThan(1e-5);
    fresh.close();
    s.close();
    expect(engine.pool.usedBlocks).toBe(0);
    await expect(s.append([1])).rejects.toThrow(EngineError);
  });

  it("pending prompts of many sessions are computed together, in forwards of at most maxForwardTokens", async () => {
    const lengths = [5, 9, 9, 30, 1, 12];
    const prompts = lengths.map((n, i) => randomTokens(20 + i, n, V));
    const params = prompts.map((_, i) => ({ maxTokens: 7, seed: 50 + i }));
    const solo = make();
    const alone: SampleResult[] = [];
    for (let i = 0; i < prompts.length; i++) alone.push(await (await solo.session(prompts[i]!)).sample(params[i]!));
    for (const cap of [2048, 8]) {
      const engine = createRandomModel(tinyConfig(), 11, { kernels: k, std: 0.15, blockSize: 4, maxForwardTokens: cap });
      const sessions = await Promise.all(prompts.map((p) => engine.session(p)));
      expect(engine.stats.forwards).toBe(0);
      const res = await engine.sampleBatch(sessions, params);
      // one prefill forward (or, with 8 rows at most, the 30-token prompt in pieces and the rest in groups),
      // then one forward per decode step
      expect(engine.stats.prefillTokens).toBe(lengths.reduce((a, n) => a + n, 0));
      expect(engine.stats.decodeSteps).toBe(6);
      if (cap === 2048) expect(engine.stats.forwards).toBe(7);
      else expect(engine.stats.forwards).toBeGreaterThan(7 + Math.ceil(30 / 8));
      res.forEach((r, i) => {
        expect(r.tokens).toEqual(alone[i]!.tokens);
        expect(maxAbsDiff(r.logprobs, alone[i]!.logprobs)).toBeLessThan(1e-4);
      });
      const lps = await engine.logprobs(sessions.map((s) => s.tokens()));
      res.forEach((r, i) => expect(maxAbsDiff(lps[i]!.subarray(lengths[i]! - 1), r.logprobs)).toBeLessThan(1e-4));
      engine.dispose();
    }
  });

  it("greedy, top-k 1 and stop tokens", async () => {
    const engine = make();
    const prompt = randomTokens(7, 5, V);
    const g = await (await engine.session(prompt)).sample({ maxTokens: 8, temperature: 0 });
    const k1 = await (await engine.session(prompt)).sample({ maxTokens: 8, topK: 1, seed: 9 });
    expect(k1.tokens).toEqual(g.tokens);
    expect(k1.logprobs.every((x) => Math.abs(x) < 1e-6)).toBe(true);
    const stop = g.tokens[2]!;
    const st = await (await engine.session(prompt)).sample({ maxTokens: 8, temperature: 0, stopTokens: [stop] });
    expect(st.finishReason).toBe("stop");
    expect(st.tokens).toEqual(g.tokens.slice(0, g.tokens.indexOf(stop) + 1));
    await expect((await engine.session(prompt)).sample({ maxTokens: 3, topP: 0 })).rejects.toThrow(/topP must be in/);
    await expect(engine.session([V + 1])).rejects.toThrow(/outside the vocabulary/);
  });

  it("save and load keep weights, policy version and optimizer state", async () => {
    const engine = make(3, { tieWordEmbeddings: true });
    const seqs = [randomTokens(8, 12, V)];
    await engine.forwardBackward(seqs, (lps) => ({ loss: 0, dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-0.1)) }));
    await engine.optimStep({ lr: 1e-2 });
    const dir = join(mkdtempSync(join(tmpdir(), "sinkflex-eng-")), "ckpt");
    await engine.save(dir, { optimizer: true });
    const back = loadEngine(dir, { kernels: k });
    expect(back.policyVersion).toBe(1);
    expect(back.optimizer.step).toBe(1);
    expect(maxAbsDiff((await back.logprobs(seqs))[0]!, (await engine.logprobs(seqs))[0]!)).toBe(0);
    const s = await back.session(seqs[0]!);
    await engine.optimStep({ lr: 1e-2 }); // zero gradients: only weight decay moves the weights
    await back.load(dir); // recomputes the open session on next use
    expect(back.policyVersion).toBe(1);
    expect((await s.sample({ maxTokens: 2, seed: 1 })).tokens.length).toBe(2);
  });
});

describe("continuous batching", () => {
  it("concurrent sample() calls are decoded together and give the same tokens as alone", async () => {
    const engine = createRandomModel(tinyConfig(), 12, { kernels: kernels[kernels.length - 1]!, std: 0.15 });
    const prompts = Array.from({ length: 6 }, (_, i) => randomTokens(20 + i, 4 + i, V));
    const sessions = await Promise.all(prompts.map((p) => engine.session(p)));
    const before = engine.stats.decodeSteps;
    // each agent loop calls sample() on its own, at slightly different times
    const results = await Promise.all(sessions.map(async (s, i) => {
      if (i % 2 === 1) await new Promise((r) => setImmediate(r));
      return s.sample({ maxTokens: 10, seed: i });
    }));
    const steps = engine.stats.decodeSteps - before;
    expect(steps).toBeLessThanOrEqual(12); // not 6 x 10
    const sync = engine.sampleBatchSync(prompts.map((p) => engine.sessionSync(p)), prompts.map((_, i) => ({ maxTokens: 10, seed: i })));
    results.forEach((r, i) => expect(r.tokens).toEqual(sync[i]!.tokens));
  });

  it.each(["fp32", "bf16"] as const)("a sequence samples the same tokens and log-probs alone as in a batch (%s products)", (precision) => {
    // With bf16 products (where the CPU has AMX) a one-row product must round as the batched one does.
    const native = kernels.find((k) => k.name === "native");
    if (!native) return;
    const used = setMatmulPrecision(precision);
    try {
      const engine = createRandomModel(tinyConfig(), 13, { kernels: native, std: 0.15 });
      const prompts = Array.from({ length: 6 }, (_, i) => randomTokens(40 + i, 5 + 2 * i, V));
      const params = prompts.map((_, i) => ({ maxTokens: 12 + i, seed: 100 + i }));
      const batch = engine.sampleBatchSync(prompts.map((p) => engine.sessionSync(p)), params);
      prompts.forEach((p, i) => {
        const [alone] = engine.sampleBatchSync([engine.sessionSync(p)], [params[i]!]);
        expect(alone!.tokens).toEqual(batch[i]!.tokens);
        expect(alone!.logprobs).toEqual(batch[i]!.logprobs);
      });
      expect(used).toBe(precision === "bf16" && !bf16Available() ? "fp32" : precision);
    } finally {
      setMatmulPrecision("fp32");
    }
  });

  it("a session that is sampling refuses other work until it is done", async () => {
    const engine = createRandomModel(tinyConfig(), 12, { kernels: kernels[0]! });
    const s = await engine.session([1, 2, 3]);
    const p = s.sample({ maxTokens: 3, seed: 1 });
    expect(() => s.truncate(1)).toThrow(/sampling/);
    await expect(s.sample({ maxTokens: 1 })).rejects.toThrow(/already sampling/);
    await p;
    s.truncate(1);
    expect(s.tokens()).toEqual([1]);
    const q = s.sample({ maxTokens: 50 });
    engine.dispose();
    await expect(q).rejects.toThrow(/disposed/);
  });
});
