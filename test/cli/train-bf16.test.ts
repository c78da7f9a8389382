// A run with model.dtype bf16 and no LoRA adapter trains every weight of a bf16 policy (through the
// engine's fp32 master copy): SFT and GRPO steps run, the SFT loss falls, and the checkpoints hold BF16
// weights; before, the config refused model.dtype bf16 without model.lora.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readSafetensorsHeader } from "../../src/model/safetensors.js";
import { train } from "../../src/pipeline/train.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { parityConfig, registerParityEnv } from "../pipeline/parity-env.js";

registerParityEnv();
const scratch = mkdtempSync(join(tmpdir(), "train-bf16-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("model.dtype bf16 without LoRA", () => {
  it("trains every weight: SFT and GRPO run, the SFT loss falls, checkpoints are BF16", async () => {
    // a pretrained checkpoint to start from: a short fp32 run's final policy
    const pre = parityConfig(join(scratch, "runs"), "pretrained");
    const start = await train(validateConfig({ ...pre, grpo: { ...pre.grpo, steps: 0 } }), { quiet: true });
    const base = parityConfig(join(scratch, "runs"), "bf16-full");
    const cfg = validateConfig({ ...base, model: { checkpoint: start.checkpoint!, dtype: "bf16" } });
    expect(cfg.model.dtype).toBe("bf16");
    const run = await train(cfg, { quiet: true });
    const metrics = readFileSync(join(run.runDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    const sft = metrics.filter((m) => m.stage === "sft" && typeof m.loss === "number").map((m) => m.loss as number);
    expect(sft.length).toBeGreaterThan(1);
    expect(sft[sft.length - 1]!).toBeLessThan(sft[0]!);
    expect(metrics.some((m) => m.stage === "grpo")).toBe(true);
    for (const f of ["final", "checkpoints/grpo-00003"]) {
      const header = readSafetensorsHeader(join(run.runDir, f, "model.safetensors"));
      expect(new Set([...header.entries.values()].map((t) => t.dtype)), f).toEqual(new Set(["BF16"]));
    }
    // the master travels with a checkpoint's optimizer state
    const opt = readSafetensorsHeader(join(run.runDir, "checkpoints/grpo-00003", "optimizer.safetensors"));
    expect(opt.entries.get("master")?.dtype).toBe("F32");
  }, 600_000);
});
