// The training pipeline on the torch engine (engine.backend "torch", CPU): a tiny run goes prepare -> SFT
// -> evaluation -> GRPO (with the KL reference on a second worker) -> evaluation, end to end, and its
// checkpoints are Hugging Face folders the worker wrote; its SFT losses are the
// embedded engine's on the same config. The same under sink-window attention (sinks 2, window 8) with
// packed prefixes: the worker runs the mask (its SFT losses are the embedded engine's under the mask,
// not under full attention) and reports it for the checkpoints it wrote. Skipped with a printed
// reason when the Python side is missing (a failure when SINKFLEX_REQUIRE_TORCH=1).
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { openTorchEngine } from "../../src/engine/torch/index.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { openPolicy } from "../../src/pipeline/policy.js";
import { train } from "../../src/pipeline/train.js";
import { torchUnavailable } from "../engine/torch-helpers.js";
import { parityConfig, registerParityEnv } from "./parity-env.js";

registerParityEnv();
const missing = torchUnavailable();
const scratch = mkdtempSync(join(tmpdir(), "torch-train-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The parity pipeline's tiny config on the torch engine, one document per sequence (the sink-window run below packs prefixes). */
export function torchConfig(runsDir: string, name: string) {
  const base = parityConfig(runsDir, name);
  return validateConfig({
    ...base,
    engine: { backend: "torch", threads: 1 },
    sft: { ...base.sft, packPrefixes: false },
    grpo: { ...base.grpo, packPrefixes: false },
  });
}

describe("the torch engine backend's config", () => {
  it("takes the sink window and packed prefixes, refuses re-probing during GRPO and worker options without the torch backend, naming the field", () => {
    const base = parityConfig("runs", "x");
    const torch = validateConfig({ ...base, engine: { backend: "torch" }, attention: { mode: "sink-window", window: 64, sinks: 4 } });
    expect(torch.sft.packPrefixes && torch.grpo.packPrefixes).toBe(true);
    expect(torch.attention).toMatchObject({ mode: "sink-window", window: 64, sinks: 4 });
    expect(() => validateConfig({ ...base, engine: { device: "cuda" } })).toThrow(/engine\.device: only applies to engine\.backend "torch"/);
    expect(() => validateConfig({ ...base, engine: { backend: "torch", url: "http://x" } })).toThrow(/engine\.url: a worker address like unix:/);
    expect(() => validateConfig({ ...torch, attention: { mode: "profile", window: 64, reprobeEvery: 3 } })).toThrow(/attention\.reprobeEvery: re-probing reads the policy's attention scores/);
    expect(validateConfig({ ...base }).engine).toEqual({ backend: "embedded", threads: 0 });
  });
});

(missing ? describe.skip : describe)(`the training pipeline on the torch engine${missing ? ` (${missing})` : ""}`, () => {
  it("runs SFT -> eval -> GRPO -> eval on CPU from model.init, saving worker-written checkpoints, with the embedded engine's SFT losses", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const result = await train(torchConfig(runsDir, "torch"), { quiet: true });
    expect(result.stopped).toBe(false);
    expect(result.evalBefore!.parity!.trials).toBe(4);
    expect(result.evalAfter!.parity!.trials).toBe(4);
    const metrics = readFileSync(join(result.runDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(metrics.find((r) => r.stage === "setup").parameters).toBeGreaterThan(0);
    const sft = metrics.filter((r) => r.stage === "sft");
    const grpo = metrics.filter((r) => r.stage === "grpo");
    expect(sft.length).toBeGreaterThan(0);
    expect(sft.every((r) => Number.isFinite(r.loss) && r.gradNorm > 0)).toBe(true);
    expect(grpo.map((r) => r.step)).toEqual([1, 2, 3]);
    expect(grpo.every((r) => r.trajectories === 8 && r.tokens.sampled > 0)).toBe(true);
    // The same SFT on the embedded engine (same fresh model, same batches): the same losses and norms.
    const embedded = await train(validateConfig({ ...torchConfig(runsDir, "embedded"), engine: { backend: "embedded" }, grpo: { ...torchConfig(runsDir, "e").grpo, enabled: false } }), { quiet: true, skipEval: true });
    const sftEmbedded = readFileSync(join(embedded.runDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l)).filter((r) => r.stage === "sft");
    expect(sftEmbedded.length).toBe(sft.length);
    sft.forEach((r, i) => {
      expect(Math.abs(r.loss - sftEmbedded[i].loss)).toBeLessThan(1e-4);
      expect(Math.abs(r.gradNorm - sftEmbedded[i].gradNorm) / sftEmbedded[i].gradNorm).toBeLessThan(1e-3);
    });
    // The worker wrote the checkpoints (its metadata: SFT's updates, then GRPO's on a fresh optimizer).
    const latest = readFileSync(join(result.runDir, "checkpoints", "latest"), "utf8").trim();
    const meta = JSON.parse(readFileSync(join(result.runDir, "checkpoints", latest, "sinkflex.json"), "utf8"));
    expect(meta.policyVersion).toBe(sft.length + meta.optimizerStep);
    expect(existsSync(join(result.runDir, "final", "model.safetensors"))).toBe(true);
    expect(existsSync(join(result.runDir, "final", "sinkflex-vocab.json"))).toBe(true);
    expect(JSON.parse(readFileSync(join(result.runDir, "status.json"), "utf8")).state).toBe("done");
  }, 600_000);

  it("runs SFT -> eval -> GRPO -> eval under sink-window attention (sinks 2, window 8) with packed prefixes, the worker running and reporting the mask", async () => {
    const runsDir = mkdtempSync(join(scratch, "runs-"));
    const windowed = (name: string, backend: "torch" | "embedded", attention: object) => {
      const base = torchConfig(runsDir, name);
      return validateConfig({ ...base, engine: backend === "torch" ? base.engine : { backend }, attention, sft: { ...base.sft, packPrefixes: true }, grpo: { ...base.grpo, packPrefixes: true } });
    };
    const mask = { mode: "sink-window", sinks: 2, window: 8 };
    const result = await train(windowed("torch-window", "torch", mask), { quiet: true });
    expect(result.stopped).toBe(false);
    expect(result.evalBefore!.parity!.trials).toBe(4);
    expect(result.evalAfter!.parity!.trials).toBe(4);
    const rows = (dir: string) => readFileSync(join(dir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    const metrics = rows(result.runDir);
    const sft = metrics.filter((r) => r.stage === "sft");
    const grpo = metrics.filter((r) => r.stage === "grpo");
    expect(sft.length).toBeGreaterThan(0);
    expect(grpo.map((r) => r.step)).toEqual([1, 2, 3]);
    expect(grpo.every((r) => r.trajectories === 8 && r.tokens.sampled > 0 && Number.isFinite(r.loss))).toBe(true);
    // The worker reports the mask of the checkpoints it wrote, and the run loads them with it.
    const final = join(result.runDir, "final");
    expect(JSON.parse(readFileSync(join(final, "sinkflex_attention.json"), "utf8"))).toMatchObject({ window: 8, sinks: 2 });
    const worker = await openTorchEngine({ model: final, threads: 1 });
    try {
      expect(worker.attention).toMatchObject({ window: 8, sinks: 2, sinkLogit: false });
    } finally {
      worker.dispose();
    }
    await expect(openPolicy(final, { backend: "torch", threads: 1 }, { window: 16, sinks: 2 })).rejects.toThrow(/was saved with window 8, sinks 2 \(its sinkflex_attention\.json[^)]*\), and this run asks for window 16, sinks 2/);
    // The worker trained under the mask: its SFT losses are the embedded engine's under the same mask
    // (same fresh model, same packed batches), and not the ones under full attention.
    const sftOf = async (name: string, attention: object) => {
      const cfg = windowed(name, "embedded", attention);
      const r = await train(validateConfig({ ...cfg, grpo: { ...cfg.grpo, enabled: false } }), { quiet: true, skipEval: true });
      return rows(r.runDir).filter((x) => x.stage === "sft");
    };
    const embedded = await sftOf("embedded-window", mask);
    expect(embedded.length).toBe(sft.length);
    sft.forEach((r, i) => {
      expect(Math.abs(r.loss - embedded[i].loss)).toBeLessThan(1e-4);
      expect(Math.abs(r.gradNorm - embedded[i].gradNorm) / embedded[i].gradNorm).toBeLessThan(1e-3);
    });
    const full = await sftOf("embedded-full", { mode: "full" });
    expect(Math.max(...sft.map((r, i) => Math.abs(r.loss - full[i].loss)))).toBeGreaterThan(1e-3);
  }, 900_000);
});
