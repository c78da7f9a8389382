import { describe, expect, it } from "vitest";
import { COPY_DRILL_SOURCE, copyDrillExamples } from "../../src/recipes/copy-drill.js";
import { leadFirst, promptGroups, type SftExample } from "../../src/rl/sft.js";

/** An SFT example: a system prompt of `prompt` tokens (ids 900+), then `context` distinct ids from `base`. */
function example(prompt: number, context: number, base: number): SftExample {
  const tokens = [1, ...Array.from({ length: prompt - 1 }, (_, i) => 900 + i), ...Array.from({ length: context }, (_, i) => base + i)];
  return { tokens, lossMask: new Uint8Array(tokens.length), contextStart: prompt, source: "suite" };
}

/** Splits a drill example into its doubled spans, from its loss mask: each span's length and where it starts. */
function spansOf(ex: SftExample): { at: number; length: number }[] {
  const spans: { at: number; length: number }[] = [];
  let i = 1;
  while (i < ex.tokens.length) {
    // A span: its first copy (out of the loss), then the second copy's first token (out) and the rest (in).
    let second = i;
    while (ex.lossMask[second + 1] === 0) second++;
    // The masked run after `second` is the second copy's tail; the first copy is as long as the second.
    let end = second + 1;
    while (end < ex.tokens.length && ex.lossMask[end] === 1) end++;
    const length = end - second;
    expect(second - i).toBe(length);
    spans.push({ at: i, length });
    i = end;
  }
  return spans;
}

describe("copy drill", () => {
  const from = [example(5, 60, 100), example(7, 80, 300), example(4, 30, 500)];
  const options = { examples: 20, spanTokens: [8, 20] as const, tokens: 100 };

  it("writes each span twice and trains on the second copy from its second token", () => {
    const drill = copyDrillExamples(from, options, 3);
    expect(drill).toHaveLength(20);
    for (const ex of drill) {
      expect(ex.source).toBe(COPY_DRILL_SOURCE);
      expect(ex.contextLoss).toBe(false);
      expect(ex.tokens[0]).toBe(1);
      expect(ex.tokens.length).toBeGreaterThanOrEqual(100);
      expect(ex.lossMask.length).toBe(ex.tokens.length);
      const spans = spansOf(ex);
      expect(spans.reduce((n, s) => n + 2 * s.length, 1)).toBe(ex.tokens.length);
      for (const { at, length } of spans) {
        expect(length).toBeGreaterThanOrEqual(8);
        expect(length).toBeLessThanOrEqual(20);
        const first = ex.tokens.slice(at, at + length);
        expect(ex.tokens.slice(at + length, at + 2 * length)).toEqual(first);
        // Cut from one example's context: consecutive ids above its prompt's (ids under 900).
        expect(first.every((t, k) => t < 900 && (k === 0 || t === first[k - 1]! + 1))).toBe(true);
      }
    }
  });

  it("writes the spans of a recall example once each, then again in a shuffled order (recall)", () => {
    const mixed = copyDrillExamples(from, { ...options, examples: 200, recall: 0.5 }, 5);
    // A recall example's first half is untrained (its spans once each); a pair example trains on its second span's copy.
    const half = (ex: SftExample) => (ex.tokens.length - 1) / 2;
    const recalled = mixed.filter((ex) => ex.lossMask.subarray(1, 1 + half(ex)).every((x) => x === 0));
    expect(recalled.length).toBeGreaterThan(70);
    expect(recalled.length).toBeLessThan(130);
    let reordered = 0;
    for (const ex of recalled) {
      const first = ex.tokens.slice(1, 1 + half(ex));
      // The second half: spans, each trained from its second token (an untrained token starts one).
      const spans: number[][] = [];
      for (let at = 1 + half(ex); at < ex.tokens.length; at++) {
        if (ex.lossMask[at] === 0) spans.push([]);
        spans.at(-1)!.push(ex.tokens[at]!);
      }
      expect(spans.length).toBeGreaterThanOrEqual(3);
      const where = spans.map((span) => first.findIndex((_, k) => span.every((t, m) => first[k + m] === t)));
      expect(where.every((k) => k >= 0)).toBe(true);
      expect([...spans.flat()].sort((a, b) => a - b)).toEqual([...first].sort((a, b) => a - b));
      if (where.some((k, n) => n > 0 && k < where[n - 1]!)) reordered++;
    }
    expect(reordered).toBeGreaterThan(recalled.length / 2);
    expect(copyDrillExamples(from, { ...options, recall: 0 }, 5)).toEqual(copyDrillExamples(from, options, 5));
    expect(() => copyDrillExamples(from, { ...options, recall: 1.5 }, 0)).toThrow(/recall must be a share from 0 to 1, got 1.5/);
  });

  it("cuts spans only from examples with more context than the span, across the examples", () => {
    // The third example has 30 context tokens: spans of up to 29 can come from it, of 30 or more not.
    const long = copyDrillExamples(from, { ...options, spanTokens: [30, 40] }, 1);
    const bases = new Set(long.flatMap((ex) => spansOf(ex).map(({ at }) => Math.floor(ex.tokens[at]! / 100) * 100)));
    expect([...bases].sort()).toEqual([100, 300]);
    const short = copyDrillExamples(from, options, 1);
    expect(new Set(short.flatMap((ex) => spansOf(ex).map(({ at }) => Math.floor(ex.tokens[at]! / 100) * 100))).size).toBe(3);
  });

  it("is deterministic in the seed", () => {
    const a = copyDrillExamples(from, options, 7);
    expect(copyDrillExamples(from, options, 7)).toEqual(a);
    expect(copyDrillExamples(from, options, 8).map((e) => e.tokens)).not.toEqual(a.map((e) => e.tokens));
  });

  it("makes one prompt group whose batches all lead the first epoch", () => {
    const drill = copyDrillExamples(from, { ...options, examples: 6 }, 0);
    const examples = [...from, ...drill];
    const groups = promptGroups(examples);
    expect(groups).toContainEqual([3, 4, 5, 6, 7, 8]);
    const batches = [[0], [3, 4], [1], [5, 6], [2], [7, 8]];
    expect(leadFirst(batches, examples, { [COPY_DRILL_SOURCE]: 1 })).toEqual([[3, 4], [5, 6], [7, 8], [0], [1], [2]]);
  });

  it("refuses options it cannot meet, saying which", () => {
    expect(copyDrillExamples(from, { ...options, examples: 0 }, 0)).toEqual([]);
    expect(() => copyDrillExamples(from, { ...options, spanTokens: [20, 8] }, 0)).toThrow(/spanTokens must be two whole numbers 2 <= min <= max, got \[20, 8\]/);
    expect(() => copyDrillExamples(from, { ...options, spanTokens: [1, 8] }, 0)).toThrow(/spanTokens/);
    expect(() => copyDrillExamples(from, { ...options, examples: 1.5 }, 0)).toThrow(/examples must be a whole number/);
    expect(() => copyDrillExamples(from, { ...options, spanTokens: [8, 80] }, 0)).toThrow(/no SFT example has more than 80 tokens after its system prompt/);
    expect(() => copyDrillExamples([], options, 0)).toThrow(/no SFT example/);
  });
});
