/**
 * Writes checkpoints with sinkflex for scripts/make-fixtures.py's `check` mode (transformers must load
 * them and produce the same logits). Run by hand, not by the test suite:
 *
 *   npx tsx test/model/export-check.ts /tmp/sinkflex-export
 *   python scripts/make-fixtures.py check /tmp/sinkflex-export/<case>/checkpoint \
 *       /tmp/sinkflex-export/<case>/ids.json /tmp/sinkflex-export/<case>/logits.safetensors
 *
 * Cases: the two fixture models after 3 AdamW steps (Llama in F32; Qwen2 in BF16, sharded), and a fresh
 * random Llama with q/k/v biases and linear RoPE scaling, and a random Qwen3 in F16.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createRandomModel, loadEngine, type EmbeddedEngine, type EngineSaveOptions } from "../../src/engine/embedded.js";
import { packSequences, trainForward, TrainWorkspace } from "../../src/model/transformer.js";
import { writeSafetensors } from "../../src/model/safetensors.js";
import { FIXTURES, loadFixture } from "./fixtures.js";
import { meanCrossEntropy, randomTokens, tinyConfig } from "../engine/helpers.js";

const out = process.argv[2] ?? "/tmp/sinkflex-export";

async function exportCase(name: string, engine: EmbeddedEngine, ids: number[][], save: EngineSaveOptions): Promise<void> {
  const dir = join(out, name);
  mkdirSync(dir, { recursive: true });
  const ckpt = join(dir, "checkpoint");
  await engine.save(ckpt, save);
  const reloaded = loadEngine(ckpt, { kernels: engine.kernels }); // what sinkflex itself reads back
  const ws = new TrainWorkspace(reloaded.config);
  trainForward(reloaded.model, ws, packSequences(ids), false);
  const [B, T, V] = [ids.length, ids[0]!.length, reloaded.config.vocabSize];
  writeSafetensors(join(dir, "logits.safetensors"), [["logits", { shape: [B, T, V], data: ws.logits.slice(0, B * T * V) }]]);
  writeFileSync(join(dir, "ids.json"), JSON.stringify(ids));
  console.log(`${name}: wrote ${ckpt} (${save.dtype ?? "F32"}${save.maxShardBytes ? ", sharded" : ""})`);
}

for (const [name, save] of [["llama-tiny", {}], ["qwen2-tiny", { dtype: "BF16", maxShardBytes: 100_000 }]] as const) {
  const fx = loadFixture(name);
  const engine = loadEngine(join(FIXTURES, name, "checkpoint"));
  for (let i = 0; i < 3; i++) {
    await engine.forwardBackward(fx.inputIds, meanCrossEntropy());
    await engine.optimStep({ lr: 1e-2, weightDecay: 0.1 });
  }
  await exportCase(`${name}-trained`, engine, fx.inputIds, save);
}
const q3 = tinyConfig({ arch: "qwen3", qkvBias: false, headDim: 16 });
await exportCase("qwen3-random", createRandomModel(q3, 8, { std: 0.1 }), [randomTokens(3, 16, 64)], { dtype: "F16" });
const cfg = tinyConfig({ arch: "llama", qkvBias: true, ropeScaling: { type: "linear", factor: 2 }, tieWordEmbeddings: true });
await exportCase("llama-bias-linear-rope", createRandomModel(cfg, 5, { std: 0.1 }), [randomTokens(1, 20, 64), randomTokens(2, 20, 64)], {});
