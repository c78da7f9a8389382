// `sinkflex serve` and `sinkflex gateway` (openServer, openGateway) dispose the engine they loaded on every
// path that fails after the weights were loaded: building the server or gateway (an unknown tool format),
// a broken tokenizer.json, optimizer state that does not fit the weights (loadEngine itself), a context
// limit past the model's positions; and on close. EmbeddedEngine.live
// counts the engines not yet disposed.
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openGateway } from "../../src/cli/commands/gateway.js";
import { openServer } from "../../src/cli/commands/serve.js";
import { EmbeddedEngine } from "../../src/engine/embedded.js";
import { writeSafetensors } from "../../src/model/safetensors.js";
import { qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import { stockCodec, tinyEngine } from "../rollout/helpers.js";

let root: string;
let dir: string;
let broken: string;
let badOptimizer: string;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "sinkflex-release-"));
  dir = join(root, "ck");
  const codec = stockCodec();
  const engine = tinyEngine(codec, 5, 512);
  engine.tokenizerDir = qwen3TokenizerDir();
  await engine.save(dir);
  engine.dispose();
  codec.vocab!.save(dir);
  broken = join(root, "broken");
  cpSync(dir, broken, { recursive: true });
  writeFileSync(join(broken, "tokenizer.json"), "{ not json");
  badOptimizer = join(root, "bad-optimizer");
  cpSync(dir, badOptimizer, { recursive: true });
  writeSafetensors(join(badOptimizer, "optimizer.safetensors"), [
    ["exp_avg", { shape: [3], data: new Float32Array(3) }],
    ["exp_avg_sq", { shape: [3], data: new Float32Array(3) }],
  ]);
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

const opens = [
  ["serve", (ck: string, o: Record<string, unknown>) => openServer(ck, o)],
  ["gateway", (ck: string, o: Record<string, unknown>) => openGateway(ck, o)],
] as const;

describe.each(opens)("%s releases its engine", (_name, open) => {
  it("when building the server fails (an unknown tool format)", async () => {
    const before = EmbeddedEngine.live;
    await expect(open(dir, { toolFormat: "smoke-signals" })).rejects.toThrow(/unknown tool format "smoke-signals"/);
    expect(EmbeddedEngine.live).toBe(before);
  });

  it("when the tokenizer cannot be read", async () => {
    const before = EmbeddedEngine.live;
    await expect(open(broken, {})).rejects.toThrow();
    expect(EmbeddedEngine.live).toBe(before);
  });

  it("when the checkpoint's optimizer state does not fit its weights (inside loadEngine)", async () => {
    const before = EmbeddedEngine.live;
    await expect(open(badOptimizer, {})).rejects.toThrow(/does not match this model's parameters/);
    expect(EmbeddedEngine.live).toBe(before);
  });

  it("when the context limit is past the model's positions", async () => {
    const before = EmbeddedEngine.live;
    await expect(open(dir, { maxContextTokens: 100_000 })).rejects.toThrow(/more than the model's 512 positions/);
    expect(EmbeddedEngine.live).toBe(before);
  });

  it("when it closes, and not before", async () => {
    const before = EmbeddedEngine.live;
    const { close } = await open(dir, { toolFormat: "hermes" });
    expect(EmbeddedEngine.live).toBe(before + 1);
    await close();
    expect(EmbeddedEngine.live).toBe(before);
  });
});
