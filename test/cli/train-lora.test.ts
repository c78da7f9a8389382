// `sinkflex train` with `model.lora` on a checkpoint of the Qwen2.5 family fixture's config (its biases and
// RoPE, the embedding sized to a trimmed Qwen3 vocabulary so the folder has real tokenizer files): SFT and a
// GRPO step train the adapter alone, every checkpoint is a PEFT adapter folder naming the base, the base
// checkpoint is untouched, and the final adapter loads on its base with a changed policy. Also: model.lora
// without model.checkpoint, and model.dtype bf16 with the torch engine, are refused at validation.
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createRandomModel, loadEngine } from "../../src/engine/embedded.js";
import { parseHfConfig } from "../../src/model/config.js";
import { loadQwen3Tokenizer, qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import { tokenCodec, TrimmedVocab } from "../../src/model/vocab.js";
import { ConfigError, validateConfig } from "../../src/pipeline/config.js";
import { FIXTURES } from "../model/fixtures.js";
import { PARITY_ENV_ID, registerParityEnv } from "../pipeline/parity-env.js";
import { runCli } from "../run-cli.js";

registerParityEnv();
const scratch = mkdtempSync(join(tmpdir(), "train-lora-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The family fixture's config with a trimmed Qwen3 vocabulary, saved with its tokenizer files. */
function baseCheckpoint(dir: string): void {
  const tokenizer = loadQwen3Tokenizer();
  const vocab = TrimmedVocab.build(tokenizer, [tokenizer.encode("Say something about item 1. Answer briefly. ok noted")]);
  const codec = tokenCodec(tokenizer, vocab);
  const raw = JSON.parse(readFileSync(join(FIXTURES, "family-qwen2.5", "checkpoint", "config.json"), "utf8"));
  const engine = createRandomModel(parseHfConfig({ ...raw, vocab_size: codec.size, max_position_embeddings: 1024 }), 4);
  engine.tokenizerDir = qwen3TokenizerDir();
  engine.saveSync(dir);
  engine.dispose();
  vocab.save(dir);
}

const LORA = { rank: 4, alpha: 8, targets: ["q", "v", "o", "down"] };

function config(base: string) {
  return {
    name: "lora",
    runsDir: join(scratch, "runs"),
    seed: 3,
    suites: [{ env: PARITY_ENV_ID }],
    model: { checkpoint: base, lora: LORA },
    sft: { expertEpisodes: 4, epochs: 1, batchSize: 4, lr: 1e-3 },
    grpo: { steps: 1, batchTasks: 2, groupSize: 2, lr: 1e-2, epochs: 1, klCoef: 0.04, maxTurns: 1, maxTokensPerTurn: 8, maxContextTokens: 512, concurrency: 4 },
    eval: { tasksPerSuite: 2 },
    checkpointEvery: 1,
  };
}

describe("sinkflex train with model.lora", () => {
  it("runs SFT and a GRPO step on the adapter; checkpoints are PEFT adapter folders on the untouched base", async () => {
    const base = join(scratch, "base");
    baseCheckpoint(base);
    const baseWeights = readFileSync(join(base, "model.safetensors"));
    const file = join(scratch, "lora.json");
    writeFileSync(file, JSON.stringify(config(base)));
    const r = await runCli(["train", "--config", file, "--quiet", "--no-dashboard"]);
    expect(r.code, r.output).toBe(0);
    const runDir = join(scratch, "runs", "lora");
    const metrics = readFileSync(join(runDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(metrics.some((m) => m.stage === "grpo" && m.step === 1)).toBe(true);
    const latest = readFileSync(join(runDir, "checkpoints", "latest"), "utf8").trim();
    const ckpt = join(runDir, "checkpoints", latest);
    expect(existsSync(join(ckpt, "adapter_model.safetensors"))).toBe(true);
    expect(existsSync(join(ckpt, "model.safetensors"))).toBe(false);
    const adapterConfig = JSON.parse(readFileSync(join(ckpt, "adapter_config.json"), "utf8"));
    expect(adapterConfig).toMatchObject({ peft_type: "LORA", r: 4, lora_alpha: 8, target_modules: ["q_proj", "v_proj", "o_proj", "down_proj"], base_model_name_or_path: base });
    expect(readFileSync(join(base, "model.safetensors")).equals(baseWeights)).toBe(true);

    // The trained adapter on its base scores differently from the base alone.
    const trained = loadEngine(ckpt);
    const plain = loadEngine(base);
    try {
      expect(trained.lora?.lora.rank).toBe(4);
      const seq = [[1, 2, 3, 4, 5, 6]];
      const a = trained.logprobsSync(seq)[0]!;
      const b = plain.logprobsSync(seq)[0]!;
      expect(Math.max(...a.map((x, i) => Math.abs(x - b[i]!)))).toBeGreaterThan(1e-6);
    } finally {
      trained.dispose();
      plain.dispose();
    }
  }, 600_000);

  it("refuses model.lora without a checkpoint, and model.dtype bf16 on the torch engine", () => {
    const cfg = config("/nowhere/base");
    expect(() => validateConfig({ ...cfg, model: { init: {}, lora: LORA } })).toThrow(/model.lora trains an adapter on a pretrained model: set model.checkpoint/);
    expect(validateConfig({ ...cfg, engine: { backend: "torch" } }).model.lora).toMatchObject({ rank: 4 }); // peft in the worker
    expect(() => validateConfig({ ...cfg, model: { ...cfg.model, dtype: "bf16" }, engine: { backend: "torch" } })).toThrow(/model\.dtype: holds the embedded engine's weights in bf16/);
    expect(() => validateConfig({ ...cfg, model: { checkpoint: "/x", lora: { ...LORA, targets: ["qk"] } } })).toThrow(ConfigError);
    // validation does not need the checkpoint folder to exist
    expect(validateConfig(cfg).model.lora).toMatchObject({ rank: 4, dropout: 0 });
  });
});
