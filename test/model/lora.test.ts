// LoRA adapters against peft: a peft adapter (rank 4, alpha 8, every projection) on the Qwen2.5, Qwen3 and
// Phi-3.5 family fixtures (Phi-3's fused qkv_proj and gate_up_proj adapted whole, as peft does) gives peft's
// logits (within 1e-4 absolute), loss (1e-4) and every lora_A / lora_B gradient (within 1e-4 of the tensor's
// largest gradient, plus 1e-7) on every kernel set, with the base frozen, merged into the weights or run
// beside them.
// Also: a fresh adapter leaves the model unchanged; the engine holds gradients and AdamW moments for the
// adapter only; a trained adapter saved by sinkflex loads in peft with the same logits (python subprocess,
// skipped with a printed reason when torch or peft is missing); merging writes a checkpoint equal to
// base + adapter; bad configs are refused with what to do.
import { describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadCheckpoint } from "../../src/model/checkpoint.js";
import { buildModel } from "../../src/model/instance.js";
import {
  createLoraAdapter, loadLoraAdapter, LoraError, LoraGrads, loraParamCount, mergeLora,
  peftTensorName, validateLoraConfig,
} from "../../src/model/lora.js";
import { mergeAdapterCheckpoint } from "../../src/model/lora-merge.js";
import { bindParams } from "../../src/model/params.js";
import { readSafetensors, writeSafetensors } from "../../src/model/safetensors.js";
import { packSequences, trainBackward, trainForward, TrainWorkspace } from "../../src/model/transformer.js";
import { EmbeddedEngine } from "../../src/engine/embedded.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { referenceKernels } from "../../src/kernels/index.js";
import { FIXTURES, type Fixture, kernelSets, loadFixture } from "./fixtures.js";

/** The Python with torch (CI's worker environment names it), else the system's. */
const PYTHON = process.env.SINKFLEX_TORCH_PYTHON ?? "python3";

/**
 * peft loads the adapter saved in `adapterDir` on the fixture's checkpoint and gives `logits` (the engine's,
 * [tokens, V]); skipped where PYTHON lacks torch, transformers or peft, unless SINKFLEX_REQUIRE_TORCH=1.
 */
function expectPeftLoads(ctx: { skip: () => void }, fx: Fixture, adapterDir: string, logits: Float32Array, dir: string): void {
  const probe = spawnSync(PYTHON, ["-c", "import torch, transformers, peft"], { encoding: "utf8" });
  if (probe.status !== 0) {
    if (process.env.SINKFLEX_REQUIRE_TORCH === "1") throw new Error(`SINKFLEX_REQUIRE_TORCH=1 but ${PYTHON} cannot import the Python side of this check`);
    console.log(`skipped the peft load check: ${PYTHON} cannot import torch, transformers and peft (${probe.stderr.trim().split("\n").pop()})`);
    ctx.skip();
  }
  writeFileSync(join(dir, "ids.json"), JSON.stringify(fx.inputIds));
  writeSafetensors(join(dir, "logits.safetensors"), [["logits", { shape: [logits.length], data: logits }]]);
  const r = spawnSync(PYTHON, ["scripts/make-fixtures.py", "check-lora", fx.checkpoint, adapterDir, join(dir, "ids.json"), join(dir, "logits.safetensors")], { encoding: "utf8", timeout: 120_000 });
  expect(r.status, r.stdout + r.stderr).toBe(0);
  expect(r.stdout).toContain("PeftModel");
}

const kernels = await kernelSets();
const LORA_FIXTURES = ["family-qwen2.5", "family-qwen3", "family-phi3.5"];
const ALL = { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "gate", "up", "down"] } as const;

function meanCe(N: number, targets: Int32Array): { dLogprob: Float32Array; count: number } {
  let count = 0;
  for (let n = 0; n < N; n++) if (targets[n]! >= 0) count++;
  const dLogprob = new Float32Array(N);
  for (let n = 0; n < N; n++) dLogprob[n] = targets[n]! >= 0 ? -1 / count : 0;
  return { dLogprob, count };
}

