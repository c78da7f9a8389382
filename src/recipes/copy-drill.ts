/**
 * The copy drill: synthetic SFT examples that teach a model trained from scratch to copy from its
 * context before it learns the suites' episodes.
 *
 * Each drill example is a row of spans cut from the SFT examples' own context (their user and tool
 * tokens: numbers, JSON, object names), each span written twice in a row. The loss covers the second
 * copy only (from its second token: its first cannot be told from the first copy's end), so the one way
 * to lower it is to find the earlier copy and read on from there, the lookup an agent does when it
 * puts a number from a question into a call or a tool's result into its answer. Spans are drawn anew
 * for every example, so nothing in them can be memorized. In the recall layout (`recall`: a share of
 * the examples) an example writes its spans once each, then all of them again in a shuffled order, so a
 * second copy stands further from its first, with other spans between.
 *
 * A small model learns this lookup late and unreliably from the episodes alone (whether and when it
 * forms depends on the seed); drilled first, it forms in more draws and earlier (not in every draw: see
 * docs/training.md). The drill's examples
 * share one prefix (the examples' first token), so with `batchBy: "prefix"` each drill batch is drill
 * only, and they all lead the first epoch (see `leadFirst`).
 */
import { Rng } from "../gym/index.js";
import type { SftExample } from "../rl/index.js";

/** The source the drill's examples carry (SFT reports their loss under it). */
export const COPY_DRILL_SOURCE = "copy-drill";

export interface CopyDrillOptions {
  /** How many drill examples. */
  examples: number;
  /** The shortest and the longest span, in tokens. */
  spanTokens: readonly [number, number];
  /** An example grows by doubled spans until it has at least this many tokens. */
  tokens: number;
  /**
   * The share of examples (0 to 1, default 0) that write their spans once each, then again in a shuffled
   * order: each second copy is further from its first, with other spans between them.
   */
  recall?: number;
}

/**
 * The drill's examples, cut from `from` (the SFT examples; their tokens after `contextStart`).
 * Deterministic in (from, options, seed).
 */
export function copyDrillExamples(from: readonly SftExample[], options: CopyDrillOptions, seed: number): SftExample[] {
  const [minSpan, maxSpan] = options.spanTokens;
  if (!(Number.isInteger(minSpan) && Number.isInteger(maxSpan) && minSpan >= 2 && maxSpan >= minSpan)) {
    throw new RangeError(`copy drill: spanTokens must be two whole numbers 2 <= min <= max, got [${minSpan}, ${maxSpan}]`);
  }
  if (!(Number.isInteger(options.examples) && options.examples >= 0)) throw new RangeError(`copy drill: examples must be a whole number >= 0, got ${options.examples}`);
  if (options.recall !== undefined && !(options.recall >= 0 && options.recall <= 1)) throw new RangeError(`copy drill: recall must be a share from 0 to 1, got ${options.recall}`);
  if (!(Number.isInteger(options.tokens) && options.tokens >= 1)) throw new RangeError(`copy drill: tokens must be a whole number >= 1, got ${options.tokens}`);
  if (options.examples === 0) return [];
  // Spans are cut from examples with more context than the span (others are passed over).
  if (!from.some((ex) => ex.tokens.length - (ex.contextStart ?? 1) > maxSpan)) {
    throw new Error(`copy drill: no SFT example has more than ${maxSpan} tokens after its system prompt to cut spans from; lower spanTokens' maximum or add SFT data`);
  }
  const rng = new Rng((seed ^ 0xc0c0) >>> 0);
  const start = from[0]!.tokens[0]!;
  const recallShare = options.recall ?? 0;
  const out: SftExample[] = [];
  for (let k = 0; k < options.examples; k++) {
    const recall = recallShare > 0 && rng.next() < recallShare;
    const spans: number[][] = [];
    for (let length = 1; length < options.tokens; ) {
      const ex = from[rng.int(from.length)]!;
      const context = ex.contextStart ?? 1;
      const n = minSpan + rng.int(maxSpan - minSpan + 1);
      if (ex.tokens.length - context <= n) continue;
      const at = context + rng.int(ex.tokens.length - context - n);
      spans.push(ex.tokens.slice(at, at + n));
      length += 2 * n;
    }
    const tokens = [start];
    const mask = [0];
    const write = (span: number[], trained: boolean) => {
      tokens.push(...span);
      for (let i = 0; i < span.length; i++) mask.push(trained && i > 0 ? 1 : 0);
    };
    if (recall) {
      for (const span of spans) write(span, false);
      for (const span of rng.shuffle([...spans])) write(span, true);
    } else {
      for (const span of spans) {
        write(span, false);
        write(span, true);
      }
    }
    out.push({ tokens, lossMask: Uint8Array.from(mask), contextStart: 1, source: COPY_DRILL_SOURCE, contextLoss: false });
  }
  return out;
}
