// KV eviction of the torch worker's sessions under the sink-window mask, as the embedded engine's: a
// checkpoint saved with window 6, sinks 2 and per-head sink logits; a 20-turn session (append 7 tokens,
// every third turn's first one pinned, then sample 9) holds its sink slots, pinned positions and last W
// positions only, and its sampled log-probs equal the worker's teacher-forced ones under the training mask
// with the same pinned positions (1e-5, fp32) and the embedded engine's on the same checkpoint (1e-4); a
// fork of the evicted session samples right; truncating past evicted keys fails at once with the embedded
// engine's message. Skipped with a printed reason when the Python side is missing (a failure when
// SINKFLEX_REQUIRE_TORCH=1).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { withSinkLogits } from "../../src/attention/index.js";
import { createRandomModel, EmbeddedEngine, loadEngine } from "../../src/engine/embedded.js";
import { openTorchEngine, type TorchSession } from "../../src/engine/torch/index.js";
import { randomTokens, tinyConfig } from "./helpers.js";
import { maxDiff, testDevice, torchUnavailable } from "./torch-helpers.js";

const ATTENTION = { window: 6, sinks: 2 };
const V = 64;
const missing = torchUnavailable();

function sinkLogitCheckpoint(): string {
  const dir = join(mkdtempSync(join(tmpdir(), "sinkflex-torch-evict-")), "ckpt");
  const base = createRandomModel(tinyConfig({ maxPositionEmbeddings: 1024 }), 23, { std: 0.15 });
  const cfg = base.weights.cfg;
  const weights = withSinkLogits(base.weights, Array.from({ length: cfg.numLayers }, () => Float32Array.from({ length: cfg.numHeads }, (_, h) => 0.3 * h - 0.5)));
  new EmbeddedEngine(weights, { attention: ATTENTION }).saveSync(dir);
  return dir;
}

function pinnedFlags(s: TorchSession): Uint8Array {
  const flags = new Uint8Array(s.length);
  for (const p of s.pinnedPositions) flags[p] = 1;
  return flags;
}

(missing ? describe.skip : describe)(`torch engine KV eviction${missing ? ` (${missing})` : ""}`, () => {
  it("a long session keeps sinks + pins + last W; sampled log-probs equal teacher-forced (1e-5) and the embedded engine's (1e-4); fork; truncate", async () => {
    const dir = sinkLogitCheckpoint();
    const emb = loadEngine(dir);
    const torch = await openTorchEngine({ model: dir, threads: 1, ...testDevice() });
    try {
      expect(torch.attention).toMatchObject({ ...ATTENTION, sinkLogit: true });
      const s = (await torch.session(randomTokens(1, 5, V))) as TorchSession;
      const sampled = new Map<number, number>();
      const kept: number[] = [];
      const perPosition = new Set<number>();
      for (let t = 0; t < 20; t++) {
        const pinned = Uint8Array.from({ length: 7 }, (_, i) => (t % 3 === 0 && i === 0 ? 1 : 0));
        await s.append(randomTokens(100 + t, 7, V), { pinned });
        const start = s.length;
        const r = await s.sample({ maxTokens: 9, seed: 1000 + t });
        r.logprobs.forEach((lp, i) => sampled.set(start + i, lp));
        const kv = await s.kvState();
        expect(kv.cached).toBe(s.length - 1);
        kept.push(kv.positions);
        perPosition.add(kv.bytes / kv.positions);
      }
      const pins = s.pinnedPositions;
      expect(pins.length).toBe(7);
      // constant once the window filled: K sink slots + the pins so far + the last W computed positions
      expect(kept).toEqual(kept.map((_, t) => ATTENTION.sinks + ATTENTION.window + pins.filter((p) => p < 5 + 16 * (t + 1)).length));
      expect(perPosition.size).toBe(1);
      const masks = { pinned: [pinnedFlags(s)] };
      const [own] = await torch.logprobs([s.tokens()], masks);
      const [ref] = await emb.logprobs([s.tokens()], masks);
      let worstOwn = 0;
      let worstRef = 0;
      for (const [pos, lp] of sampled) {
        worstOwn = Math.max(worstOwn, Math.abs(lp - own![pos - 1]!));
        worstRef = Math.max(worstRef, Math.abs(lp - ref![pos - 1]!));
      }
      expect(worstOwn).toBeLessThan(1e-5);
      expect(worstRef).toBeLessThan(1e-4);

      // a fork of the evicted session: its samples are the teacher-forced ones, the parent unchanged
      const child = s.fork();
      await child.append(randomTokens(7, 4, V));
      const cstart = child.length;
      const cr = await child.sample({ maxTokens: 12, seed: 5 });
      expect((await child.kvState()).positions).toBe(ATTENTION.sinks + ATTENTION.window + pins.length);
      const [clp] = await emb.logprobs([child.tokens()], { pinned: [pinnedFlags(child as TorchSession)] });
      expect(maxDiff([clp!.slice(cstart - 1)], [Float32Array.from(cr.logprobs)])).toBeLessThan(1e-4);
      expect((await s.kvState()).cached).toBe(s.length - 1);

      // truncate: within the window works; past evicted keys is the embedded engine's error, at once
      const n = s.length;
      const before = s.tokens();
      expect(() => s.truncate(n - 20)).toThrow(/truncate\(\d+\): the keys of positions \d+\.\.\d+ were evicted from this session's KV cache \(sink-window mask, window 6, sinks 2.*truncate to \d+ or more tokens/);
      expect(s.tokens()).toEqual(before);
      s.truncate(n - 1);
      const again = await s.sample({ maxTokens: 3, seed: 9 });
      expect(again.tokens.length).toBe(3);
      const [alp] = await torch.logprobs([s.tokens()], { pinned: [pinnedFlags(s)] });
      expect(maxDiff([alp!.slice(n - 2)], [Float32Array.from(again.logprobs)])).toBeLessThan(1e-5);
    } finally {
      torch.dispose();
    }
  }, 240_000);
});
