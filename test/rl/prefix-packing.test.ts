// Shared-prefix packing: which sequences are packed and where the prefix ends; log-probs, loss and
// gradients through the engine equal those of the unpacked sequences (every kernel set); SFT and GRPO
// updates with packing equal those without.
import { describe, expect, it } from "vitest";
import { createRandomModel } from "../../src/engine/embedded.js";
import type { TokenLoss } from "../../src/engine/types.js";
import { grpoUpdate, type TrainSequence } from "../../src/rl/grpo.js";
import { sftLoss } from "../../src/rl/policy-loss.js";
import { MIN_SHARED_PREFIX, packedForwardBackward, packSharedPrefixes } from "../../src/rl/prefix-packing.js";
import { sftSteps, sftTrain, type SftExample } from "../../src/rl/sft.js";
import { kernelSets } from "../model/fixtures.js";
import { expectSameGradients, randomTokens, tinyConfig } from "../engine/helpers.js";

const V = 64;
const kernels = await kernelSets();

/** A mask over predictions ([L-1]) training the tokens from `from` on. */
function trainFrom(len: number, from: number): Uint8Array {
  return new Uint8Array(len - 1).fill(1, from - 1);
}

function maxDiff(a: Float32Array, b: Float32Array): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

describe("packSharedPrefixes", () => {
  const system = randomTokens(1, 20, V);
  const seqA = [...system, ...randomTokens(2, 9, V)];
  const seqB = [...system, ...randomTokens(3, 5, V)];
  const other = randomTokens(4, 12, V);

  it("packs the sequences that share a prefix, ending it before the first trained token; leaves the rest", () => {
    // A trains from token 24, B from token 22: the prefix is the 20 shared tokens
    const p = packSharedPrefixes([seqA, other, seqB], [trainFrom(seqA.length, 24), trainFrom(other.length, 3), trainFrom(seqB.length, 22)]);
    expect(p.sequences).toEqual([[...system, ...seqA.slice(20), ...seqB.slice(20)], other]);
    expect([...p.masks.docIds![0]!]).toEqual([...Array<number>(20).fill(-1), ...Array<number>(9).fill(0), ...Array<number>(5).fill(1)]);
    expect(p.tokensIn).toBe(seqA.length + seqB.length + other.length);
    expect(p.tokensOut).toBe(20 + 9 + 5 + other.length);
    // a trained token inside the common prefix cuts it there
    const q = packSharedPrefixes([seqA, seqB], [trainFrom(seqA.length, 15), trainFrom(seqB.length, 22)]);
    expect(q.sequences[0]!.length).toBe(14 + (seqA.length - 14) + (seqB.length - 14));
    // a trained token before MIN_SHARED_PREFIX: nothing worth packing
    const r = packSharedPrefixes([seqA, seqB], [trainFrom(seqA.length, MIN_SHARED_PREFIX - 1), trainFrom(seqB.length, 22)]);
    expect(r.sequences).toEqual([seqA, seqB]);
  });

  it("unpacks log-probs to each sequence's rows and packs gradients back; a gradient on a row it cannot compute is an error", () => {
    const masks = [trainFrom(seqA.length, 24), trainFrom(seqB.length, 22)];
    const p = packSharedPrefixes([seqA, seqB], masks);
    const packedLp = Float32Array.from({ length: p.sequences[0]!.length - 1 }, (_, i) => i);
    const [a, b] = p.unpack([packedLp]);
    expect(a!.length).toBe(seqA.length - 1);
    expect(b!.length).toBe(seqB.length - 1);
    expect(a![5]).toBe(5); // a prefix row
    expect(b![5]).toBe(5);
    expect(a![19]).toBe(19); // the first sequence's first own token, predicted from the prefix
    expect(b![19]).toBe(0); // the second's cannot be computed packed (masked)
    expect(a![25]).toBe(25);
    expect(b![21]).toBe(20 + 9 + 1); // B's token 22 sits at packed index 20 + 9 + 2
    const [d] = p.pack(masks.map((m) => Float32Array.from(m, (x) => x * 2)));
    expect(d![30]).toBe(2); // B's row 21
    expect(d!.reduce((s, x) => s + x, 0)).toBe(2 * (masks[0]!.reduce((s, x) => s + x, 0) + masks[1]!.reduce((s, x) => s + x, 0)));
    const bad = [new Float32Array(seqA.length - 1), new Float32Array(seqB.length - 1)];
    bad[1]![19] = 1;
    expect(() => p.pack(bad)).toThrow(/cannot compute/);
    expect(() => packSharedPrefixes([seqA], [new Uint8Array(3)])).toThrow(/one per prediction/);
  });
});

