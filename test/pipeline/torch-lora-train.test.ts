// `model.lora` on the torch engine (peft in the worker, CPU): a run on a checkpoint of the Qwen2.5 family
// fixture's config (as test/cli/train-lora.test.ts's) trains the adapter alone through SFT and a GRPO step;
// every checkpoint is a PEFT adapter folder naming the untouched base, in the embedded engine's files,
// and the final adapter gives the same log-probs in the embedded engine as in the worker (1e-4) and not
// the base's. Skipped with a printed reason when the Python side (or peft) is missing (a failure when
// SINKFLEX_REQUIRE_TORCH=1).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createRandomModel, loadEngine } from "../../src/engine/embedded.js";
import { defaultPython, openTorchEngine } from "../../src/engine/torch/index.js";
import { parseHfConfig } from "../../src/model/config.js";
import { loadQwen3Tokenizer, qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import { tokenCodec, TrimmedVocab } from "../../src/model/vocab.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { train } from "../../src/pipeline/train.js";
import { maxDiff, torchUnavailable } from "../engine/torch-helpers.js";
import { FIXTURES } from "../model/fixtures.js";
import { PARITY_ENV_ID, registerParityEnv } from "./parity-env.js";

registerParityEnv();
const missing = torchUnavailable() ?? (spawnSync(defaultPython(), ["-c", "import peft"]).status === 0 ? null : "no peft");
const scratch = mkdtempSync(join(tmpdir(), "torch-lora-train-"));
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

(missing ? describe.skip : describe)(`model.lora on the torch engine${missing ? ` (${missing})` : ""}`, () => {
  it("SFT and a GRPO step train the adapter in the worker; checkpoints are the embedded engine's adapter folders on the untouched base", async () => {
    const base = join(scratch, "base");
    baseCheckpoint(base);
    const baseWeights = readFileSync(join(base, "model.safetensors"));
    const result = await train(validateConfig({
      name: "torch-lora",
      runsDir: join(scratch, "runs"),
      seed: 3,
      suites: [{ env: PARITY_ENV_ID }],
      engine: { backend: "torch", threads: 1 },
      model: { checkpoint: base, lora: { rank: 4, alpha: 8, targets: ["q", "v", "o", "down"] } },
      sft: { expertEpisodes: 4, epochs: 1, batchSize: 4, lr: 1e-3 },
      grpo: { steps: 1, batchTasks: 2, groupSize: 2, lr: 1e-2, epochs: 1, klCoef: 0.04, maxTurns: 1, maxTokensPerTurn: 8, maxContextTokens: 512, concurrency: 4 },
      eval: { tasksPerSuite: 2 },
      checkpointEvery: 1,
    }), { quiet: true });
    expect(result.stopped).toBe(false);
    const metrics = readFileSync(join(result.runDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(metrics.some((m) => m.stage === "sft")).toBe(true);
    expect(metrics.some((m) => m.stage === "grpo" && m.step === 1)).toBe(true);
    const latest = readFileSync(join(result.runDir, "checkpoints", "latest"), "utf8").trim();
    const ckpt = join(result.runDir, "checkpoints", latest);
    expect(existsSync(join(ckpt, "adapter_model.safetensors"))).toBe(true);
    expect(existsSync(join(ckpt, "model.safetensors"))).toBe(false);
    expect(JSON.parse(readFileSync(join(ckpt, "adapter_config.json"), "utf8"))).toMatchObject({
      peft_type: "LORA", r: 4, lora_alpha: 8, target_modules: ["q_proj", "v_proj", "o_proj", "down_proj"], base_model_name_or_path: base,
    });
    expect(readFileSync(join(base, "model.safetensors")).equals(baseWeights)).toBe(true);

    const seqs = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 3, 5, 1]];
    const trained = loadEngine(ckpt);
    const worker = await openTorchEngine({ model: ckpt, threads: 1 });
    try {
      expect(worker.lora).toMatchObject({ rank: 4, targets: ["q", "v", "o", "down"] });
      const a = await trained.logprobs(seqs);
      expect(maxDiff(a, await worker.logprobs(seqs))).toBeLessThan(1e-4);
      expect(maxDiff(a, await loadEngine(base).logprobs(seqs))).toBeGreaterThan(1e-6);
    } finally {
      worker.dispose();
      trained.dispose();
    }
  }, 900_000);
});
