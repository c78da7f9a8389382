// Activation checkpointing: a training forward that keeps only each layer's input, the backward
// recomputing the layer's activations, gives the same log-probs and gradients (within 1e-6, on every kernel
// set) as one that keeps every layer's: every weight of the transformers fixtures (Qwen2, Qwen3 with its
// per-head norms, Llama with biases and one kv head), several sequences of different lengths, a
// sink-window mask with sink logits and packed documents; a LoRA adapter merged into fp32 weights and one
// beside bf16 weights. The checkpointed workspace holds one layer's activations; the engine's switch
// (true / false / "auto" by the batch's activation bytes) and a bad value's error.
import { describe, expect, it } from "vitest";
import { loadCheckpoint } from "../../src/model/checkpoint.js";
import { parseHfConfig } from "../../src/model/config.js";
import { buildModel, randomWeights, type ModelWeights } from "../../src/model/instance.js";
import { createLoraAdapter, LoraGrads, mergeLora } from "../../src/model/lora.js";
import { bindParams } from "../../src/model/params.js";
import { layerActivationBytes, packSequences, trainBackward, trainForward, TrainWorkspace, type Model, type PackedBatch } from "../../src/model/transformer.js";
import { CHECKPOINT_ABOVE_BYTES, createRandomModel, EmbeddedEngine } from "../../src/engine/embedded.js";
import { FIXTURE_MODELS, kernelSets, loadFixture } from "./fixtures.js";

const kernels = await kernelSets();
const TOL = 1e-6;

/** A loss touching every row with its own weight, so each position's gradient differs. */
function dLogprobFor(b: PackedBatch): Float32Array {
  const d = new Float32Array(b.ids.length);
  for (let n = 0; n < d.length; n++) d[n] = b.targets[n]! >= 0 ? -(1 + (n % 5)) / d.length : 0;
  return d;
}

/** The parameter layout gradients of every weight are bound to. */
type Layout = Pick<ModelWeights, "entries" | "data">;

/**
 * Log-probs and gradients of one forward + backward, with or without checkpointing: of every weight
 * (`full`), or of a LoRA adapter's (`lora` returns its zeroed gradients).
 */
function step(m: Model, b: PackedBatch, checkpoint: boolean, grads: { full: Layout } | { lora: () => LoraGrads }) {
  const ws = new TrainWorkspace(m.cfg);
  trainForward(m, ws, b, true, { checkpoint });
  const logprob = ws.logprob.slice(0, b.ids.length);
  const slots = ws.layers.length;
  if ("lora" in grads) {
    const g = grads.lora();
    trainBackward(m, ws, b, dLogprobFor(b), null, g);
    return { logprob, grads: g.data.slice(), slots };
  }
  const G = new Float32Array(grads.full.data.length);
  trainBackward(m, ws, b, dLogprobFor(b), bindParams(m.cfg, grads.full.entries, G));
  return { logprob, grads: G, slots };
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

function expectSame(a: { logprob: Float32Array; grads: Float32Array }, b: { logprob: Float32Array; grads: Float32Array }): void {
  expect(maxAbsDiff(a.logprob, b.logprob)).toBeLessThanOrEqual(TOL);
  expect(maxAbsDiff(a.grads, b.grads)).toBeLessThanOrEqual(TOL);
  expect(a.grads.some((x) => x !== 0), "the gradients are not all zero").toBe(true);
}

describe.each(kernels.map((k) => [k.name, k] as const))("activation checkpointing on %s kernels", (_n, k) => {
  it.each(FIXTURE_MODELS)("%s: every weight's gradient equals the kept-activations step's", (name) => {
    const fx = loadFixture(name);
    const ck = loadCheckpoint(fx.checkpoint);
    const m = buildModel(ck, k);
    // sequences of different lengths: several attention groups
    const seqs = [fx.inputIds[0]!, fx.inputIds[1]!.slice(0, 5), fx.inputIds[0]!.slice(2, 9)];
    const b = packSequences(seqs);
    const kept = step(m, b, false, { full: ck });
    const ckpt = step(m, b, true, { full: ck });
    expect(kept.slots).toBe(ck.cfg.numLayers);
    expect(ckpt.slots).toBe(1);
    expectSame(ckpt, kept);
  });

  it("a sink-window mask with sink logits, packed documents and pinned rows", () => {
    const cfg = parseHfConfig({
      model_type: "qwen2", hidden_size: 64, intermediate_size: 96, num_hidden_layers: 3, num_attention_heads: 4,
      num_key_value_heads: 2, vocab_size: 97, max_position_embeddings: 256, rms_norm_eps: 1e-6, rope_theta: 10000,
      tie_word_embeddings: false,
    });
    const w = randomWeights(cfg, 5, { sinkLogits: true, std: 0.1 });
    const m = buildModel(w, k, { window: 6, sinks: 2 });
    const T = 40;
    const seq = Array.from({ length: T }, (_, t) => (t * 37 + 11) % 97);
    const docs = Int32Array.from({ length: T }, (_, t) => (t < 18 ? 0 : 1));
    const pinned = Uint8Array.from({ length: T }, (_, t) => (t === 9 ? 1 : 0));
    const b = packSequences([seq, seq.slice(0, 23)], [docs, docs.slice(0, 23)], [pinned, pinned.slice(0, 23)]);
    expectSame(step(m, b, true, { full: w }), step(m, b, false, { full: w }));
  });

  it("LoRA merged into fp32 weights and beside bf16 weights: the adapter's gradients", () => {
    const fx = loadFixture("family-qwen3");
    for (const dtype of ["fp32", "bf16"] as const) {
      const ck = loadCheckpoint(fx.checkpoint, { dtype });
      const m = buildModel(ck, k);
      const adapter = createLoraAdapter(ck.cfg, { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "gate", "up", "down"] }, 2);
      // a non-zero B, so every input gradient of the adapter matters
      for (let i = 0; i < adapter.data.length; i++) if (adapter.data[i] === 0) adapter.data[i] = 0.01 * Math.sin(i);
      const side = new LoraGrads(adapter, ck.cfg.numLayers);
      if (dtype === "bf16") m.lora = side;
      else mergeLora(k, m.params, adapter, 1);
      const b = packSequences(fx.inputIds);
      const grads = () => {
        side.data.fill(0);
        return side;
      };
      const kept = step(m, b, false, { lora: grads });
      const ckpt = step(m, b, true, { lora: grads });
      expectSame(ckpt, kept);
    }
  });
});

