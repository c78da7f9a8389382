/**
 * Weights held in bf16 (`dtype: "bf16"`): log-probs and decoding logits against the same model in fp32 on
 * each SIMD path (AVX512-BF16 dot products, AVX2 and portable widening), LoRA training on a bf16 base
 * against the same adapter merged into an fp32 base, the memory the weights take, bf16 checkpoints
 * (loaded without an fp32 step, saved as BF16), full training of bf16 weights through an fp32 master copy
 * (against fp32 training; the master saved with the optimizer state), and model.dtype in a run config.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createRandomModel, EmbeddedEngine, loadEngine } from "../../src/engine/embedded.js";
import { bf16Unit, loadNativeKernels, referenceKernels } from "../../src/kernels/index.js";
import { convertWeights, createLoraAdapter, loadCheckpoint, randomWeights, roundToBf16, weightBytes } from "../../src/model/index.js";
import { widenBf16 } from "../../src/model/params.js";
import { readSafetensorsHeader } from "../../src/model/safetensors.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { BF16_TEST_CONFIG, compareBf16, type Bf16Comparison } from "./bf16-compare.js";
import { checkAtSimdLevel, SIMD_LEVELS } from "../kernels/simd-child.js";
import { expectSameValues, meanCrossEntropy, randomTokens } from "../engine/helpers.js";

const native = loadNativeKernels();
const tmp = mkdtempSync(join(tmpdir(), "sinkflex-bf16-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/**
 * Tolerances (absolute, on log-probs of about -5, random weights of std 0.08): rounding the weights to bf16
 * moves log-probs by about 0.01; the AVX512-BF16 products also round the activations (about 0.008 more);
 * widening the bf16 weights to fp32 (AVX2, portable) computes exactly the fp32 model of the rounded weights.
 */
const TOL = { logprob: 0.05, decode: 0.08, unitRounding: 0.03, widened: 1e-4 };

/**
 * Full training of bf16 weights through an fp32 master against fp32 training, after the first step (the
 * held weights then differ from the fp32 run's by bf16 rounding, and AdamW's normalized steps turn small
 * gradient differences into steps of up to lr): losses (absolute, of about 5 to 2.6), gradients, masters
 * after 4 steps of lr 1e-2 and log-probs (each relative to its largest value). Measured on the reference
 * kernels: 4.2e-3, 1.3e-2, 7.4e-3, 4.9e-3; the bounds are about 2.5 times those.
 */
const TOL_MASTER = { loss: 1e-2, grad: 3.5e-2, weight: 2e-2, logprob: 1.5e-2 };

/** How many elements of two equally long arrays differ (0 = the same bits; cheaper to report than a diff). */
function differing(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let n = 0;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) n++;
  return n;
}

function expectWithin(r: Bf16Comparison, widened: boolean): void {
  expect(r.logprobDiff).toBeGreaterThan(0); // the weights really are bf16
  expect(r.logprobDiff).toBeLessThan(TOL.logprob);
  expect(r.decodeDiff).toBeLessThan(TOL.decode);
  expect(r.logprobDiffRounded).toBeLessThan(widened ? TOL.widened : TOL.unitRounding);
}

describe.skipIf(!native)("bf16 weights: log-probs against fp32", () => {
  it("in this process (the CPU's own SIMD level and bf16 unit)", () => {
    const r = compareBf16();
    expectWithin(r, r.bf16Unit === "none");
  });

  for (const level of SIMD_LEVELS) {
    it(`SINKFLEX_SIMD=${level}`, () => {
      const r = checkAtSimdLevel<Bf16Comparison>(join(import.meta.dirname, "bf16-compare.ts"), level);
      if (level !== "avx512") expect(r.bf16Unit).toBe("none");
      expectWithin(r, r.bf16Unit === "none");
    }, 150_000);
  }
});

describe.skipIf(!native)("bf16 weights: batched decoding", () => {
  it("a session samples the same tokens and log-probs alone as beside others (its rows do not depend on the batch)", () => {
    const e = createRandomModel(BF16_TEST_CONFIG, 7, { kernels: native!, std: 0.08, dtype: "bf16" });
    const V = BF16_TEST_CONFIG.vocabSize;
    const params = { maxTokens: 12, temperature: 1, seed: 5 };
    const alone = e.sampleBatchSync([e.sessionSync(randomTokens(1, 30, V))], [params])[0]!;
    const others = [randomTokens(2, 45, V), randomTokens(3, 7, V), randomTokens(4, 60, V)].map((t) => e.sessionSync(t));
    const together = e.sampleBatchSync([e.sessionSync(randomTokens(1, 30, V)), ...others], [params, ...others.map((_, i) => ({ ...params, seed: 10 + i }))])[0]!;
    expect(together.tokens).toEqual(alone.tokens);
    expect(Array.from(together.logprobs)).toEqual(Array.from(alone.logprobs));
  });
});

