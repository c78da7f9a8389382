// safetensors and checkpoint folders: F32/BF16/F16 round trips, sharded sets, atomic saves, clear errors.
import { describe, expect, it } from "vitest";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CheckpointError, loadCheckpoint, saveCheckpoint } from "../../src/model/checkpoint.js";
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16, readSafetensors, readSafetensorsDir, SafetensorsError,
  writeSafetensors, writeSafetensorsDir, type TensorMap } from "../../src/model/safetensors.js";
import { Rng } from "../../src/core/index.js";
import { FIXTURES } from "./fixtures.js";

const tmp = () => mkdtempSync(join(tmpdir(), "sinkflex-st-"));

function randomTensors(seed: number): TensorMap {
  const rng = new Rng(seed, "xoshiro128**");
  const m: TensorMap = new Map();
  for (const [name, shape] of [["a.weight", [7, 5]], ["b.bias", [3]], ["c", [2, 3, 4]]] as const) {
    const n = shape.reduce((x, y) => x * y, 1);
    m.set(name, { shape: [...shape], data: Float32Array.from({ length: n }, () => rng.normal()) });
  }
  return m;
}

describe("dtype conversions", () => {
  it("bf16 and f16 round to nearest and keep specials", () => {
    expect(bf16ToF32(f32ToBf16(1))).toBe(1);
    expect(bf16ToF32(f32ToBf16(-2.5))).toBe(-2.5);
    expect(Number.isNaN(bf16ToF32(f32ToBf16(NaN)))).toBe(true);
    expect(f16ToF32(f32ToF16(1))).toBe(1);
    expect(f16ToF32(f32ToF16(65504))).toBe(65504);
    expect(f16ToF32(f32ToF16(1e6))).toBe(Infinity);
    expect(f16ToF32(f32ToF16(2 ** -24))).toBe(2 ** -24); // smallest subnormal
    expect(f16ToF32(f32ToF16(1 + 2 ** -11))).toBe(1); // tie -> even
    expect(f16ToF32(f32ToF16(1 + 3 * 2 ** -11))).toBe(1 + 2 ** -9);
    const rng = new Rng(1, "xoshiro128**");
    for (let i = 0; i < 1000; i++) {
      const x = rng.normal() * 10;
      expect(Math.abs(bf16ToF32(f32ToBf16(x)) - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -8);
      expect(Math.abs(f16ToF32(f32ToF16(x)) - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -11);
    }
  });
});

describe("safetensors files", () => {
  it.each([["F32", 0], ["BF16", 2 ** -8], ["F16", 2 ** -11]] as const)("round-trips %s", (dtype, tol) => {
    const dir = tmp();
    const t = randomTensors(3);
    writeSafetensors(join(dir, "x.safetensors"), t, dtype);
    const back = readSafetensors(join(dir, "x.safetensors"));
    for (const [name, v] of t) {
      const b = back.get(name)!;
      expect(b.shape).toEqual(v.shape);
      for (let i = 0; i < v.data.length; i++) expect(Math.abs(b.data[i]! - v.data[i]!)).toBeLessThanOrEqual(Math.abs(v.data[i]!) * tol);
    }
  });

  it("writes and reads sharded sets with an index", () => {
    const dir = tmp();
    const t = randomTensors(4);
    const files = writeSafetensorsDir(dir, t, { maxShardBytes: 100 });
    expect(files).toContain("model.safetensors.index.json");
    expect(files.filter((f) => f.endsWith(".safetensors")).length).toBe(3);
    const index = JSON.parse(readFileSync(join(dir, "model.safetensors.index.json"), "utf8"));
    expect(Object.keys(index.weight_map).sort()).toEqual([...t.keys()].sort());
    const back = readSafetensorsDir(dir);
    for (const [name, v] of t) expect(back.get(name)!.data).toEqual(v.data);
  });

  it("says what is wrong with a broken file", () => {
    const dir = tmp();
    writeFileSync(join(dir, "bad.safetensors"), Buffer.from([1, 2, 3]));
    expect(() => readSafetensors(join(dir, "bad.safetensors"))).toThrow(SafetensorsError);
    expect(() => readSafetensorsDir(dir)).toThrow(/neither model.safetensors nor/);
  });
});

describe("checkpoint folders", () => {
  it("loads a transformers checkpoint and re-saves it (F32, BF16, sharded) atomically", () => {
    const ck = loadCheckpoint(join(FIXTURES, "llama-tiny", "checkpoint"));
    const dir = tmp();
    const out = join(dir, "ckpt");
    writeFileSync(join(dir, "tokenizer.json"), "{}");
    saveCheckpoint(out, ck.cfg, ck.entries, ck.data, { tokenizerFrom: dir, meta: { policyVersion: 3 } });
    expect(readdirSync(out).sort()).toEqual(["config.json", "generation_config.json", "model.safetensors", "sinkflex.json", "tokenizer.json"]);
    const again = loadCheckpoint(out);
    expect(again.data).toEqual(ck.data);
    expect(again.meta?.policyVersion).toBe(3);
    expect(readdirSync(dir).filter((f) => f.startsWith("."))).toEqual([]); // no temp folders left

    saveCheckpoint(out, ck.cfg, ck.entries, ck.data, { dtype: "BF16", maxShardBytes: 64 * 1024 });
    expect(existsSync(join(out, "model.safetensors.index.json"))).toBe(true);
    expect(existsSync(join(out, "tokenizer.json"))).toBe(false); // replaced whole
    const bf = loadCheckpoint(out);
    expect(JSON.parse(readFileSync(join(out, "config.json"), "utf8")).torch_dtype).toBe("bfloat16");
    let worst = 0;
    for (let i = 0; i < ck.data.length; i++) worst = Math.max(worst, Math.abs(bf.data[i]! - ck.data[i]!) - Math.abs(ck.data[i]!) * 2 ** -8);
    expect(worst).toBeLessThanOrEqual(0);
  });

  it("reports tensors that are not part of a Qwen2/Llama decoder", () => {
    const src = join(FIXTURES, "qwen2-tiny", "checkpoint");
    const out = join(tmp(), "c");
    const ck = loadCheckpoint(src);
    saveCheckpoint(out, ck.cfg, ck.entries, ck.data);
    const tensors = readSafetensors(join(out, "model.safetensors"));
    tensors.set("model.layers.0.mlp.experts.0.weight", { shape: [2], data: new Float32Array(2) });
    writeSafetensors(join(out, "model.safetensors"), tensors);
    expect(() => loadCheckpoint(out)).toThrow(/unexpected tensors model.layers.0.mlp.experts.0.weight/);
  });

  it("reports a tensor the config needs but the weights lack", () => {
    const ck = loadCheckpoint(join(FIXTURES, "qwen2-tiny", "checkpoint"));
    const out = join(tmp(), "c");
    saveCheckpoint(out, { ...ck.cfg, numLayers: 1 }, ck.entries.filter((e) => !e.name.includes("layers.1.")), ck.data);
    const cfg = JSON.parse(readFileSync(join(out, "config.json"), "utf8"));
    writeFileSync(join(out, "config.json"), JSON.stringify({ ...cfg, num_hidden_layers: 2 }));
    expect(() => loadCheckpoint(out)).toThrow(CheckpointError);
    expect(() => loadCheckpoint(out)).toThrow(/model.layers.1.input_layernorm.weight" is missing/);
  });
});
