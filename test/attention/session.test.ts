// Rollout and trainer agree under the canonical mask: tokens sampled under K sink slots + a window W
// (+ pinned keys, + a second document) have sampling log-probs equal to the engine's teacher-forced
// log-probs under the same mask description, within 1e-5, on every kernel set. Engine sessions under a
// window hold K + W rows; the masked session (pinned keys, documents) holds exactly the keys the mask
// keeps for the last query, so it stays within K + pinned + W entries.
import { describe, expect, it } from "vitest";
import { createRandomModel, type EmbeddedEngine } from "../../src/engine/embedded.js";
import { loadNativeKernels, referenceKernels, type Kernels } from "../../src/kernels/index.js";
import { documentPositions, keptKeys, MaskedSession, type CanonicalMask } from "../../src/attention/index.js";
import { randomTokens, tinyConfig } from "./helpers.js";

const native = loadNativeKernels();
const kernelSets: Kernels[] = native ? [referenceKernels, native] : [referenceKernels];
const V = 64;

async function teacherForced(engine: EmbeddedEngine, tokens: number[], mask: CanonicalMask): Promise<Float32Array> {
  const [lp] = await engine.logprobs([tokens], { docIds: [mask.docIds!], pinned: [mask.pinned!] });
  return lp!;
}

function maxDiff(sampled: number[], teacher: Float32Array, first: number): number {
  let d = 0;
  sampled.forEach((x, i) => (d = Math.max(d, Math.abs(x - teacher[first - 1 + i]!))));
  return d;
}

describe.each(kernelSets.map((k) => [k.name, k] as const))("masked sessions on %s kernels", (_n, k) => {
  it("engine sessions: sampling under sinks + window gives the teacher-forced log-probs (1e-5)", async () => {
    const engine = createRandomModel(tinyConfig(), 11, { kernels: k, std: 0.2, attention: { window: 6, sinks: 2 } });
    const prompt = randomTokens(1, 10, V);
    const r = await (await engine.session(prompt)).sample({ maxTokens: 30, seed: 3 });
    const [lp] = await engine.logprobs([[...prompt, ...r.tokens]]);
    expect(maxDiff(r.logprobs, lp!, prompt.length)).toBeLessThan(1e-5);
  });

  it("evicting session: pinned keys, chunked prefill, a second document; log-probs agree and the cache is exactly the kept keys", async () => {
    const cfg = { sinks: 2, window: 6 };
    const engine = createRandomModel(tinyConfig(), 12, { kernels: k, std: 0.2, attention: cfg });
    const s = new MaskedSession(engine.model, cfg, { maxChunk: 4 });
    const prompt = randomTokens(2, 15, V);
    const pinned = prompt.map((_, i) => (i === 5 || i === 9 ? 1 : 0));
    s.append(prompt, { pinned });
    const sampled: number[] = [];
    const logprobs: number[] = [];
    for (let i = 0; i < 20; i++) {
      const r = s.sample({ maxTokens: 1, seed: 100 + i });
      sampled.push(...r.tokens);
      logprobs.push(...r.logprobs);
      s.lastLogits(); // computes the sampled token: the cache now matches the mask's last query
      const mask = s.mask();
      const q = s.length - 1;
      expect(s.cachedPositions()).toEqual(keptKeys(mask, documentPositions(mask, s.length), q));
      expect(s.cachedCount).toBeLessThanOrEqual(cfg.sinks + 2 + cfg.window);
    }
    const tokens = s.tokens();
    expect(maxDiff(logprobs, await teacherForced(engine, tokens, s.mask()), prompt.length)).toBeLessThan(1e-5);

    // A second document: nothing of the first is kept, its own first K tokens are the sink slots.
    const doc2 = randomTokens(3, 9, V);
    s.append(doc2, { newDocument: true });
    const r2 = s.sample({ maxTokens: 12, seed: 9 });
    s.lastLogits();
    const mask = s.mask();
    expect(s.cachedPositions()).toEqual(keptKeys(mask, documentPositions(mask, s.length), s.length - 1));
    expect(Math.min(...s.cachedPositions())).toBe(tokens.length);
    const lp = await teacherForced(engine, s.tokens(), mask);
    expect(maxDiff(r2.logprobs, lp, tokens.length + doc2.length)).toBeLessThan(1e-5);
  });

  it("engine sessions: the window matters, a window of 0 is full attention, and the window's session holds K + W rows", async () => {
    const full = createRandomModel(tinyConfig(), 13, { kernels: k, std: 0.2, blockSize: 1 });
    const prompt = randomTokens(4, 40, V);
    const fs = full.sessionSync(prompt);
    const r = await fs.sample({ maxTokens: 5, seed: 1 });
    const [lp] = await full.logprobs([[...prompt, ...r.tokens]]);
    expect(maxDiff(r.logprobs, lp!, prompt.length)).toBeLessThan(1e-5);
    expect(fs.heldBlocks).toBe(44); // every computed key (the last sampled token is not computed yet)
    const windowed = createRandomModel(tinyConfig(), 13, { kernels: k, std: 0.2, blockSize: 1, attention: { sinks: 1, window: 4 } });
    const ws = windowed.sessionSync(prompt);
    const w = await ws.sample({ maxTokens: 5, seed: 1 });
    expect(ws.heldBlocks).toBe(5); // the sink slot and the 4 keys the next query reads
    expect(Math.abs(w.logprobs[0]! - r.logprobs[0]!)).toBeGreaterThan(1e-4);
  });
});
