// KV eviction of the embedded engine's sessions under the sink-window mask, on every kernel set: a
// 30-turn session of over a thousand tokens holds a flat number of KV blocks (its K sink slots and last W
// positions) while the pool's storage never grows; its sampled log-probs equal the teacher-forced ones of
// the training mask (1e-5, fp32); forks of an evicted session and batched decoding give what single
// sessions give; truncating within the window works and truncating past evicted keys is a clear error;
// pinned positions (append(tokens, { pinned })) keep their blocks and are read by every later query, so
// sampled log-probs equal the teacher-forced ones under the same mask with the same pinned positions.
import { describe, expect, it } from "vitest";
import { createRandomModel, type EmbeddedEngine, type EmbeddedSession } from "../../src/engine/embedded.js";
import type { Kernels } from "../../src/kernels/index.js";
import { kernelSets } from "../model/fixtures.js";
import { randomTokens, tinyConfig } from "./helpers.js";

const kernels = await kernelSets();
const V = 64;
const MASK = { window: 24, sinks: 3 };
const BS = 8;
/** The blocks one session may hold after a call returns: ceil((K + W) / blockSize) + 2. */
const BOUND = Math.ceil((MASK.sinks + MASK.window) / BS) + 2;

function engineOn(k: Kernels, evictKv = true): EmbeddedEngine {
  return createRandomModel(tinyConfig({ maxPositionEmbeddings: 4096 }), 31, {
    kernels: k, std: 0.2, blockSize: BS, attention: MASK, evictKv,
  });
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

interface Turns {
  /** Sampled log-probs by position of the sampled token. */
  sampled: Map<number, number>;
  usedBlocks: number[];
  storageBytes: number[];
}

/** `turns` turns of (append 20 tokens, sample 20 tokens); records blocks held after each turn. */
async function converse(engine: EmbeddedEngine, s: EmbeddedSession, turns: number, seed: number): Promise<Turns> {
  const out: Turns = { sampled: new Map(), usedBlocks: [], storageBytes: [] };
  for (let t = 0; t < turns; t++) {
    await s.append(randomTokens(seed * 100 + t, 20, V));
    const start = s.length;
    const r = await s.sample({ maxTokens: 20, seed: seed * 1000 + t });
    r.logprobs.forEach((lp, i) => out.sampled.set(start + i, lp));
    out.usedBlocks.push(engine.pool.usedBlocks);
    out.storageBytes.push(engine.pool.bytes);
  }
  return out;
}

describe.each(kernels.map((k) => [k.name, k] as const))("KV eviction on %s kernels", (_n, k) => {
  it("a 30-turn session holds a flat number of blocks; sampled log-probs equal teacher-forced ones (1e-5)", async () => {
    const engine = engineOn(k);
    const s = engine.sessionSync(randomTokens(1, 12, V));
    const run = await converse(engine, s, 30, 1);
    expect(s.length).toBe(12 + 30 * 40);
    // flat after the first W tokens: the session's blocks stay within the bound, the storage never grows
    for (const used of run.usedBlocks) expect(used).toBeLessThanOrEqual(BOUND);
    expect(s.heldBlocks).toBeLessThanOrEqual(BOUND);
    expect(new Set(run.storageBytes).size).toBe(1);
    expect(s.kvBytes).toBe(s.heldBlocks * engine.pool.blockBytes);
    expect(s.blockIds.filter((b) => b === -1).length).toBeGreaterThan(100); // the evicted blocks' holes
    // the training mask's teacher-forced log-probs on the same tokens
    const [lp] = await engine.logprobs([s.tokens()]);
    let worst = 0;
    for (const [pos, x] of run.sampled) worst = Math.max(worst, Math.abs(x - lp![pos - 1]!));
    expect(worst).toBeLessThan(1e-5);
    engine.dispose();
  }, 120_000);

  it("pinned positions: a 30-turn session keeps their blocks; sampled log-probs equal teacher-forced ones with the same pins (1e-5)", async () => {
    const engine = engineOn(k);
    const s = engine.sessionSync(randomTokens(5, 12, V));
    // a long first observation (a prefill of several pieces) with two pins, then 30 turns pinning their
    // observation's first token on every third turn
    const first = randomTokens(6, 90, V);
    const firstPins = new Uint8Array(90);
    firstPins[5] = 1; // position 17: leaves the window during the prefill itself
    firstPins[60] = 1; // position 72
    await s.append(first, { pinned: firstPins });
    const sampled = new Map<number, number>();
    for (let t = 0; t < 30; t++) {
      const pins = new Uint8Array(20);
      if (t % 3 === 0) pins[0] = 1;
      await s.append(randomTokens(600 + t, 20, V), { pinned: pins });
      const start = s.length;
      const r = await s.sample({ maxTokens: 20, seed: 9000 + t });
      r.logprobs.forEach((lp, i) => sampled.set(start + i, lp));
      expect(s.heldBlocks).toBeLessThanOrEqual(BOUND + s.pinnedPositions.length);
    }
    expect(s.pinnedPositions.length).toBe(12);
    for (const p of s.pinnedPositions) expect(s.blockIds[Math.floor(p / BS)]).not.toBe(-1);
    expect(s.blockIds.filter((b) => b === -1).length).toBeGreaterThan(100);
    const flags = new Uint8Array(s.length);
    for (const p of s.pinnedPositions) flags[p] = 1;
    const [withPins] = await engine.logprobs([s.tokens()], { pinned: [flags] });
    const [withoutPins] = await engine.logprobs([s.tokens()]);
    let worst = 0;
    let unpinnedGap = 0;
    for (const [pos, x] of sampled) {
      worst = Math.max(worst, Math.abs(x - withPins![pos - 1]!));
      unpinnedGap = Math.max(unpinnedGap, Math.abs(x - withoutPins![pos - 1]!));
    }
    expect(worst).toBeLessThan(1e-5);
    expect(unpinnedGap).toBeGreaterThan(1e-3); // the pins change what the session computes
    // a fork keeps the pins: it samples what a fresh session with the same tokens and pins samples
    const kid = s.fork();
    const fresh = engine.sessionSync();
    await fresh.append(s.tokens(), { pinned: flags });
    const want = await fresh.sample({ maxTokens: 24, seed: 4242 });
    const got = await kid.sample({ maxTokens: 24, seed: 4242 });
    expect(got.tokens).toEqual(want.tokens);
    expect(maxDiff(got.logprobs, want.logprobs)).toBeLessThan(1e-5);
    expect(() => s.appendSync([1, 2], { pinned: [1] })).toThrow(/pinned has 1 flags for 2 tokens/);
    engine.dispose();
  }, 120_000);

  it("without eviction the same session holds every block and samples the same log-probs", async () => {
    const kept = engineOn(k, false);
    const evicting = engineOn(k);
    const a = kept.sessionSync(randomTokens(2, 12, V));
    const b = evicting.sessionSync(randomTokens(2, 12, V));
    const ra = await converse(kept, a, 6, 2);
    const rb = await converse(evicting, b, 6, 2);
    expect(b.tokens()).toEqual(a.tokens());
    expect(maxDiff([...rb.sampled.values()], [...ra.sampled.values()])).toBeLessThan(1e-5);
    expect(kept.pool.usedBlocks).toBe(Math.ceil((a.length - 1) / BS));
    expect(evicting.pool.usedBlocks).toBeLessThanOrEqual(BOUND);
    kept.dispose();
    evicting.dispose();
  }, 60_000);

  it("forks of an evicted session share its blocks and sample what a fresh session on the same tokens samples", async () => {
    const engine = engineOn(k);
    const s = engine.sessionSync(randomTokens(3, 12, V));
    await converse(engine, s, 8, 3);
    const before = engine.pool.usedBlocks;
    const kids = [s.fork(), s.fork()];
    expect(engine.pool.usedBlocks).toBe(before); // shared, not copied
    const fresh = engine.sessionSync(s.tokens());
    const want = await fresh.sample({ maxTokens: 30, seed: 77 });
    fresh.close();
    const got = await kids[0]!.sample({ maxTokens: 30, seed: 77 });
    expect(got.tokens).toEqual(want.tokens);
    expect(maxDiff(got.logprobs, want.logprobs)).toBeLessThan(1e-5);
    // the parent is untouched by its child's growth
    const parentNext = await s.sample({ maxTokens: 30, seed: 77 });
    expect(parentNext.tokens).toEqual(want.tokens);
    // every session stays within the bound; three sessions, some blocks shared
    for (const x of [s, ...kids]) expect(x.heldBlocks).toBeLessThanOrEqual(BOUND);
    expect(engine.pool.usedBlocks).toBeLessThanOrEqual(3 * BOUND);
    engine.dispose();
  }, 60_000);

  it("batched decoding (sampleBatch) of evicted sessions equals each session alone", async () => {
    const engine = engineOn(k);
    const root = engine.sessionSync(randomTokens(4, 12, V));
    await converse(engine, root, 5, 4);
    const group = [root.fork(), root.fork(), root.fork()];
    await group[1]!.append(randomTokens(40, 7, V)); // unequal lengths decode together
    const params = group.map((_, i) => ({ maxTokens: 40, seed: 500 + i, temperature: 0.9 }));
    const solo = [];
    for (let i = 0; i < group.length; i++) {
      const f = group[i]!.fork();
      solo.push(await f.sample(params[i]!));
      f.close();
    }
    const batch = await engine.sampleBatch(group, params);
    for (let i = 0; i < group.length; i++) {
      expect(batch[i]!.tokens).toEqual(solo[i]!.tokens);
      expect(maxDiff(batch[i]!.logprobs, solo[i]!.logprobs)).toBeLessThan(1e-5);
      expect(group[i]!.heldBlocks).toBeLessThanOrEqual(BOUND);
    }
    engine.dispose();
  }, 60_000);

  it("truncate within kvRewind works; truncate before evicted keys names them and leaves the session usable", async () => {
    const engine = createRandomModel(tinyConfig({ maxPositionEmbeddings: 4096 }), 31, {
      kernels: k, std: 0.2, blockSize: BS, attention: MASK, kvRewind: 16,
    });
    const s = engine.sessionSync(randomTokens(5, 12, V));
    await converse(engine, s, 6, 5);
    const cut = s.length;
    const first = await s.sample({ maxTokens: 16, seed: 9 });
    s.truncate(cut); // a retried turn: 16 tokens back, their keys are held
    const again = await s.sample({ maxTokens: 16, seed: 9 });
    expect(again.tokens).toEqual(first.tokens);
    expect(maxDiff(again.logprobs, first.logprobs)).toBeLessThan(1e-5);
    expect(s.heldBlocks).toBeLessThanOrEqual(Math.ceil((MASK.sinks + MASK.window + 16) / BS) + 2);
    const len = s.length;
    expect(() => s.truncate(40)).toThrow(/truncate\(40\): the keys of positions \d+\.\.\d+ were evicted/);
    expect(s.length).toBe(len); // nothing changed
    const more = await s.sample({ maxTokens: 5, seed: 1 });
    const [lp] = await engine.logprobs([s.tokens()]);
    expect(maxDiff(more.logprobs, lp!.subarray(len - 1))).toBeLessThan(1e-5);
    s.truncate(0); // dropping everything is always possible
    expect(s.heldBlocks).toBe(0);
    engine.dispose();
  }, 60_000);

  it("without kvRewind, dropping the sampled token not yet computed works; going further back names the earliest cut", async () => {
    const engine = engineOn(k);
    const s = engine.sessionSync(randomTokens(6, 12, V));
    await converse(engine, s, 6, 6);
    const first = await s.sample({ maxTokens: 1, seed: 3 });
    const n = s.length;
    s.truncate(n - 1);
    const again = await s.sample({ maxTokens: 1, seed: 3 });
    expect(again.tokens).toEqual(first.tokens);
    expect(maxDiff(again.logprobs, first.logprobs)).toBeLessThan(1e-5);
    expect(() => s.truncate(n - 40)).toThrow(/were evicted .* truncate to \d+ or more tokens/);
    engine.dispose();
  }, 60_000);
});
