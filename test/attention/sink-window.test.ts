/**
 * The sink-window mask travels with the checkpoint: every save writes sinkflex_attention.json, and every
 * loader (loadEngine, the pipeline's loadPolicy, `sinkflex serve`'s openServer) runs the policy with the
 * mask it was trained with, refuses settings that differ from it (naming both), and loads a folder without
 * the file as before (full attention unless told). Real checkpoint folders on disk, a real HTTP server on
 * 127.0.0.1, the real Qwen3 tokenizer files.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from "vitest";
import { SINK_WINDOW_FILE, type AttentionChoice, type SinkWindow } from "../../src/attention/index.js";
import { openServer } from "../../src/cli/commands/serve.js";
import { createRandomModel, EmbeddedEngine, loadEngine } from "../../src/engine/embedded.js";
import { parseHfConfig } from "../../src/model/config.js";
import { qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import type { TrainConfig } from "../../src/pipeline/config.js";
import { loadPolicy } from "../../src/pipeline/policy.js";
import { stockCodec } from "../rollout/helpers.js";

const codec = stockCodec();
const TRAINED: SinkWindow = { window: 512, sinks: 4 };
let root: string;

function tinyModel(attention?: SinkWindow): EmbeddedEngine {
  const cfg = parseHfConfig({
    architectures: ["Qwen2ForCausalLM"], model_type: "qwen2", hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2,
    num_key_value_heads: 1, intermediate_size: 64, vocab_size: codec.size, rms_norm_eps: 1e-6, rope_theta: 10000,
    max_position_embeddings: 4096, tie_word_embeddings: true,
  });
  return createRandomModel(cfg, 3, { std: 0.5, attention, tokenizerDir: qwen3TokenizerDir() });
}

/** A checkpoint folder as the pipeline writes one: weights, config, tokenizer files, trimmed vocabulary. */
async function checkpoint(name: string, attention?: SinkWindow): Promise<string> {
  const dir = join(root, name);
  const engine = tinyModel(attention);
  await engine.save(dir);
  engine.dispose();
  codec.vocab!.save(dir);
  return dir;
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "sinkflex-sink-window-"));
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

describe("the sink-window mask in checkpoints", () => {
  it("sinkflex serve runs a checkpoint trained with a 512-token window with that window, not full attention", async () => {
    const dir = await checkpoint("windowed", TRAINED);
    const { server, close } = await openServer(dir, { modelName: "tiny", maxTokens: 16, maxContextTokens: 2048, maxBodyBytes: 64 * 1024 });
    try {
      const served = server.options.sampler as EmbeddedEngine;
      expect(served.model.attention).toEqual(TRAINED);
    } finally {
      await close();
    }
  }, 60_000);

  it("every save writes the mask, full attention included, and loadEngine restores it", async () => {
    const windowed = await checkpoint("saved-windowed", TRAINED);
    expect(JSON.parse(readFileSync(join(windowed, SINK_WINDOW_FILE), "utf8"))).toMatchObject(TRAINED);
    const back = loadEngine(windowed);
    expect(back.model.attention).toEqual(TRAINED);
    // Saved again (as train --resume's checkpoints are), the mask stays.
    await back.save(join(root, "saved-again"));
    back.dispose();
    expect(loadEngine(join(root, "saved-again")).model.attention).toEqual(TRAINED);

    const full = await checkpoint("saved-full");
    expect(JSON.parse(readFileSync(join(full, SINK_WINDOW_FILE), "utf8"))).toMatchObject({ window: 0, sinks: 0 });
  }, 60_000);

  it("the pipeline's loadPolicy (eval, train --resume) uses the checkpoint's mask and refuses a different one, naming both", async () => {
    const dir = await checkpoint("policy", TRAINED);
    expect(loadPolicy(dir).engine.model.attention).toEqual(TRAINED);
    expect(loadPolicy(dir, { window: 512, sinks: 4 }).engine.model.attention).toEqual(TRAINED);
    expect(() => loadPolicy(dir, { window: 1024, sinks: 4 })).toThrow(
      /was trained with sink-window attention \(window 512, sinks 4\).*but sink-window attention \(window 1024, sinks 4\) was asked for/,
    );
    expect(() => loadEngine(dir, { attention: { window: 0, sinks: 0 } })).toThrow(/window 512, sinks 4.*full attention \(window 0, sinks 0\)/);
  }, 60_000);

  it("a deliberate override (the demo's naive replay) runs a windowed checkpoint with full attention", async () => {
    const dir = await checkpoint("naive", TRAINED);
    const full = { window: 0, sinks: 0 };
    expect(loadPolicy(dir, { attention: full, override: true }).engine.model.attention).toEqual(full);
    expect(() => loadPolicy(dir, full)).toThrow(/window 512, sinks 4/);
  }, 60_000);

  it("a checkpoint without the file loads as before: full attention unless told", async () => {
    const dir = await checkpoint("no-file", TRAINED);
    rmSync(join(dir, SINK_WINDOW_FILE));
    expect(loadEngine(dir).model.attention).toEqual({ window: 0, sinks: 0 });
    expect(loadEngine(dir, { attention: { window: 16, sinks: 1 } }).model.attention).toEqual({ window: 16, sinks: 1 });
  }, 60_000);

  it("an engine refuses to load weights trained with another mask, and a broken file is a clear error", async () => {
    const dir = await checkpoint("conflict", TRAINED);
    const full = tinyModel();
    try {
      expect(() => full.loadSync(dir)).toThrow(/trained with sink-window attention \(window 512, sinks 4\).*this engine runs full attention \(window 0, sinks 0\)/);
    } finally {
      full.dispose();
    }
    writeFileSync(join(dir, SINK_WINDOW_FILE), JSON.stringify({ format: "sinkflex-sink-window-v1", window: -3, sinks: 4 }));
    expect(() => loadEngine(dir)).toThrow(/sinkflex_attention\.json: window \(W\) must be an integer >= 0/);
    writeFileSync(join(dir, SINK_WINDOW_FILE), "{not json");
    expect(() => loadEngine(dir)).toThrow(/sinkflex_attention\.json: not valid JSON/);
    expect(existsSync(dir)).toBe(true);
  }, 60_000);

  it("the config's attention section has the attention module's type", () => {
    expectTypeOf<TrainConfig["attention"]>().toEqualTypeOf<AttentionChoice>();
  });
});
