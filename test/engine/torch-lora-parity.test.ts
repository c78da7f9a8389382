// LoRA on the torch engine (peft in the worker) against the embedded engine's LoRA, on one tiny
// checkpoint under window 6, sinks 2 (fp32, CPU): an adapter trained one step by the embedded engine and
// saved loads in the worker with the same log-probs (1e-4); one identical forwardBackward + AdamW step on
// both gives the same gradient norm and the same adapter (A and B within 1e-5); the worker saves the
// adapter in the embedded engine's PEFT files (the same adapter_config.json, the same tensor names,
// shapes and F32 dtype in adapter_model.safetensors), which the embedded engine loads with the worker's
// log-probs; enableLora on a loaded checkpoint starts at its log-probs and trains the adapter only.
// Skipped with a printed reason when the Python side (or peft) is missing (a failure when SINKFLEX_REQUIRE_TORCH=1).
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createRandomModel, EmbeddedEngine, loadEngine } from "../../src/engine/embedded.js";
import { defaultPython, openTorchEngine } from "../../src/engine/torch/index.js";
import { createLoraAdapter, readSafetensors } from "../../src/model/index.js";
import { meanCrossEntropy, randomTokens, tinyConfig } from "./helpers.js";
import { maxDiff, testDevice, torchUnavailable } from "./torch-helpers.js";

const ATTENTION = { window: 6, sinks: 2 };
const LORA = { rank: 4, alpha: 8, targets: ["q", "k", "v", "o", "gate", "up", "down"] as const };
const HP = { lr: 1e-2, maxGradNorm: 1, weightDecay: 0.01 };
const missing = torchUnavailable() ?? peftUnavailable();

function peftUnavailable(): string | null {
  const r = spawnSync(defaultPython(), ["-c", "import peft"], { encoding: "utf8", timeout: 60_000 });
  if (r.status === 0) return null;
  if (process.env.SINKFLEX_REQUIRE_TORCH === "1") throw new Error(`SINKFLEX_REQUIRE_TORCH=1 but ${defaultPython()} cannot import peft; pip install "./python[lora]"`);
  console.warn(`skipping the torch LoRA tests: ${defaultPython()} cannot import peft`);
  return "no peft";
}

function tensors(dir: string): Map<string, { shape: number[]; data: Float32Array }> {
  return readSafetensors(join(dir, "adapter_model.safetensors")) as Map<string, { shape: number[]; data: Float32Array }>;
}

(missing ? describe.skip : describe)(`LoRA on the torch engine${missing ? ` (${missing})` : ""}`, () => {
  it("an embedded adapter loads with the same log-probs, one identical step gives the same adapter, and saves are the embedded engine's files", async () => {
    const root = mkdtempSync(join(tmpdir(), "sinkflex-torch-lora-"));
    const base = join(root, "base");
    new EmbeddedEngine(createRandomModel(tinyConfig(), 21, { std: 0.15 }).weights, { attention: ATTENTION }).saveSync(base);
    const seqs = [randomTokens(1, 30, 64), randomTokens(2, 17, 64), randomTokens(3, 9, 64)];
    const pinned = seqs.map((s) => Uint8Array.from(s, (_, t) => (t === 3 ? 1 : 0)));

    // The embedded engine's adapter after one step (B no longer 0), saved in PEFT's files.
    const emb = loadEngine(base);
    emb.enableLora(createLoraAdapter(emb.config, { ...LORA, targets: [...LORA.targets] }, 5));
    await emb.forwardBackward(seqs, meanCrossEntropy());
    await emb.optimStep(HP);
    const adapter = join(root, "adapter-embedded");
    emb.saveSync(adapter);

    const torch = await openTorchEngine({ model: adapter, threads: 1, ...testDevice() });
    try {
      expect(torch.lora).toMatchObject({ rank: 4, alpha: 8, targets: [...LORA.targets] });
      expect(torch.attention).toMatchObject(ATTENTION);
      const fresh = loadEngine(adapter); // the adapter folder on the embedded engine: a fresh AdamW, as the worker's
      expect(maxDiff(await fresh.logprobs(seqs, { pinned }), await torch.logprobs(seqs, { pinned }))).toBeLessThan(1e-4);
      expect(maxDiff(await fresh.logprobs(seqs), await loadEngine(base).logprobs(seqs))).toBeGreaterThan(1e-3); // the adapter matters

      // One identical step: the same gradient norm, then the same adapter.
      const more = [randomTokens(4, 25, 64), randomTokens(5, 12, 64)];
      await fresh.forwardBackward(more, meanCrossEntropy());
      const ga = await fresh.optimStep(HP);
      await torch.forwardBackward(more, meanCrossEntropy());
      const gb = await torch.optimStep(HP);
      expect(Math.abs(ga.gradNorm - gb.gradNorm) / ga.gradNorm).toBeLessThan(1e-4);
      const savedE = join(root, "after-embedded");
      const savedT = join(root, "after-torch");
      fresh.saveSync(savedE);
      await torch.save(savedT);
      const te = tensors(savedE);
      const tt = tensors(savedT);
      expect([...tt.keys()].sort()).toEqual([...te.keys()].sort());
      expect(te.size).toBe(2 * 7 * tinyConfig().numLayers);
      let worst = 0;
      for (const [name, t] of te) {
        expect(tt.get(name)!.shape).toEqual(t.shape);
        expect(tt.get(name)!.data).toBeInstanceOf(Float32Array);
        worst = Math.max(worst, maxDiff([t.data], [tt.get(name)!.data]));
      }
      expect(worst).toBeLessThan(1e-5);
      // the same adapter_config.json, byte for byte (base folder, rank, alpha, targets, policy version and step)
      expect(readFileSync(join(savedT, "adapter_config.json"), "utf8")).toBe(readFileSync(join(savedE, "adapter_config.json"), "utf8"));
      // the embedded engine loads the worker's adapter with the worker's log-probs
      expect(maxDiff(await loadEngine(savedT).logprobs(seqs, { pinned }), await torch.logprobs(seqs, { pinned }))).toBeLessThan(1e-4);
    } finally {
      torch.dispose();
    }

    // enableLora on a full checkpoint: the base's log-probs at first; only the adapter trains.
    const t2 = await openTorchEngine({ model: base, threads: 1, ...testDevice() });
    try {
      const before = await t2.logprobs(seqs);
      await t2.enableLora({ rank: 2, alpha: 4, targets: ["q", "v"] });
      expect(t2.lora).toMatchObject({ rank: 2, targets: ["q", "v"], trainable: tinyConfig().numLayers * ((2 * 32 + 32 * 2) + (2 * 32 + 16 * 2)) }); // q: A [2, 32], B [32, 2]; v: B [16, 2]
      expect(maxDiff(before, await t2.logprobs(seqs))).toBeLessThan(1e-6);
      await t2.forwardBackward(seqs, meanCrossEntropy());
      await t2.optimStep(HP);
      const out = join(root, "enabled");
      await t2.save(out);
      expect(JSON.parse(readFileSync(join(out, "adapter_config.json"), "utf8"))).toMatchObject({ r: 2, lora_alpha: 4, target_modules: ["q_proj", "v_proj"], base_model_name_or_path: base });
      expect(maxDiff(await loadEngine(out).logprobs(seqs), await t2.logprobs(seqs))).toBeLessThan(1e-4);
    } finally {
      t2.dispose();
    }
  }, 300_000);
});
