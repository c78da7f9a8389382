/**
 * The notice for a checkpoint's trimmed vocabulary meeting an env's text it was not built on: a codec
 * that counts, while an evaluation or a GRPO run encodes a suite's episodes, how many of the tokenizer's
 * tokens lie outside the trimmed vocabulary and are spelled from smaller pieces (byte pieces at worst),
 * and the one line per suite that says so. A model reads such spellings as text it never trained on, so
 * a low score there may be the vocabulary rather than the policy. This file changes no token: the
 * counting codec encodes exactly as the one it wraps.
 */
import type { TokenCodec } from "../model/index.js";

/** A codec that encodes as `codec` does and counts the tokens it spelled from pieces. */
export interface CountingCodec extends TokenCodec {
  /** Tokenizer tokens encoded so far, and how many of them fell outside the trimmed vocabulary. */
  readonly counts: { tokens: number; spelled: number };
}

/** Wraps a codec with a trimmed vocabulary to count its spelled tokens; a codec without one is returned as is (nothing falls back). */
export function countingCodec(codec: TokenCodec): TokenCodec | CountingCodec {
  const { vocab, tokenizer } = codec;
  if (!vocab) return codec;
  const counts = { tokens: 0, spelled: 0 };
  return {
    tokenizer,
    vocab,
    size: codec.size,
    decode: (ids) => codec.decode(ids),
    tokenId: (token) => codec.tokenId(token),
    encode: (text) => {
      const full = tokenizer.encode(text);
      counts.tokens += full.length;
      for (const id of full) if (!vocab.has(id)) counts.spelled++;
      return vocab.toSmall(full, tokenizer);
    },
    counts,
  };
}

/**
 * The share of spelled tokens from which the notice is said. A few always occur: text the model samples
 * from its own vocabulary can re-encode into merges the vocabulary lacks.
 */
export const SPELLED_NOTICE_SHARE = 0.01;

/** The suites already noticed in this process: the notice is said once per suite. */
const noticed = new Set<string>();

/**
 * Says (on stderr, once per suite and process) how many of a suite's tokens fell outside the trimmed
 * vocabulary, when at least `SPELLED_NOTICE_SHARE` of them did. Returns the line, or undefined when nothing is said.
 */
export function noticeSpelledTokens(suite: string, codec: TokenCodec | CountingCodec, write: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): string | undefined {
  if (!("counts" in codec) || codec.counts.spelled < SPELLED_NOTICE_SHARE * codec.counts.tokens || codec.counts.spelled === 0 || noticed.has(suite)) return undefined;
  noticed.add(suite);
  const { tokens, spelled } = codec.counts;
  const line =
    `notice: ${suite}: ${spelled} of ${tokens} tokens of its text are not in the checkpoint's trimmed vocabulary (${codec.size} tokens) and were spelled from smaller pieces, down to bytes; ` +
    `the model never trained on them spelled so. Train a model whose vocabulary was built with this env among its suites (model.init reads it off the suites' text), or start from a checkpoint with the full vocabulary`;
  write(line);
  return line;
}
