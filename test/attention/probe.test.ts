// The probe on a model built by hand so that layer 0 attends (almost) only to one token X: it must report
// X's position as a sink of layer 0 (all heads), no sink in layer 1, and X as a token sink when X moves
// from sequence to sequence. The rewriter then fills the sink slots from the profile and pins what it found.
import { describe, expect, it } from "vitest";
import {
  formatProfile, probeSinks, readProfile, rewriteForSinks, SINK_PROFILE_FORMAT, writeProfile, type SinkProfile,
} from "../../src/attention/index.js";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sinkModel, withX, X } from "./helpers.js";

describe("sink probe", () => {
  const engine = sinkModel();

  it("finds a fixed-position sink in layer 0 only, with its token id and mass", () => {
    const seqs = [1, 2, 3, 4].map((i) => withX(i, 48, 3));
    const p = probeSinks(engine.model, seqs, { delta: 8, queries: 32 });
    expect(p.format).toBe(SINK_PROFILE_FORMAT);
    expect(p.layers[0]!.positions.map((s) => s.position)).toEqual([3]);
    const s = p.layers[0]!.positions[0]!;
    expect(s.tokenId).toBe(X);
    expect(s.heads).toEqual([0, 1, 2, 3]);
    expect(s.mass).toBeGreaterThan(0.9);
    expect(p.layers[1]!.positions).toEqual([]);
    expect(p.layersWithoutSinks).toEqual([1]);
    expect(p.prefix.length).toBe(8);
    expect(p.prefix[3]).toBe(X);
    const table = formatProfile(p, (id) => (id === X ? "X" : `#${id}`));
    expect(table).toMatch(/^0\s+3 \(X, (0\.9\d|1\.00), 4\/4\)/m);
    expect(table).toContain("layers without sinks: 1");
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-profile-"));
    writeProfile(join(dir, "p.json"), p);
    expect(readProfile(join(dir, "p.json"))).toEqual(p);
  });

  it("a sink token that moves is a token sink, not a position sink", () => {
    const seqs = [5, 9, 14, 19, 23, 28].map((at, i) => withX(10 + i, 48, at));
    const p = probeSinks(engine.model, seqs, { delta: 8, queries: 32 });
    expect(p.layers[0]!.positions).toEqual([]);
    expect(p.layers[0]!.tokens.map((t) => [t.tokenId, t.sinkOccurrences, t.occurrences])).toEqual([[X, 6, 6]]);
    expect(p.layers[1]!.tokens).toEqual([]);
  });

  it("refuses sequences no longer than delta", () => {
    expect(() => probeSinks(engine.model, [withX(1, 10, 3)], { delta: 64 })).toThrow(/longer than delta = 64/);
  });
});

describe("rewriter", () => {
  const profile: SinkProfile = {
    format: SINK_PROFILE_FORMAT, model: "m", numLayers: 2, numHeads: 4,
    settings: { delta: 8, threshold: 0.3, headFraction: 0.25, queries: 32 }, sequences: 4, tokens: 100,
    layers: [
      { layer: 0, positions: [{ position: 0, tokenId: 1, mass: 0.8, heads: [0, 1] }, { position: 4, tokenId: 9, mass: 0.5, heads: [2] }], tokens: [{ tokenId: 30, occurrences: 4, sinkOccurrences: 4, mass: 0.6 }] },
      { layer: 1, positions: [], tokens: [{ tokenId: 31, occurrences: 3, sinkOccurrences: 2, mass: 0.4 }] },
    ],
    layersWithoutSinks: [], prefix: [1, 2, 3, 4, 9, 5, 6, 7],
  };

  it("fills K slots with the natural prefix, pins position sinks then token sinks up to the budget, emits doc ids and positions", () => {
    const a = [1, 2, 40, 41, 42, 30, 43, 31, 30]; // already starts with the K = 2 prefix
    const b = [50, 31, 51, 30]; // does not: the prefix is prepended
    const r = rewriteForSinks([a, b], profile, { sinks: 2, window: 4, pinBudget: 2 });
    expect(r.prepended).toEqual([0, 2]);
    expect(r.tokens).toEqual([...a, 1, 2, ...b]);
    expect([...r.docIds]).toEqual([...a.map(() => 0), 1, 1, ...b.map(() => 1)]);
    expect([...r.positions]).toEqual([...a.map((_, i) => i), 0, 1, 2, 3, 4, 5]);
    // doc a: position sink 4, then the strongest token sink (30) earliest: position 5
    // doc b (offset 9): position sink 4 is token 51; then token 30 at document position 5
    expect(r.pinnedPositions).toEqual([[4, 5], [13, 14]]);
    expect([...r.pinned].flatMap((p, i) => (p ? [i] : []))).toEqual([4, 5, 13, 14]);
    expect(r.mask).toMatchObject({ sinks: 2, window: 4 });
    expect(r.mask.docIds).toBe(r.docIds);
    const none = rewriteForSinks([a], profile, { sinks: 1, window: 4, pinBudget: 0 });
    expect([...none.pinned].every((p) => p === 0)).toBe(true);
    expect(() => rewriteForSinks([a], profile, { sinks: 9, window: 4, pinBudget: 0 })).toThrow(/natural prefix of only 8/);
  });
});
