// `sinkflex size` against hand-computed numbers for a small shape and for Qwen2.5-7B's published config;
// configs/qwen2.5-7b-tau-retail.yaml loads and validates without its checkpoint folder and sizes from the
// built-in shape; `sinkflex merge` writes a checkpoint whose logits are peft's for the fixture adapter.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parseHfConfig } from "../../src/model/config.js";
import { loadCheckpoint } from "../../src/model/checkpoint.js";
import { buildModel } from "../../src/model/instance.js";
import { sizeModel, formatBytes } from "../../src/model/sizing.js";
import { packSequences, trainForward, TrainWorkspace } from "../../src/model/transformer.js";
import { referenceKernels } from "../../src/kernels/index.js";
import { loadConfigFile } from "../../src/pipeline/config.js";
import { FIXTURES, loadFixture } from "../model/fixtures.js";
import { runCli } from "../run-cli.js";

const scratch = mkdtempSync(join(tmpdir(), "size-merge-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

// C 8, L 2, H 2 (D 4), KVH 1, F 16, V 32, untied, Qwen2 (q/k/v biases).
const SMALL = {
  architectures: ["Qwen2ForCausalLM"], model_type: "qwen2", hidden_size: 8, num_hidden_layers: 2, num_attention_heads: 2,
  num_key_value_heads: 1, intermediate_size: 16, vocab_size: 32, max_position_embeddings: 128, rms_norm_eps: 1e-6, tie_word_embeddings: false,
};
// By hand: embedding 32*8 = 256 and LM head 256; per layer norms 2*8, q 8*8 + 8, k 4*8 + 4, v 4*8 + 4,
// o 8*8, gate/up/down 3*16*8 = 384: 16 + 72 + 36 + 36 + 64 + 384 = 608, two layers 1216; final norm 8.
const SMALL_PARAMS = 256 + 256 + 1216 + 8;
// LoRA rank 2 on q (2*(8+8) = 32) and v (2*(8+4) = 24): 56 a layer, 112 in all.
const SMALL_LORA = 112;
// KV: K and V, 2 layers, 1 head of 4, fp32: 2*2*1*4*4 = 64 bytes a token; 100 tokens x 3 sequences.
const SMALL_KV = 64 * 100 * 3;

describe("sinkflex size", () => {
  it("matches hand-computed numbers for a small shape, full and LoRA", () => {
    const cfg = parseHfConfig(SMALL);
    const full = sizeModel(cfg, { context: 100, concurrency: 3, reference: true });
    expect(full).toMatchObject({
      parameters: SMALL_PARAMS, trainable: SMALL_PARAMS, weightsFp32: SMALL_PARAMS * 4, weightsBf16: SMALL_PARAMS * 2,
      gradients: SMALL_PARAMS * 4, optimizer: SMALL_PARAMS * 8, adapter: 0, referenceFp32: SMALL_PARAMS * 4, referenceBf16: SMALL_PARAMS * 2,
      kvPerTokenFp32: 64, kvCacheFp32: SMALL_KV, kvCacheBf16: SMALL_KV / 2,
    });
    expect(full.totalFp32).toBe(SMALL_PARAMS * (4 + 4 + 8 + 4) + SMALL_KV);
    // full training of bf16 weights keeps an fp32 master copy of every parameter beside them
    expect(full.masterBf16).toBe(SMALL_PARAMS * 4);
    expect(full.totalBf16).toBe(SMALL_PARAMS * (2 + 4 + 4 + 8 + 2) + SMALL_KV / 2);
    const lora = sizeModel(cfg, { lora: { rank: 2, alpha: 4, targets: ["q", "v"] }, context: 100, concurrency: 3, reference: false });
    expect(lora).toMatchObject({ trainable: SMALL_LORA, gradients: SMALL_LORA * 4, optimizer: SMALL_LORA * 8, adapter: SMALL_LORA * 4, masterBf16: 0, referenceFp32: 0 });
    expect(lora.totalBf16).toBe(SMALL_PARAMS * 2 + SMALL_LORA * 16 + SMALL_KV / 2);
    expect(() => sizeModel(cfg, { context: 0, concurrency: 1, reference: false })).toThrow(/context must be an integer >= 1/);
    expect(formatBytes(3 * 2 ** 30)).toBe("3.00 GiB");
    expect(formatBytes(1536)).toBe("1.50 KiB");
  });

  it("prints a checkpoint folder's numbers as JSON", async () => {
    const dir = join(scratch, "small");
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "config.json"), JSON.stringify(SMALL));
    const r = await runCli(["size", "--shape", dir, "--context", "100", "--concurrency", "3", "--lora-rank", "2", "--lora-targets", "q,v", "--no-kl", "--json"]);
    expect(r.code, r.output).toBe(0);
    const j = JSON.parse(r.output);
    expect(j).toMatchObject({ parameters: SMALL_PARAMS, trainable: SMALL_LORA, kvCacheFp32: SMALL_KV, reference: false, referenceFp32: 0 });
    const bad = await runCli(["size", "--shape", "qwen9-1t"]);
    expect(bad.code).toBe(2);
    expect(bad.output).toMatch(/neither a checkpoint folder with config.json nor a built-in shape \(qwen2.5-0.5b/);
  });

  it("the Qwen2.5-7B tau-retail recipe validates without its checkpoint and sizes from the built-in shape", async () => {
    const cfg = loadConfigFile("configs/qwen2.5-7b-tau-retail.yaml");
    expect(cfg.grpo).toMatchObject({ lr: 5e-6, batchTasks: 32, groupSize: 8, klCoef: 0.04, epochs: 3 });
    expect(cfg.model.lora).toMatchObject({ rank: 16, alpha: 32 });
    const r = await runCli(["size", "--config", "configs/qwen2.5-7b-tau-retail.yaml", "--json"]);
    expect(r.code, r.output).toBe(0);
    const j = JSON.parse(r.output);
    // Qwen2.5-7B by hand: 2 * 152064 * 3584 (embedding, LM head) + 28 * (2*3584 + 2*3584*3584 + 2*3584*512
    // + 3584 + 2*512 + 3*3584*18944) + 3584 = 7,615,616,512; LoRA rank 16 on all seven: 28 * 16 *
    // ((3584+3584)*2 + (3584+512)*2 + (3584+18944)*3) = 40,370,176; KV 2*28*4*128*4 = 114,688 B a token.
    expect(j).toMatchObject({ parameters: 7_615_616_512, trainable: 40_370_176, kvPerTokenFp32: 114_688, context: 16384, concurrency: 64, reference: true });
    expect(j.model).toMatch(/built-in shape qwen2.5-7b/);
    const table = await runCli(["size", "--config", "configs/qwen2.5-7b-tau-retail.yaml"]);
    expect(table.output).toContain("7,615,616,512 (7.62B)");
    expect(table.output).toMatch(/KV cache \(16384 tokens x 64 sequences\)\s+112.00 GiB\s+56.00 GiB/);
  });
});

describe("sinkflex merge", () => {
  it("writes a full checkpoint with peft's logits for the fixture adapter", async () => {
    const fx = loadFixture("family-qwen2.5");
    const lx = loadFixture(join("family-qwen2.5", "lora"));
    const out = join(scratch, "merged");
    const r = await runCli(["merge", fx.checkpoint, join(FIXTURES, "family-qwen2.5", "lora", "adapter"), "--out", out]);
    expect(r.code, r.output).toBe(0);
    expect(r.output).toMatch(/merged a rank-4 adapter on q, k, v, o, gate, up, down \(14 matrices\)/);
    const ck = loadCheckpoint(out);
    const ws = new TrainWorkspace(ck.cfg);
    trainForward(buildModel(ck, referenceKernels), ws, packSequences(fx.inputIds), false);
    const want = lx.expected.get("logits")!.data;
    let maxDiff = 0;
    for (let i = 0; i < want.length; i++) maxDiff = Math.max(maxDiff, Math.abs(ws.logits[i]! - want[i]!));
    expect(maxDiff).toBeLessThan(1e-4);
    const bad = await runCli(["merge", fx.checkpoint, fx.checkpoint, "--out", join(scratch, "x")]);
    expect(bad.code).toBe(2);
    expect(bad.output).toMatch(/is not a LoRA adapter folder \(no adapter_config.json\)/);
  });
});
