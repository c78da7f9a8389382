// Published model families (Qwen2.5, Qwen3, Llama 3.2, Phi-3.5, Phi-3-4k shapes, every size shrunk) load
// unchanged and match transformers on every kernel set: logits within 1e-4 absolute, loss within 1e-4,
// every parameter gradient within 1e-4 relative to the tensor's largest gradient (plus 1e-7 absolute).
// Also: Phi-3's fused tensors survive a save, padded vocab rows are never sampled, policies load padded
// checkpoints, and what the engine cannot compute exactly is refused with a message naming why.
import { describe, expect, it } from "vitest";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CheckpointError, loadCheckpoint, saveCheckpoint } from "../../src/model/checkpoint.js";
import { ModelConfigError, parseHfConfig, toHfConfig } from "../../src/model/config.js";
import { familyForConfig, familyOf, MODEL_FAMILIES } from "../../src/model/families/index.js";
import { bindParams } from "../../src/model/params.js";
import { buildModel, randomWeights } from "../../src/model/instance.js";
import { readSafetensors, writeSafetensors, type TensorMap } from "../../src/model/safetensors.js";
import { packSequences, trainBackward, trainForward, TrainWorkspace } from "../../src/model/transformer.js";
import { resolveSampleParams, Sampler } from "../../src/engine/sampler.js";
import { EmbeddedEngine } from "../../src/engine/embedded.js";
import { loadPolicy } from "../../src/pipeline/policy.js";
import { Rng } from "../../src/core/index.js";
import { openServer } from "../../src/cli/commands/serve.js";
import { qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import { FIXTURES, kernelSets, loadFixture } from "./fixtures.js";

const kernels = await kernelSets();
// family-phi3-longrope: a 100-token sequence past its longrope original length (64), on the long factors.
const FAMILY_FIXTURES = ["family-qwen2.5", "family-qwen3", "family-llama3.2", "family-phi3.5", "family-phi3-4k", "family-phi3-longrope"];

describe.each(kernels.map((k) => [k.name, k] as const))("published families vs transformers on %s kernels", (_n, k) => {
  it.each(FAMILY_FIXTURES)("%s: loads unchanged; logits, loss and every gradient match", (name) => {
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
    // transformers' gradients are named and fused as the family stores its weights: map them as weights are.
    const stored: TensorMap = new Map();
    for (const [n, t] of fx.expected) if (n.startsWith("grad.")) stored.set(n.slice(5), t);
    const expectedGrads = familyOf(ck.cfg.arch).toEngine(ck.cfg, stored);
    for (const e of ck.entries) {
      const g = expectedGrads.get(e.name);
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

describe("family registry", () => {
  it("finds each fixture's family and keeps what the published config declares", () => {
    const cfg = (n: string) => parseHfConfig(JSON.parse(readFileSync(join(FIXTURES, n, "checkpoint/config.json"), "utf8")));
    expect(cfg("family-qwen2.5")).toMatchObject({ arch: "qwen2", qkvBias: true, tieWordEmbeddings: false, vocabSize: 160 });
    expect(cfg("family-qwen3")).toMatchObject({ arch: "qwen3", qkvBias: false, headDim: 16, tieWordEmbeddings: true });
    expect(cfg("family-llama3.2")).toMatchObject({ arch: "llama", tieWordEmbeddings: true, eosTokenId: [129, 130, 131],
      ropeScaling: { type: "llama3", factor: 32, originalMaxPositionEmbeddings: 64 } });
    const phi = cfg("family-phi3.5");
    expect(phi).toMatchObject({ arch: "phi3", qkvBias: false, slidingWindow: 2048,
      ropeScaling: { type: "longrope", shortFactor: [1, 1.25, 1.75, 2.5], longFactor: [1.5, 3, 9, 24], originalMaxPositionEmbeddings: 32 } });
    // transformers' default attention factor: sqrt(1 + ln(1024 / 32) / ln(32))
    expect(phi.ropeScaling.type === "longrope" && phi.ropeScaling.attentionFactor).toBeCloseTo(Math.sqrt(2), 12);
    expect(parseHfConfig(toHfConfig(phi))).toEqual(phi);
    expect(cfg("family-phi3-4k")).toMatchObject({ arch: "phi3", slidingWindow: 16, ropeScaling: { type: "none" } });
    for (const f of MODEL_FAMILIES) expect(familyForConfig({ model_type: f.modelTypes[0] })).toBe(f);
    expect(new Set(MODEL_FAMILIES.map((f) => f.chatFormat)).size).toBe(MODEL_FAMILIES.length);
  });

  it.each([
    [{ model_type: "gemma2", architectures: ["Gemma2ForCausalLM"] }, /my\/config\.json: unsupported model_type "gemma2".*"phi3" \(Phi3ForCausalLM/],
    [{ rope_scaling: { type: "yarn", factor: 4 } }, /my\/config\.json: rope scaling type "yarn" is not supported \(rope_scaling\)/],
    [{ rope_scaling: { type: "longrope", short_factor: [1, 1], long_factor: [1, 1, 1, 1] } }, /rope_scaling\.short_factor must be a list of 4 positive numbers/],
    [{ original_max_position_embeddings: undefined, rope_parameters: undefined, rope_scaling: { type: "su", short_factor: [1, 1, 1, 1], long_factor: [1, 1, 1, 1] } },
      /longrope needs "original_max_position_embeddings"/],
    [{ rope_scaling: { rope_type: "llama3", factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8 } },
      /rope_scaling type "llama3" is not supported for Phi-3 \/ Phi-3.5/],
    [{ sliding_window: 0 }, /"sliding_window" must be a positive integer or null/],
  ])("refuses a Phi-3 config.json with a bad field, naming it and the file %#", (patch, msg) => {
    const base = JSON.parse(readFileSync(join(FIXTURES, "family-phi3.5/checkpoint/config.json"), "utf8"));
    const raw = { ...base, ...patch };
    for (const [key, v] of Object.entries(patch)) if (v === undefined) delete raw[key];
    expect(() => parseHfConfig(raw, "my/config.json")).toThrow(ModelConfigError);
    expect(() => parseHfConfig(raw, "my/config.json")).toThrow(msg);
  });
});

describe("Phi-3 checkpoints", () => {
  it("are saved with fused qkv_proj and gate_up_proj, bit for bit as loaded", () => {
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-phi3-"));
    try {
      const src = join(FIXTURES, "family-phi3.5/checkpoint");
      const ck = loadCheckpoint(src);
      saveCheckpoint(join(dir, "out"), ck.cfg, ck.entries, ck.data);
      const before = readSafetensors(join(src, "model.safetensors"));
      const after = readSafetensors(join(dir, "out", "model.safetensors"));
      expect([...after.keys()].sort()).toEqual([...before.keys()].sort());
      expect(after.has("model.layers.1.self_attn.qkv_proj.weight") && after.has("model.layers.1.mlp.gate_up_proj.weight")).toBe(true);
      for (const [n, t] of before) {
        expect(after.get(n)!.shape, n).toEqual(t.shape);
        expect(Buffer.from(after.get(n)!.data.buffer, after.get(n)!.data.byteOffset, t.data.byteLength)
          .equals(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)), n).toBe(true);
      }
      const hf = JSON.parse(readFileSync(join(dir, "out", "config.json"), "utf8"));
      expect(hf).toMatchObject({ model_type: "phi3", architectures: ["Phi3ForCausalLM"], sliding_window: 2048, original_max_position_embeddings: 32, pad_token_id: 132 });
      expect(loadCheckpoint(join(dir, "out")).data).toEqual(ck.data);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuse a mis-shaped or missing tensor, naming the tensor and the file", () => {
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-phi3-"));
    try {
      const src = join(FIXTURES, "family-phi3.5/checkpoint");
      cpSync(src, dir, { recursive: true });
      const t = readSafetensors(join(src, "model.safetensors"));
      const qkv = t.get("model.layers.0.self_attn.qkv_proj.weight")!;
      t.set("model.layers.0.self_attn.qkv_proj.weight", { shape: [qkv.shape[0]! - 32, 32], data: qkv.data.slice(32 * 32) });
      writeSafetensors(join(dir, "model.safetensors"), t);
      expect(() => loadCheckpoint(dir)).toThrow(/model\.safetensors: tensor "model\.layers\.0\.self_attn\.qkv_proj\.weight" has shape \[64,32\], config\.json implies \[96,32\]/);
      t.delete("model.layers.0.self_attn.qkv_proj.weight");
      writeSafetensors(join(dir, "model.safetensors"), t);
      expect(() => loadCheckpoint(dir)).toThrow(CheckpointError);
      expect(() => loadCheckpoint(dir)).toThrow(/tensor "model\.layers\.0\.self_attn\.qkv_proj\.weight" is missing from model\.safetensors/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("run exactly up to the sliding window and refuse past it; longrope runs past its original length", () => {
    const k = kernels[0]!;
    const seq = (n: number) => Array.from({ length: n }, (_, i) => (i * 7) % 100);
    const ck = loadCheckpoint(join(FIXTURES, "family-phi3-4k", "checkpoint"));
    const model = buildModel(ck, k);
    const ws = new TrainWorkspace(ck.cfg);
    trainForward(model, ws, packSequences([seq(16)]));
    expect(() => trainForward(model, ws, packSequences([seq(17)]))).toThrow(/sliding_window \(16\)/);
    // family-phi3.5: original_max_position_embeddings 32; past it the long factors (phi3-longrope.test.ts checks them)
    const ck35 = loadCheckpoint(join(FIXTURES, "family-phi3.5", "checkpoint"));
    const ws35 = new TrainWorkspace(ck35.cfg);
    trainForward(buildModel(ck35, k), ws35, packSequences([seq(33)]));
    expect(Number.isFinite(ws35.logprob[0])).toBe(true);
  });
});

describe("padded vocabulary", () => {
  const U = 150; // the tokenizer's ids; rows 150.. are padding
  const V = 160;
  const logits = new Float32Array(V);
  for (let i = 0; i < V; i++) logits[i] = i >= U ? 50 : Math.sin(i); // padding rows dominate

  it.each([
    ["greedy", { temperature: 0 }], ["temperature", { temperature: 1 }], ["top-k", { temperature: 1, topK: 5 }],
    ["top-p", { temperature: 2, topP: 0.9 }],
  ] as const)("the sampler never picks a padding row (%s)", (_n, p) => {
    const params = resolveSampleParams({ ...p, maxTokens: 1 });
    for (const softmax of [undefined, kernels[0]!.softmaxRows.bind(kernels[0]!)]) {
      const s = new Sampler(V, softmax);
      s.usable = U;
      const rng = new Rng(7, "xoshiro128**");
      for (let i = 0; i < 200; i++) {
        const { token, logprob } = s.sample(logits, params, rng);
        expect(token).toBeLessThan(U);
        expect(Number.isFinite(logprob)).toBe(true);
      }
    }
    expect(() => { new Sampler(V).usable = V + 1; }).toThrow(/usable ids must be an integer in \[1, 160\]/);
  });

  it("an engine told the tokenizer's id count samples only those ids from a padded checkpoint", async () => {
    const ck = loadCheckpoint(join(FIXTURES, "family-qwen2.5", "checkpoint"));
    expect(ck.cfg.vocabSize).toBe(V);
    // Make the padding rows of the LM head win every argmax.
    const lm = bindParams(ck.cfg, ck.entries, ck.data).lmHead;
    const C = ck.cfg.hiddenSize;
    for (let r = U; r < V; r++) for (let c = 0; c < C; c++) lm[r * C + c] = 0;
    lm[155 * C] = 1e4;
    const plain = new EmbeddedEngine(ck, { kernels: kernels[0]! });
    const s0 = plain.sessionSync([1, 2, 3]);
    expect((await s0.sample({ temperature: 0, maxTokens: 1 })).tokens[0]).toBeGreaterThanOrEqual(U);
    plain.dispose();
    const engine = new EmbeddedEngine(ck, { kernels: kernels[0]!, usableTokens: U });
    for (const p of [{ temperature: 0 }, { temperature: 1, seed: 3 }, { temperature: 1, topK: 3, seed: 4 }]) {
      const s = engine.sessionSync([1, 2, 3]);
      const r = await s.sample({ ...p, maxTokens: 6 });
      expect(r.tokens.every((t) => t < U)).toBe(true);
    }
    expect(() => { engine.usableTokens = V + 1; }).toThrow(/the model has 160 embedding rows/);
    engine.dispose();
  });

  it("serve and loadPolicy accept a checkpoint padded past its tokenizer's ids and refuse fewer rows", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-padded-"));
    try {
      // Qwen3's tokenizer (151669 ids) with Qwen3's 151936 embedding rows, as published.
      const cfg = { arch: "qwen3", hiddenSize: 8, numLayers: 1, numHeads: 2, numKvHeads: 1, headDim: 4, intermediateSize: 8,
        vocabSize: 151936, rmsNormEps: 1e-6, ropeTheta: 1e6, ropeScaling: { type: "none" }, maxPositionEmbeddings: 64,
        tieWordEmbeddings: true, qkvBias: false } as const;
      const w = randomWeights(cfg, 1);
      saveCheckpoint(join(dir, "padded"), w.cfg, w.entries, w.data, { tokenizerFrom: qwen3TokenizerDir() });
      const served = await openServer(join(dir, "padded"));
      expect(served.engine.usableTokens).toBe(151669);
      await served.close();
      const policy = loadPolicy(join(dir, "padded"));
      expect(policy.codec.size).toBe(151669);
      expect(policy.engine.usableTokens).toBe(151669);
      policy.engine.dispose();
      const small = randomWeights({ ...cfg, vocabSize: 151000 }, 1);
      saveCheckpoint(join(dir, "small"), small.cfg, small.entries, small.data, { tokenizerFrom: qwen3TokenizerDir() });
      expect(() => loadPolicy(join(dir, "small"))).toThrow(/vocab_size \(151000\) is smaller than its tokenizer\/vocabulary \(151669 ids\)/);
      await expect(openServer(join(dir, "small"))).rejects.toThrow(/the model has 151000 embedding rows but the tokenizer has 151669 ids/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