describe("activation checkpointing in the engine", () => {
  const cfg = parseHfConfig({
    model_type: "qwen2", hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4,
    num_key_value_heads: 2, vocab_size: 61, max_position_embeddings: 128, rms_norm_eps: 1e-6, rope_theta: 10000,
  });
  const seqs = [Array.from({ length: 30 }, (_, t) => (t * 7 + 3) % 61), Array.from({ length: 12 }, (_, t) => (t * 5 + 1) % 61)];
  const loss = (lps: Float32Array[]) => ({
    loss: -lps.reduce((s, l) => s + l.reduce((a, b) => a + b, 0), 0),
    dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-1)),
  });

  it("true and false give the same gradients and the same trained weights", () => {
    const on = createRandomModel(cfg, 3, { activationCheckpointing: true });
    const off = createRandomModel(cfg, 3, { activationCheckpointing: false });
    for (let i = 0; i < 2; i++) {
      const a = on.forwardBackwardSync(seqs, loss);
      const b = off.forwardBackwardSync(seqs, loss);
      expect(Math.abs(a.loss - b.loss)).toBeLessThanOrEqual(TOL * Math.abs(b.loss));
      expect(maxAbsDiff(on.grads, off.grads)).toBeLessThanOrEqual(TOL);
      on.optimStepSync({ lr: 1e-2 });
      off.optimStepSync({ lr: 1e-2 });
    }
    expect(maxAbsDiff(on.weights.data, off.weights.data)).toBeLessThanOrEqual(TOL);
  });

  it('"auto" (the default) checkpoints a batch whose activations of every layer would exceed the budget', () => {
    const e = createRandomModel(cfg, 3);
    const per = layerActivationBytes(cfg, 1);
    const above = Math.floor(CHECKPOINT_ABOVE_BYTES / per) + 1;
    expect(e.checkpointsBatch(above - 1)).toBe(false);
    expect(e.checkpointsBatch(above)).toBe(true);
    // the Qwen2.5-0.5B shape: a 4,096-token batch is checkpointed, a 1,024-token one is not
    const q = parseHfConfig({
      model_type: "qwen2", hidden_size: 896, intermediate_size: 4864, num_hidden_layers: 24, num_attention_heads: 14,
      num_key_value_heads: 2, vocab_size: 151936, max_position_embeddings: 32768, rms_norm_eps: 1e-6, rope_theta: 1000000,
    });
    expect(layerActivationBytes(q, 4096)).toBeGreaterThan(CHECKPOINT_ABOVE_BYTES);
    expect(layerActivationBytes(q, 1024)).toBeLessThan(CHECKPOINT_ABOVE_BYTES);
    expect(createRandomModel(cfg, 3, { activationCheckpointing: true }).checkpointsBatch(2)).toBe(true);
    expect(createRandomModel(cfg, 3, { activationCheckpointing: false }).checkpointsBatch(1e9)).toBe(false);
  });

  it("refuses a value other than true, false or \"auto\"", () => {
    const w = randomWeights(cfg, 1);
    expect(() => new EmbeddedEngine(w, { activationCheckpointing: "yes" as never })).toThrow(/activationCheckpointing must be true, false or "auto" \(got "yes"\)/);
  });
});

describe("trainBackward after a forward that was not run for one", () => {
  it("is refused, saying what to do", () => {
    const fx = loadFixture("qwen2-tiny");
    const ck = loadCheckpoint(fx.checkpoint);
    const m = buildModel(ck, kernels[0]!);
    const ws = new TrainWorkspace(ck.cfg);
    const b = packSequences(fx.inputIds);
    trainForward(m, ws, b, false, { checkpoint: true });
    expect(() => trainBackward(m, ws, b, dLogprobFor(b), bindParams(ck.cfg, ck.entries, new Float32Array(ck.data.length))))
      .toThrow(/not run for a backward; call trainForward with withBackward true/);
  });
});