describe.each(kernels.map((k) => [k.name, k] as const))("LoRA vs peft on %s kernels", (_n, k) => {
  it.each(LORA_FIXTURES.flatMap((n) => [[n, "merged"], [n, "beside the weights"]] as const))("%s: peft's adapter gives peft's logits, loss and A/B gradients (%s)", (name, how) => {
    const fx = loadFixture(name);
    const lx = loadFixture(join(name, "lora"));
    const ck = loadCheckpoint(fx.checkpoint);
    const adapter = loadLoraAdapter(join(FIXTURES, name, "lora", "adapter"), ck.cfg);
    const phi3 = ck.cfg.arch === "phi3";
    expect(adapter.lora).toMatchObject({ rank: 4, alpha: 8, targets: phi3 ? ["qkv", "o", "gate_up", "down"] : [...ALL.targets] });
    const model = buildModel(ck, k);
    const grads = new LoraGrads(adapter, ck.cfg.numLayers);
    if (how === "merged") mergeLora(k, model.params, adapter, 1);
    else model.lora = grads;
    const ws = new TrainWorkspace(ck.cfg);
    const batch = packSequences(fx.inputIds);
    trainForward(model, ws, batch);
    const N = batch.ids.length;
    const want = lx.expected.get("logits")!.data;
    let maxDiff = 0;
    for (let i = 0; i < want.length; i++) maxDiff = Math.max(maxDiff, Math.abs(ws.logits[i]! - want[i]!));
    expect(maxDiff).toBeLessThan(1e-4);
    const { dLogprob, count } = meanCe(N, batch.targets);
    let sum = 0;
    for (let n = 0; n < N; n++) sum += ws.logprob[n]!;
    expect(Math.abs(-sum / count - lx.meta.loss)).toBeLessThan(1e-4);

    trainBackward(model, ws, batch, dLogprob, null, grads);
    for (const e of adapter.entries) {
      for (const which of ["A", "B"] as const) {
        const pname = peftTensorName(e, which);
        const g = lx.expected.get(`grad.${pname}`);
        expect(g, pname).toBeDefined();
        const off = which === "A" ? e.aOffset : e.bOffset;
        const ours = grads.data.subarray(off, off + g!.data.length);
        let scale = 0;
        let diff = 0;
        for (let i = 0; i < g!.data.length; i++) {
          scale = Math.max(scale, Math.abs(g!.data[i]!));
          diff = Math.max(diff, Math.abs(ours[i]! - g!.data[i]!));
        }
        expect(scale, `${pname} has a gradient`).toBeGreaterThan(0);
        expect(diff, `${pname}: max |diff| ${diff} vs max |grad| ${scale}`).toBeLessThanOrEqual(1e-4 * scale + 1e-7);
      }
    }
  });
});