describe("bf16 weights: memory", () => {
  it("the weights take half the bytes, with no fp32 copy of the matrices", () => {
    const fp32 = randomWeights(BF16_TEST_CONFIG, 7);
    const bf16 = randomWeights(BF16_TEST_CONFIG, 7, { dtype: "bf16" });
    expect(bf16.data.length).toBe(0);
    const ratio = weightBytes(bf16) / weightBytes(fp32);
    expect(ratio).toBeGreaterThan(0.49);
    expect(ratio).toBeLessThan(0.51);
    // an engine given fp32 weights and dtype bf16 holds only the converted ones
    const e = new EmbeddedEngine(fp32, { kernels: referenceKernels, dtype: "bf16" });
    expect(e.dtype).toBe("bf16");
    expect(e.weights.data.length).toBe(0);
    expect(weightBytes(e.weights)).toBe(weightBytes(bf16));
    // the same values as the fp32 model, rounded
    expect(Array.from(e.weights.data16!)).toEqual(Array.from(bf16.data16!));
  });
});

describe("bf16 weights: training", () => {
  const cfg = BF16_TEST_CONFIG;
  const lora = { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "gate", "up", "down"] as ("q" | "k" | "v" | "o" | "gate" | "up" | "down")[] };
  const seqs = [randomTokens(5, 30, cfg.vocabSize), randomTokens(6, 17, cfg.vocabSize)];

  // Full training of bf16 weights: AdamW updates an fp32 master, rounded into the bf16 weights after each
  // step, against fp32 training of the same (bf16-representable) weights, on the reference kernels (which
  // compute exactly the fp32 model of the rounded weights). Step 0's gradients are the same; after that the
  // bf16 run's forward reads weights rounded from its master (relative error up to 2^-9), so its gradients,
  // masters and log-probs drift from the fp32 run's by about that much.
  it("trains every weight through an fp32 master, as fp32 training does within bf16 rounding", () => {
    const base = randomWeights(cfg, 7, { std: 0.08, dtype: "bf16" });
    const e16 = new EmbeddedEngine(base, { kernels: referenceKernels });
    const e32 = new EmbeddedEngine(convertWeights(base, "fp32"), { kernels: referenceKernels });
    expect(e16.master).not.toBeNull();
    expect(e32.master).toBeNull();
    const losses: number[] = [];
    for (let step = 0; step < 4; step++) {
      const a = e16.forwardBackwardSync(seqs, meanCrossEntropy());
      const b = e32.forwardBackwardSync(seqs, meanCrossEntropy());
      losses.push(a.loss);
      expect(Math.abs(a.loss - b.loss)).toBeLessThan(step === 0 ? 1e-5 : TOL_MASTER.loss);
      expectSameValues(e16.grads, e32.grads, step === 0 ? 1e-5 : TOL_MASTER.grad);
      e16.optimStepSync({ lr: 1e-2 });
      e32.optimStepSync({ lr: 1e-2 });
      // the held weights are the master rounded to nearest; the norms and biases are the master's exactly
      expect(differing(e16.weights.data16!, roundToBf16(e16.master!))).toBe(0);
      const norm = e16.weights.entries.find((x) => x.name.endsWith("input_layernorm.weight"))!;
      expect(differing(e16.model.params.layers[0]!.inputNorm, e16.master!.subarray(norm.offset, norm.offset + norm.size))).toBe(0);
    }
    expect(losses[3]!).toBeLessThan(losses[0]!); // it trains
    expectSameValues(e16.master!, e32.weights.data, TOL_MASTER.weight);
    const lp16 = e16.logprobsSync(seqs);
    const lp32 = e32.logprobsSync(seqs);
    lp16.forEach((x, i) => expectSameValues(x, lp32[i]!, TOL_MASTER.logprob));
  });

  it("the master keeps updates too small for bf16, which reach the held weights once they add up", () => {
    const e = createRandomModel(cfg, 7, { kernels: referenceKernels, std: 0.08, dtype: "bf16" });
    const start = e.weights.data16!.slice();
    const held = () => e.weights.data16!.reduce((n, x, i) => n + (x !== start[i] ? 1 : 0), 0);
    // AdamW moves each weight by about lr a step: 1e-5 is under half of bf16's spacing near 0.08 (2.4e-4)
    e.forwardBackwardSync(seqs, meanCrossEntropy());
    e.optimStepSync({ lr: 1e-5, weightDecay: 0 });
    const master1 = e.master!.slice();
    const moved = master1.reduce((n, x, i) => n + (x !== widenBf16(start.subarray(i, i + 1))[0] ? 1 : 0), 0);
    const heldAfter1 = held();
    expect(moved).toBeGreaterThan(0.5 * master1.length);
    expect(heldAfter1).toBeLessThan(0.2 * moved);
    for (let i = 0; i < 30; i++) {
      e.forwardBackwardSync(seqs, meanCrossEntropy());
      e.optimStepSync({ lr: 1e-5, weightDecay: 0 });
    }
    expect(held()).toBeGreaterThan(4 * heldAfter1 + 100);
  });

  it("a checkpoint holds the bf16 weights; with the optimizer state the master too, for an exact resume", () => {
    const e = createRandomModel(cfg, 9, { kernels: referenceKernels, std: 0.08, dtype: "bf16" });
    for (let i = 0; i < 2; i++) {
      e.forwardBackwardSync(seqs, meanCrossEntropy());
      e.optimStepSync({ lr: 1e-3 });
    }
    const dir = join(tmp, "bf16-full");
    e.saveSync(dir, { optimizer: true });
    const resumed = loadEngine(dir, { kernels: referenceKernels, dtype: "bf16" });
    expect(differing(resumed.weights.data16!, e.weights.data16!)).toBe(0);
    expect(differing(resumed.master!, e.master!)).toBe(0);
    for (const x of [e, resumed]) {
      x.forwardBackwardSync(seqs, meanCrossEntropy());
      x.optimStepSync({ lr: 1e-3 });
    }
    expect(differing(resumed.master!, e.master!)).toBe(0);
    expect(differing(resumed.weights.data16!, e.weights.data16!)).toBe(0);
    // without the optimizer state the master starts again from the bf16 weights
    const plain = join(tmp, "bf16-full-plain");
    e.saveSync(plain);
    const fresh = loadEngine(plain, { kernels: referenceKernels, dtype: "bf16" });
    expect(differing(fresh.master!, convertWeights(fresh.weights, "fp32").data)).toBe(0);
  });

  // A LoRA adapter beside bf16 weights against the same adapter merged into an fp32 copy of those
  // weights (rounded values widened): forward, backward (through the frozen bf16 matrices) and two steps.
  for (const which of ["reference", "native"] as const) {
    const kernels = which === "reference" ? referenceKernels : native;
    it.skipIf(!kernels)(`LoRA on a bf16 base trains as on the fp32 base (${which} kernels)`, () => {
      const base = randomWeights(cfg, 7, { std: 0.08, dtype: "bf16" });
      const onBf16 = new EmbeddedEngine(base, { kernels: kernels! });
      const onFp32 = new EmbeddedEngine(convertWeights(base, "fp32"), { kernels: kernels! });
      onBf16.enableLora(createLoraAdapter(cfg, lora, 3));
      onFp32.enableLora(createLoraAdapter(cfg, lora, 3));
      // The reference (and the native kernels without a bf16 unit) compute the same sums: tight. With
      // AVX512-BF16 the products also round activations and gradients to bf16 (measured: gradients 0.5%
      // of the largest apart at step 0, 2.4% at step 1; losses 2e-3; and AdamW's normalized steps make the
      // adapters themselves drift apart, so they are compared through the log-probs only).
      const exact = which === "reference" || bf16Unit() === "none";
      const tol = exact ? 1e-4 : 5e-2;
      for (let step = 0; step < 3; step++) {
        const a = onBf16.forwardBackwardSync(seqs, meanCrossEntropy());
        const b = onFp32.forwardBackwardSync(seqs, meanCrossEntropy());
        expect(Math.abs(a.loss - b.loss)).toBeLessThan(exact ? 1e-4 : 5e-3);
        if (exact || step < 2) expectSameValues(onBf16.grads, onFp32.grads, tol);
        onBf16.optimStepSync({ lr: 1e-2 });
        onFp32.optimStepSync({ lr: 1e-2 });
      }
      // after the steps B != 0, so the adapter changes the model, and both agree on it
      if (exact) expectSameValues(onBf16.lora!.data, onFp32.lora!.data, tol);
      const after = onBf16.logprobsSync(seqs);
      const ref = onFp32.logprobsSync(seqs);
      after.forEach((x, i) => expectSameValues(x, ref[i]!, exact ? tol : 2e-2));
      // the bf16 base did not move
      expect(Array.from(onBf16.weights.data16!)).toEqual(Array.from(base.data16!));
    }, 120_000);
  }
});

