// The training pipeline on the torch engine (engine.backend "torch", CPU): a tiny run goes prepare -> SFT
// -> evaluation -> GRPO (with the KL reference on a second worker) -> evaluation, end to end, and its
// checkpoints are Hugging Face folders the worker wrote; its SFT losses are the
// embedded engine's on the same config. Skipped with a printed
// reason when the Python side is missing (a failure when SINKFLEX_REQUIRE_TORCH=1).
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { validateConfig } from "../../src/pipeline/config.js";
import { train } from "../../src/pipeline/train.js";
import { torchUnavailable } from "../engine/torch-helpers.js";
import { parityConfig, registerParityEnv } from "./parity-env.js";

registerParityEnv();
const missing = torchUnavailable();
const scratch = mkdtempSync(join(tmpdir(), "torch-train-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The parity pipeline's tiny config on the torch engine (no packed prefixes: the worker runs one document per sequence). */
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
  it("refuses packed prefixes, sink-window attention and worker options without the torch backend, naming the field", () => {
    const base = parityConfig("runs", "x");
    expect(() => validateConfig({ ...base, engine: { backend: "torch" } })).toThrow(/sft\.packPrefixes: packed prefixes need per-document attention[\s\S]*grpo\.packPrefixes/);
    expect(() => validateConfig({ ...base, engine: { device: "cuda" } })).toThrow(/engine\.device: only applies to engine\.backend "torch"/);
    expect(() => validateConfig({ ...base, engine: { backend: "torch", url: "http://x" } })).toThrow(/engine\.url: a worker address like unix:/);
    const torch = torchConfig("runs", "x");
    expect(() => validateConfig({ ...torch, attention: { mode: "sink-window", window: 64, sinks: 4 } })).toThrow(/attention\.mode: the torch engine runs full causal attention/);
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
});