describe("LoRA in the engine", () => {
  const name = "family-qwen2.5";

  it("a fresh adapter (B = 0) leaves the log-probs unchanged; gradients and AdamW hold the adapter only", () => {
    const fx = loadFixture(name);
    const engine = new EmbeddedEngine(loadCheckpoint(fx.checkpoint), { kernels: referenceKernels });
    const before = engine.logprobsSync(fx.inputIds);
    const adapter = createLoraAdapter(engine.config, { ...ALL, targets: [...ALL.targets] }, 3);
    // A is kaiming-uniform: within +-1/sqrt(in) and not all zero
    const a0 = adapter.entries[0]!;
    const A = adapter.data.subarray(a0.aOffset, a0.aOffset + 4 * a0.inDim);
    expect(Math.max(...A.map(Math.abs))).toBeLessThanOrEqual(1 / Math.sqrt(a0.inDim));
    expect(Math.max(...A.map(Math.abs))).toBeGreaterThan(0.5 / Math.sqrt(a0.inDim));
    engine.enableLora(adapter);
    const after = engine.logprobsSync(fx.inputIds);
    expect(after).toEqual(before);

    const base = engine.weights.data.slice();
    const n = loraParamCount(engine.config, adapter.lora);
    expect(adapter.data.length).toBe(n);
    const loss = (lps: Float32Array[]) => ({
      loss: -lps.reduce((s, l) => s + l.reduce((a, b) => a + b, 0), 0),
      dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-1)),
    });
    const l0 = engine.forwardBackwardSync(fx.inputIds, loss).loss;
    expect(engine.grads.length).toBe(n);
    engine.optimStepSync({ lr: 1e-2 });
    expect(engine.optimizer.size).toBe(n);
    const l1 = engine.forwardBackwardSync(fx.inputIds, loss).loss;
    expect(l1).toBeLessThan(l0);
    // Only the adapted projections moved; norms and embeddings are frozen.
    for (const e of engine.weights.entries) {
      const moved = engine.weights.data.subarray(e.offset, e.offset + e.size).some((x, i) => x !== base[e.offset + i]);
      expect(moved, e.name).toBe(e.kind === "linear" && e.name.includes("layers"));
    }
  });

  it("a trained adapter saved by sinkflex loads in peft with the same logits, and in a new engine", (ctx) => {
    const fx = loadFixture(name);
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-lora-"));
    try {
      const engine = new EmbeddedEngine(loadCheckpoint(fx.checkpoint), { kernels: referenceKernels });
      engine.enableLora(createLoraAdapter(engine.config, { rank: 2, alpha: 4, targets: ["q", "v", "down"] }, 5));
      const loss = (lps: Float32Array[]) => ({ loss: 0, dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-1)) });
      for (let i = 0; i < 2; i++) {
        engine.forwardBackwardSync(fx.inputIds, loss);
        engine.optimStepSync({ lr: 2e-2 });
      }
      const adapterDir = join(dir, "adapter");
      engine.saveSync(adapterDir, { optimizer: true });
      const ws = new TrainWorkspace(engine.config);
      trainForward(engine.model, ws, packSequences(fx.inputIds), false);
      const logits = ws.logits.slice(0, fx.inputIds.flat().length * engine.config.vocabSize);

      // a new engine on the base, loading the folder, scores the same
      const again = new EmbeddedEngine(loadCheckpoint(fx.checkpoint), { kernels: referenceKernels });
      again.loadSync(adapterDir);
      expect(again.lora?.lora).toEqual(engine.lora!.lora);
      expect(again.optimizer.step).toBe(2);
      expect(() => again.loadSync(fx.checkpoint)).toThrow(/trains a LoRA adapter and .* is a full checkpoint/);
      const a = again.logprobsSync(fx.inputIds);
      const b = engine.logprobsSync(fx.inputIds);
      for (let s = 0; s < a.length; s++) for (let t = 0; t < a[s]!.length; t++) expect(Math.abs(a[s]![t]! - b[s]![t]!)).toBeLessThan(1e-5);

      expectPeftLoads(ctx, fx, adapterDir, logits, dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);

  it("merging peft's adapter writes a checkpoint with peft's logits", () => {
    const fx = loadFixture(name);
    const lx = loadFixture(join(name, "lora"));
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-merge-"));
    try {
      const out = join(dir, "merged");
      const r = mergeAdapterCheckpoint(referenceKernels, fx.checkpoint, join(FIXTURES, name, "lora", "adapter"), out);
      expect(r).toMatchObject({ rank: 4, merged: 2 * 7 });
      const ck = loadCheckpoint(out);
      const model = buildModel(ck, referenceKernels);
      const ws = new TrainWorkspace(ck.cfg);
      trainForward(model, ws, packSequences(fx.inputIds), false);
      const want = lx.expected.get("logits")!.data;
      let maxDiff = 0;
      for (let i = 0; i < want.length; i++) maxDiff = Math.max(maxDiff, Math.abs(ws.logits[i]! - want[i]!));
      expect(maxDiff).toBeLessThan(1e-4);
      // the base alone differs: the merge did something
      const base = loadCheckpoint(fx.checkpoint);
      const bw = new TrainWorkspace(base.cfg);
      trainForward(buildModel(base, referenceKernels), bw, packSequences(fx.inputIds), false);
      let baseDiff = 0;
      for (let i = 0; i < want.length; i++) baseDiff = Math.max(baseDiff, Math.abs(bw.logits[i]! - want[i]!));
      expect(baseDiff).toBeGreaterThan(1e-2);
      expect(bindParams(ck.cfg, ck.entries, ck.data).layers.length).toBe(2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses bad settings with what to do", () => {
    expect(() => validateLoraConfig({ rank: 0, alpha: 8, targets: ["q"] })).toThrow(/rank must be an integer >= 1/);
    expect(() => validateLoraConfig({ rank: 4, alpha: 8, targets: ["qk"] })).toThrow(/"qk" is not one of q, k, v, qkv, o, gate, up, gate_up, down/);
    expect(() => validateLoraConfig({ rank: 4, alpha: 8, targets: ["q"], dropout: 0.1 })).toThrow(/dropout must be 0/);
    expect(() => validateLoraConfig({ rank: 4, targets: [], alpha: 1 })).toThrow(LoraError);
    expect(validateLoraConfig({ rank: 4, alpha: 8, targets: ["v_proj", "q"] }).targets).toEqual(["q", "v"]);
    const phi = loadCheckpoint(join(FIXTURES, "family-phi3.5", "checkpoint"));
    expect(() => createLoraAdapter(phi.cfg, { rank: 2, alpha: 2, targets: validateLoraConfig({ rank: 2, targets: ["q", "v_proj", "o"] }).targets }, 1))
      .toThrow(/LoRA targets q_proj, v_proj are not modules of Phi-3 \/ Phi-3\.5 models; target among their modules: qkv_proj, o_proj, gate_up_proj, down_proj/);
    const qwen = loadCheckpoint(join(FIXTURES, "family-qwen2.5", "checkpoint"));
    expect(() => createLoraAdapter(qwen.cfg, { rank: 2, alpha: 2, targets: validateLoraConfig({ rank: 2, targets: ["gate_up_proj"] }).targets }, 1))
      .toThrow(/LoRA target gate_up_proj is not a module of Qwen2 \/ Qwen2\.5 models; target among their modules: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj/);
  });
});

describe("LoRA on Phi-3's fused modules in the engine", () => {
  const name = "family-phi3.5";

  it("a run config's model.lora.targets takes Phi-3's module names (or short names) and refuses unknown ones", () => {
    const run = (targets: string[]) => validateConfig({ suites: [{ env: "sinkflex/arith-v0" }], model: { checkpoint: "ckpt", lora: { rank: 4, targets } } });
    expect(run(["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]).model.lora!.targets).toEqual(["qkv", "o", "gate_up", "down"]);
    expect(run(["qkv", "gate_up"]).model.lora!.targets).toEqual(["qkv", "gate_up"]);
    expect(() => run(["qkvo_proj"])).toThrow(/model\.lora\.targets\.0/);
  });

  it("an adapter trained on qkv_proj, o_proj, gate_up_proj, down_proj saves as peft's and loads in peft with the same logits", (ctx) => {
    const fx = loadFixture(name);
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-lora-phi3-"));
    try {
      const engine = new EmbeddedEngine(loadCheckpoint(fx.checkpoint), { kernels: referenceKernels });
      const lora = validateLoraConfig({ rank: 2, alpha: 4, targets: ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"] });
      expect(lora.targets).toEqual(["qkv", "o", "gate_up", "down"]);
      const before = engine.logprobsSync(fx.inputIds);
      engine.enableLora(createLoraAdapter(engine.config, lora, 5));
      expect(engine.logprobsSync(fx.inputIds)).toEqual(before); // B = 0: the base model
      const loss = (lps: Float32Array[]) => ({ loss: 0, dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-1)) });
      for (let i = 0; i < 2; i++) {
        engine.forwardBackwardSync(fx.inputIds, loss);
        engine.optimStepSync({ lr: 2e-2 });
      }
      const adapterDir = join(dir, "adapter");
      engine.saveSync(adapterDir);
      const C = engine.config.hiddenSize;
      const qkvRows = (engine.config.numHeads + 2 * engine.config.numKvHeads) * engine.config.headDim;
      const saved = readSafetensors(join(adapterDir, "adapter_model.safetensors"));
      expect(saved.size).toBe(2 * 4 * 2);
      expect(saved.get("base_model.model.model.layers.1.self_attn.qkv_proj.lora_A.weight")!.shape).toEqual([2, C]);
      expect(saved.get("base_model.model.model.layers.1.self_attn.qkv_proj.lora_B.weight")!.shape).toEqual([qkvRows, 2]);
      expect(saved.get("base_model.model.model.layers.0.mlp.gate_up_proj.lora_B.weight")!.shape).toEqual([2 * engine.config.intermediateSize, 2]);
      const cfg = JSON.parse(readFileSync(join(adapterDir, "adapter_config.json"), "utf8"));
      expect(cfg.target_modules).toEqual(["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]);
      const ws = new TrainWorkspace(engine.config);
      trainForward(engine.model, ws, packSequences(fx.inputIds), false);
      const logits = ws.logits.slice(0, fx.inputIds.flat().length * engine.config.vocabSize);

      const again = new EmbeddedEngine(loadCheckpoint(fx.checkpoint), { kernels: referenceKernels, dtype: "bf16" });
      again.loadSync(adapterDir);
      expect(again.lora?.lora).toEqual(engine.lora!.lora);

      expectPeftLoads(ctx, fx, adapterDir, logits, dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);

  it("merging peft's Phi-3 adapter writes a fused checkpoint with peft's logits", () => {
    const fx = loadFixture(name);
    const lx = loadFixture(join(name, "lora"));
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-merge-phi3-"));
    try {
      const out = join(dir, "merged");
      const r = mergeAdapterCheckpoint(referenceKernels, fx.checkpoint, join(FIXTURES, name, "lora", "adapter"), out);
      expect(r).toMatchObject({ rank: 4, merged: 2 * 4, targets: ["qkv", "o", "gate_up", "down"] });
      expect(readSafetensors(join(out, "model.safetensors")).has("model.layers.0.self_attn.qkv_proj.weight")).toBe(true);
      const ck = loadCheckpoint(out);
      const ws = new TrainWorkspace(ck.cfg);
      trainForward(buildModel(ck, referenceKernels), ws, packSequences(fx.inputIds), false);
      const want = lx.expected.get("logits")!.data;
      let maxDiff = 0;
      for (let i = 0; i < want.length; i++) maxDiff = Math.max(maxDiff, Math.abs(ws.logits[i]! - want[i]!));
      expect(maxDiff).toBeLessThan(1e-4);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