describe.each(kernels.map((k) => [k.name, k] as const))("packed training on %s kernels", (_n, k) => {
  const make = () => createRandomModel(tinyConfig(), 21, { kernels: k, std: 0.2 });
  const system = randomTokens(5, 30, V);
  const seqs = [0, 1, 2].map((i) => [...system, ...randomTokens(10 + i, 8 + 5 * i, V)]);
  const lone = randomTokens(9, 15, V);
  const all = [seqs[0]!, lone, seqs[1]!, seqs[2]!];
  const masks = all.map((s, i) => trainFrom(s.length, i === 1 ? 4 : 33));

  it("log-probs on trained rows, the loss and the gradients equal the unpacked ones", async () => {
    const packed = make();
    const plain = make();
    plain.weights.data.set(packed.weights.data);
    const packing = packSharedPrefixes(all, masks);
    const lpPacked = packing.unpack(await packed.logprobs(packing.sequences, packing.masks));
    const lpPlain = await plain.logprobs(all);
    all.forEach((_, i) => masks[i]!.forEach((m, r) => m && expect(Math.abs(lpPacked[i]![r]! - lpPlain[i]![r]!)).toBeLessThan(2e-5)));
    const loss: TokenLoss = (lps) => sftLoss(lps, masks);
    const a = await packedForwardBackward(packed, all, masks, loss);
    const b = await plain.forwardBackward(all, loss);
    expect(a.metrics.tokens).toBeLessThan(b.metrics.tokens!);
    expect(a.metrics.unpackedTokens).toBe(b.metrics.tokens);
    expect(Math.abs(a.loss - b.loss)).toBeLessThan(1e-5 * Math.abs(b.loss));
    expectSameGradients(packed, plain);
  });

  it("GRPO: an update with packed groups equals one without", async () => {
    const groups: TrainSequence[][] = [0, 1].map((g) => [0, 1, 2, 3].map((i) => {
      const prompt = [...system, ...randomTokens(40 + g, 6, V)];
      const tokens = [...prompt, ...randomTokens(50 + 4 * g + i, 5 + i, V)];
      const lossMask = new Uint8Array(tokens.length).fill(1, prompt.length);
      return { tokens, lossMask, behaviourLogprobs: new Float32Array(tokens.length).fill(-4), reward: (i * 7 + g) % 3, policyVersion: 0 };
    }));
    const hp = {
      estimator: "grpo" as const, clipLow: 0.2, clipHigh: 0.28, aggregation: "token" as const, klCoef: 0.04, tisCap: 2, epochs: 2,
      lr: 1e-3, weightDecay: 0, maxGradNorm: 1, filterDegenerateGroups: true, microBatch: 4,
    };
    const run = async (packPrefixes: boolean) => {
      const policy = make();
      const reference = make();
      const m = await grpoUpdate(policy, reference, groups, { ...hp, packPrefixes });
      return { m, policy };
    };
    const a = await run(true);
    const b = await run(false);
    expect(a.m.engineTokens).toBeLessThan(b.m.engineTokens);
    for (const key of ["loss", "kl", "clipFraction", "gradNorm"] as const) expect(Math.abs(a.m[key] - b.m[key])).toBeLessThan(1e-4 * Math.max(1, Math.abs(b.m[key])));
    // Adam moves each weight by about lr per step whatever the gradient's size, so the rounding of tiny
    // gradients shows: the weights agree to a tenth of the two steps' movement (2 x lr)
    expect(maxDiff(a.policy.weights.data, b.policy.weights.data)).toBeLessThan(0.1 * 2 * hp.lr);
  });
});

describe("SFT with packed prefixes", () => {
  // Three "suites" (system prompts), each with five examples: 12 prompt tokens, then user and assistant tokens.
  const examples: SftExample[] = [0, 1, 2].flatMap((suite) => {
    const system = randomTokens(100 + suite, 12, V);
    return [0, 1, 2, 3, 4].map((i) => {
      const tokens = [...system, ...randomTokens(200 + suite * 10 + i, 10 + i, V)];
      const lossMask = new Uint8Array(tokens.length).fill(1, 16);
      return { tokens, lossMask, contextStart: 12 };
    });
  });
  const hp = { epochs: 2, batchSize: 4, lr: 1e-2, weightDecay: 0, maxGradNorm: 1, seed: 3, microBatch: 4, contextLossFraction: 0.5 };

  it("batchBy prefix draws each batch from one system prompt; the step count follows", async () => {
    expect(sftSteps(examples, hp)).toBe(2 * 4); // 15 examples in batches of 4
    expect(sftSteps(examples, { ...hp, batchBy: "prefix" })).toBe(2 * 3 * 2); // 5 per suite: 2 batches each
    const engine = createRandomModel(tinyConfig(), 4);
    const seen: number[] = [];
    const history = await sftTrain(engine, examples, { ...hp, batchBy: "prefix" }, (m) => void seen.push(m.computedTokens));
    expect(history).toHaveLength(12);
    // each batch packs into one sequence: 12 prompt tokens once, so fewer tokens than its examples hold
    expect(Math.max(...seen)).toBeLessThan(4 * 12 + (10 + 11 + 12 + 13));
  });

  it("packing changes tokens, not the training: the same losses and weights as without", async () => {
    const run = async (packPrefixes: boolean) => {
      const engine = createRandomModel(tinyConfig(), 4);
      const h = await sftTrain(engine, examples, { ...hp, batchBy: "prefix", packPrefixes });
      return { h, engine };
    };
    const a = await run(true);
    const b = await run(false);
    a.h.forEach((m, i) => expect(Math.abs(m.loss - b.h[i]!.loss)).toBeLessThan(1e-4));
    expect(a.h.reduce((n, m) => n + m.computedTokens, 0)).toBeLessThan(b.h.reduce((n, m) => n + m.computedTokens, 0));
    expect(maxDiff(a.engine.weights.data, b.engine.weights.data)).toBeLessThan(1e-4);
  });
});