describe("bf16 weights: checkpoints", () => {
  it("a bf16 engine saves BF16 tensors, and loading them as bf16 gives the same bits and log-probs", () => {
    const e = createRandomModel(BF16_TEST_CONFIG, 7, { kernels: referenceKernels, std: 0.08, dtype: "bf16" });
    const dir = join(tmp, "bf16-ck");
    e.saveSync(dir);
    const header = readSafetensorsHeader(join(dir, "model.safetensors"));
    expect(new Set([...header.entries.values()].map((t) => t.dtype))).toEqual(new Set(["BF16"]));
    expect(JSON.parse(readFileSync(join(dir, "config.json"), "utf8")).torch_dtype).toBe("bfloat16");
    const ck = loadCheckpoint(dir, { dtype: "bf16" });
    expect(ck.dtype).toBe("bf16");
    expect(ck.data.length).toBe(0);
    expect(Array.from(ck.data16!)).toEqual(Array.from(e.weights.data16!));
    const back = loadEngine(dir, { kernels: referenceKernels, dtype: "bf16" });
    const seq = [randomTokens(9, 20, BF16_TEST_CONFIG.vocabSize)];
    expect(Array.from(back.logprobsSync(seq)[0]!)).toEqual(Array.from(e.logprobsSync(seq)[0]!));
    // the same folder read in fp32 is the widened bf16 values, exactly
    const wide = loadCheckpoint(dir);
    expect(Array.from(convertWeights(wide, "bf16").data16!)).toEqual(Array.from(ck.data16!));
  });

  it("an fp32 checkpoint loads as bf16 rounded to nearest, with exact fp32 norms and biases", () => {
    const fp32 = createRandomModel(BF16_TEST_CONFIG, 8, { kernels: referenceKernels, std: 0.08 });
    // norms that bf16 cannot hold exactly
    fp32.model.params.layers[0]!.inputNorm.fill(1.00123);
    const dir = join(tmp, "fp32-ck");
    fp32.saveSync(dir);
    const ck = loadCheckpoint(dir, { dtype: "bf16" });
    expect(Array.from(ck.data16!)).toEqual(Array.from(convertWeights(fp32.weights, "bf16").data16!));
    expect(ck.vectors!.get("model.layers.0.input_layernorm.weight")![0]).toBe(Math.fround(1.00123));
    const engine = loadEngine(dir, { kernels: referenceKernels, dtype: "bf16" });
    expect(engine.model.params.layers[0]!.inputNorm[0]).toBe(Math.fround(1.00123));
  });
});

describe("bf16 weights: model.dtype in a run config", () => {
  const suites = [{ env: "sinkflex/arith-v0" }];
  it("defaults to fp32, takes bf16 with a LoRA adapter and for full training of a checkpoint, refuses it on model.init", () => {
    expect(validateConfig({ suites, model: { init: {} } }).model.dtype).toBe("fp32");
    const lora = { rank: 4, targets: ["q", "v"] };
    expect(validateConfig({ suites, model: { checkpoint: "ck", lora, dtype: "bf16" } }).model.dtype).toBe("bf16");
    expect(validateConfig({ suites, model: { checkpoint: "ck", dtype: "bf16" } }).model.dtype).toBe("bf16");
    expect(() => validateConfig({ suites, model: { init: {}, dtype: "bf16" } })).toThrow(/model\.dtype.*a model\.init policy starts in fp32: set model\.checkpoint, or leave model\.dtype at fp32/);
    expect(() => validateConfig({ suites, model: { checkpoint: "ck", lora, dtype: "fp16" } })).toThrow(/model\.dtype/);
  });
});
