import { describe, expect, it } from "vitest";
import { createRandomModel } from "../../src/engine/index.js";
import { learningRateAt } from "../../src/rl/lr-schedule.js";
import { inContextLossPhase, leadFirst, sftTrain, type SftExample } from "../../src/rl/sft.js";
import { randomTokens, tinyConfig } from "../engine/helpers.js";

describe("SFT schedule", () => {
  it("warms up linearly, then stays constant or decays by cosine to minLrRatio x lr", () => {
    const hp = { lr: 1e-3, warmupSteps: 10 };
    expect(learningRateAt(1, 100, hp)).toBeCloseTo(1e-4, 12);
    expect(learningRateAt(10, 100, hp)).toBeCloseTo(1e-3, 12);
    expect(learningRateAt(70, 100, hp)).toBe(1e-3);
    const cos = { ...hp, lrSchedule: "cosine" as const, minLrRatio: 0.2 };
    expect(learningRateAt(10, 100, cos)).toBeCloseTo(1e-3, 12);
    expect(learningRateAt(55, 100, cos)).toBeCloseTo(0.6e-3, 12); // halfway: the mean of lr and the floor
    expect(learningRateAt(100, 100, cos)).toBeCloseTo(0.2e-3, 12);
    const rates = Array.from({ length: 90 }, (_, i) => learningRateAt(11 + i, 100, cos));
    expect(rates.every((r, i) => i === 0 || r <= rates[i - 1]!)).toBe(true);
  });

  it("moves the leading fraction of a source's batches to the front, each part in its order", () => {
    const ex = (source: string): SftExample => ({ tokens: [1, 2], lossMask: new Uint8Array(2), source });
    const examples = [ex("a"), ex("b"), ex("c")];
    // Batches as indices into examples: a a b a b c a, shuffled order kept within each part.
    const batches = [[0], [0, 0], [1], [0, 0, 0], [1, 1], [2], [0, 0, 0, 0]];
    // Half of a's 4 batches (every other one, from the first) and all of b's 2 lead; c none.
    expect(leadFirst(batches, examples, { a: 0.5, b: 1 })).toEqual([[0], [1], [0, 0, 0], [1, 1], [0, 0], [2], [0, 0, 0, 0]]);
    expect(leadFirst(batches, examples, {})).toEqual(batches);
    // ceil(0.6 x 4) = 3 of a's batches: the 1st, 2nd and 4th.
    expect(leadFirst(batches, examples, { a: 0.6 }).slice(0, 3)).toEqual([[0], [0, 0], [0, 0, 0, 0]]);
    expect(leadFirst(batches, examples, { a: 1 }).slice(0, 4)).toEqual([[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]);
  });

  it("puts the first contextLossFraction of the planned steps in the context-loss phase", () => {
    expect([1, 2, 3, 4].map((s) => inContextLossPhase(s, 4, { contextLossFraction: 0.5 }))).toEqual([true, true, false, false]);
    expect(inContextLossPhase(1, 4, {})).toBe(false);
  });
});

describe("sftTrain", () => {
  const V = 64;
  // Two examples: a 6-token "system prompt", then 10 user/tool tokens and 4 assistant tokens.
  const examples: SftExample[] = [0, 1].map((k) => {
    const tokens = randomTokens(30 + k, 20, V);
    const lossMask = new Uint8Array(20);
    lossMask.fill(1, 16);
    return { tokens, lossMask, contextStart: 6 };
  });
  const hp = { epochs: 3, batchSize: 2, lr: 1e-2, weightDecay: 0, maxGradNorm: 1, seed: 1, microBatch: 1, lrSchedule: "cosine" as const, warmupSteps: 1, contextLossFraction: 0.5 };

  it("covers every token after the system prompt in the context phase, then the assistant's only, at the scheduled rates", async () => {
    const engine = createRandomModel(tinyConfig({ vocabSize: V }), 3);
    const history = await sftTrain(engine, examples, { ...hp, epochs: 4 });
    expect(history.map((m) => m.lossOn)).toEqual(["context", "context", "assistant", "assistant"]);
    // Predicting tokens 6..19 (14 per example) in the context phase; tokens 16..19 (4) after it.
    expect(history.map((m) => m.tokens)).toEqual([28, 28, 8, 8]);
    expect(history.map((m) => m.lr)).toEqual([1, 2, 3, 4].map((s) => learningRateAt(s, 4, hp)));
    expect(history[1]!.loss).toBeLessThan(history[0]!.loss);
    engine.dispose();
  });

  it("leaves an example that opts out of the context-loss phase on its assistant tokens", async () => {
    const engine = createRandomModel(tinyConfig({ vocabSize: V }), 3);
    // Example 0 opts out: 4 assistant tokens in the context phase; example 1 keeps its 14.
    const history = await sftTrain(engine, examples.map((ex, i) => (i === 0 ? { ...ex, contextLoss: false } : ex)), { ...hp, epochs: 4 });
    expect(history.map((m) => m.lossOn)).toEqual(["context", "context", "assistant", "assistant"]);
    expect(history.map((m) => m.tokens)).toEqual([18, 18, 8, 8]);
    engine.dispose();
  });

  it("reports a step's source when every example of its batch has the same one", async () => {
    const engine = createRandomModel(tinyConfig({ vocabSize: V }), 3);
    const same = await sftTrain(engine, examples.map((ex) => ({ ...ex, source: "arith" })), { ...hp, epochs: 1 });
    expect(same.map((m) => m.source)).toEqual(["arith"]);
    const mixed = await sftTrain(engine, examples.map((ex, i) => ({ ...ex, source: i === 0 ? "arith" : "household" })), { ...hp, epochs: 1 });
    expect(mixed[0]!.source).toBeUndefined();
    const none = await sftTrain(engine, examples, { ...hp, epochs: 1 });
    expect(none[0]!.source).toBeUndefined();
    // batchBy "prefix": each batch holds examples behind one system prompt, so one source each.
    const twoPrompts = examples.map((ex, i) => ({ ...ex, tokens: [i, ...ex.tokens.slice(1)], source: `suite-${i}` }));
    const byPrefix = await sftTrain(engine, twoPrompts, { ...hp, epochs: 1, batchBy: "prefix" });
    expect(byPrefix.map((m) => m.source).sort()).toEqual(["suite-0", "suite-1"]);
    engine.dispose();
  });

  it("trains a leading source's batches first in the first epoch, and needs batchBy prefix for it", async () => {
    // Four prompts, two sources, one example each: batches of 1, so four batches an epoch.
    const four = [0, 1, 2, 3].map((i) => ({ ...examples[i % 2]!, tokens: [i, ...examples[i % 2]!.tokens.slice(1)], source: i < 2 ? "lead" : "mix" }));
    const sources = async (leadBySource?: Record<string, number>) => {
      const engine = createRandomModel(tinyConfig({ vocabSize: V }), 3);
      const h = await sftTrain(engine, four, { ...hp, epochs: 2, batchSize: 1, batchBy: "prefix", ...(leadBySource ? { leadBySource } : {}) });
      engine.dispose();
      return h.map((m) => m.source);
    };
    const led = await sources({ lead: 1 });
    expect(led.slice(0, 2)).toEqual(["lead", "lead"]);
    expect(led.slice(2, 4)).toEqual(["mix", "mix"]);
    // The second epoch is the plain shuffle, the same as without a lead.
    expect(led.slice(4)).toEqual((await sources()).slice(4));
    const engine = createRandomModel(tinyConfig({ vocabSize: V }), 3);
    await expect(sftTrain(engine, four, { ...hp, leadBySource: { lead: 1 } })).rejects.toThrow(/leadBySource .* needs batchBy "prefix"/);
    engine.dispose();
  });

  describe("a lead's extension (extendLead)", () => {
    // Two prompts, one example each, batches of 1: a leading source's batch, then the mix's; the
    // extension's batches are the leading example again.
    const two = [0, 1].map((i) => ({ ...examples[i]!, tokens: [i, ...examples[i]!.tokens.slice(1)], source: i === 0 ? "lead" : "mix" }));
    const more = [two[0]!, two[0]!, two[0]!];
    const hpLead = { ...hp, epochs: 2, batchSize: 1, batchBy: "prefix" as const, leadBySource: { lead: 1 } };
    const run = async (meanLoss: number | undefined, options: Parameters<typeof sftTrain>[4] = {}) => {
      const engine = createRandomModel(tinyConfig({ vocabSize: V }), 3);
      const ends: { meanLoss: number; batches: number; ranOut: boolean }[] = [];
      const extendLead = meanLoss === undefined ? undefined : { source: "lead", examples: more, meanLoss, window: 1, onEnd: (e: (typeof ends)[number]) => ends.push(e), ...options.extendLead };
      const h = await sftTrain(engine, two, hpLead, undefined, { ...options, ...(extendLead ? { extendLead } : {}) });
      engine.dispose();
      return { h, ends };
    };

    it("trains the extension's batches after the source's last lead batch while its loss is at or above the target", async () => {
      const all = await run(0);
      expect(all.h.map((m) => m.source)).toEqual(["lead", "lead", "lead", "lead", "mix", "mix", "lead"]);
      expect(all.h.map((m) => m.extension ?? false)).toEqual([false, true, true, true, false, false, false]);
      expect(all.ends).toEqual([{ meanLoss: all.h[3]!.loss, batches: 3, ranOut: true }]);
      // The plan grows by the steps taken: the schedule ends at the seventh step.
      expect(all.h[6]!.lr).toBeCloseTo(learningRateAt(7, 7, hp), 15);
      expect(all.h[1]!.lr).toBeCloseTo(learningRateAt(2, 5, hp), 15);

      // A target above every loss: no extension, and the same steps as without one.
      const none = await run(1e9);
      const plain = await run(undefined);
      expect(none.h).toEqual(plain.h);
      expect(none.ends).toEqual([{ meanLoss: plain.h[0]!.loss, batches: 0, ranOut: false }]);

      // A target between the losses of the extension's first and second steps: one batch.
      expect(all.h[1]!.loss).toBeLessThan(all.h[0]!.loss);
      const one = await run((all.h[0]!.loss + all.h[1]!.loss) / 2);
      expect(one.h.map((m) => m.extension ?? false)).toEqual([false, true, false, false, false]);
      expect(one.h[1]!.loss).toBe(all.h[1]!.loss);
    });

    it("resumes exactly with the source's losses before the start step, and says what it needs without them", async () => {
      const all = await run(0);
      const resumed = await run(0, { startStep: 3, extendLead: { source: "lead", examples: more, meanLoss: 0, window: 1, pastLosses: all.h.slice(0, 3).map((m) => m.loss) } });
      const view = (h: typeof all.h) => h.map((m) => [m.step, m.source, m.extension ?? false, m.lr]);
      expect(view(resumed.h)).toEqual(view(all.h.slice(3)));
      await expect(run(0, { startStep: 3 })).rejects.toThrow(/resuming at step 3 needs the losses of "lead"'s steps before it .* the checkpoint has 0/);
      const engine = createRandomModel(tinyConfig({ vocabSize: V }), 3);
      await expect(sftTrain(engine, two, { ...hpLead, leadBySource: { lead: 0.5 } }, undefined, { extendLead: { source: "lead", examples: more, meanLoss: 1, window: 1 } })).rejects.toThrow(/needs leadBySource\["lead"\] = 1/);
      engine.dispose();
    });
  });

  it("stops at the planned steps, and a resumed run takes the same steps as an uninterrupted one", async () => {
    const run = async (options: Parameters<typeof sftTrain>[4]) => {
      const engine = createRandomModel(tinyConfig({ vocabSize: V }), 3);
      const h = await sftTrain(engine, examples, hp, undefined, options);
      engine.dispose();
      return { h };
    };
    const planned = await run({ plannedSteps: () => 2 });
    expect(planned.h.map((m) => m.step)).toEqual([1, 2]);
    const whole = await run({});
    expect(whole.h.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(whole.h[1]!.lossOn).toBe("context"); // round(0.5 x 3) = 2 context steps
    const resumed = await run({ startStep: 2 });
    expect(resumed.h.map((m) => m.step)).toEqual([3]);
    expect(resumed.h[0]!.lr).toBe(whole.h[2]!.lr);
  });

  it("rejects an example whose mask does not match its tokens", async () => {
    const engine = createRandomModel(tinyConfig({ vocabSize: V }), 3);
    await expect(sftTrain(engine, [{ tokens: [1, 2, 3], lossMask: new Uint8Array(2) }], hp)).rejects.toThrow(/example 0 has 3 tokens but a mask of 2/);
    engine.dispose();
  });
});
