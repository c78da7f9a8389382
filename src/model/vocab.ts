/**
 * A trimmed vocabulary: the token ids a small model actually uses, mapped to and from the full
 * tokenizer's ids, so that a tiny model can have a 2-4K-row embedding instead of 151K.
 *
 * It keeps every id its corpus uses, every added/special token, and every byte-level token (the 256
 * single-byte symbols of a byte-level BPE, or `<0x00>`..`<0xFF>` of a byte-fallback tokenizer), so any
 * text still encodes: a full id outside the trimmed set is spelled with the longest kept pieces of its
 * own bytes. It is saved beside the weights as `sinkflex-vocab.json`. `TokenCodec` is the text <-> model
 * id interface the rollout and the server use, with or without a trimmed vocabulary. This file does not
 * tokenize by itself (tokenizer.ts does) and knows nothing of embeddings or weights.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Tokenizer } from "./tokenizer.js";

export const VOCAB_FILE = "sinkflex-vocab.json";
const FORMAT = "sinkflex-trimmed-vocab-v1";

/** GPT-2's byte-to-unicode table used by byte-level BPE: the 256 single-byte symbols. */
export function byteLevelAlphabet(): string[] {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n);
      n++;
    }
  }
  const table = new Array<string>(256);
  bs.forEach((b, i) => (table[b] = String.fromCodePoint(cs[i]!)));
  return table;
}

/** The ids of the tokenizer's byte tokens (byte-level symbols, or `<0xXX>` byte fallback). */
export function byteTokenIds(tokenizer: Tokenizer): number[] {
  const ids: number[] = [];
  for (const sym of byteLevelAlphabet()) {
    const id = tokenizer.tokenToId(sym);
    if (id !== undefined) ids.push(id);
  }
  if (ids.length === 256) return ids;
  const fallback: number[] = [];
  for (let b = 0; b < 256; b++) {
    const id = tokenizer.tokenToId(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
    if (id !== undefined) fallback.push(id);
  }
  if (fallback.length === 256) return fallback;
  throw new Error(
    `the tokenizer (${tokenizer.source}) has neither the 256 byte-level symbols nor <0x00>..<0xFF> byte tokens; a trimmed vocabulary needs one of them so that any text still encodes`,
  );
}

export interface TrimmedVocabJson {
  format: typeof FORMAT;
  /** The full tokenizer's id space size. */
  baseVocabSize: number;
  /** Full ids, ascending; the small id of `fullIds[i]` is i. */
  fullIds: number[];
}

export class TrimmedVocab {
  private readonly toSmallMap: Map<number, number>;
  /** Full id -> small ids spelling it, for full ids outside the trimmed set. */
  private readonly spellings = new Map<number, number[]>();
  private maxPieceChars = 1;

  private constructor(
    readonly baseVocabSize: number,
    /** Full ids ascending; index = small id. */
    readonly fullIds: readonly number[],
  ) {
    this.toSmallMap = new Map(fullIds.map((id, i) => [id, i]));
  }

  /** Number of rows the small model needs. */
  get size(): number {
    return this.fullIds.length;
  }

  /**
   * Builds a trimmed vocabulary from a corpus of full-tokenizer id sequences (e.g. the rendered SFT
   * conversations), plus all special/added tokens and all byte tokens.
   */
  static build(tokenizer: Tokenizer, corpus: Iterable<readonly number[]>, extraIds: Iterable<number> = []): TrimmedVocab {
    const keep = new Set<number>(byteTokenIds(tokenizer));
    for (const added of (tokenizer.tokenizerJson.added_tokens as { id: number }[] | undefined) ?? []) keep.add(added.id);
    for (const seq of corpus) for (const id of seq) keep.add(id);
    for (const id of extraIds) keep.add(id);
    for (const id of keep) {
      if (!Number.isInteger(id) || id < 0 || id >= tokenizer.vocabSize) {
        throw new RangeError(`token id ${id} is outside the tokenizer's vocabulary [0, ${tokenizer.vocabSize - 1}]`);
      }
    }
    return new TrimmedVocab(tokenizer.vocabSize, [...keep].sort((a, b) => a - b));
  }

  static fromJSON(json: TrimmedVocabJson): TrimmedVocab {
    if (json.format !== FORMAT) throw new Error(`not a sinkflex trimmed vocabulary (format ${JSON.stringify(json.format)}, expected ${FORMAT})`);
    for (let i = 1; i < json.fullIds.length; i++) {
      if (json.fullIds[i]! <= json.fullIds[i - 1]!) throw new Error("a trimmed vocabulary's fullIds must be strictly ascending");
    }
    return new TrimmedVocab(json.baseVocabSize, json.fullIds);
  }

  toJSON(): TrimmedVocabJson {
    return { format: FORMAT, baseVocabSize: this.baseVocabSize, fullIds: [...this.fullIds] };
  }

  save(dir: string): void {
    writeFileSync(join(dir, VOCAB_FILE), JSON.stringify(this.toJSON()));
  }

  /** The checkpoint folder's trimmed vocabulary, or undefined when it uses the full one. */
  static load(dir: string): TrimmedVocab | undefined {
    const file = join(dir, VOCAB_FILE);
    if (!existsSync(file)) return undefined;
    return TrimmedVocab.fromJSON(JSON.parse(readFileSync(file, "utf8")) as TrimmedVocabJson);
  }

  has(fullId: number): boolean {
    return this.toSmallMap.has(fullId);
  }

  /** Small id -> full id. */
  toFullId(smallId: number): number {
    const id = this.fullIds[smallId];
    if (id === undefined) throw new RangeError(`small token id ${smallId} is outside the trimmed vocabulary [0, ${this.size - 1}]`);
    return id;
  }

  toFull(smallIds: readonly number[]): number[] {
    return smallIds.map((id) => this.toFullId(id));
  }

  /**
   * Full ids -> small ids. A full id outside the set is spelled with the longest kept tokens of its
   * own text (byte tokens at worst), so the decoded text is unchanged.
   */
  toSmall(fullIds: readonly number[], tokenizer: Tokenizer): number[] {
    const out: number[] = [];
    for (const id of fullIds) {
      const small = this.toSmallMap.get(id);
      if (small !== undefined) out.push(small);
      else out.push(...this.spell(id, tokenizer));
    }
    return out;
  }

  private spell(fullId: number, tokenizer: Tokenizer): number[] {
    const cached = this.spellings.get(fullId);
    if (cached) return cached;
    if (this.maxPieceChars === 1) {
      for (const id of this.fullIds) this.maxPieceChars = Math.max(this.maxPieceChars, tokenizer.idToToken(id)?.length ?? 1);
    }
    const text = tokenizer.idToToken(fullId);
    if (text === undefined) throw new RangeError(`token id ${fullId} is not in the tokenizer's vocabulary`);
    const pieces: number[] = [];
    let i = 0;
    while (i < text.length) {
      let found = false;
      for (let len = Math.min(this.maxPieceChars, text.length - i); len >= 1; len--) {
        const id = tokenizer.tokenToId(text.slice(i, i + len));
        const small = id === undefined ? undefined : this.toSmallMap.get(id);
        if (small !== undefined) {
          pieces.push(small);
          i += len;
          found = true;
          break;
        }
      }
      if (found) continue;
      // A sentencepiece vocabulary (Llama 2, Phi-3) spells what it lacks with <0xXX> byte tokens; its
      // word-start symbol "▁" is a space.
      const ch = String.fromCodePoint(text.codePointAt(i)!);
      const bytes = ch === "\u2581" ? [0x20] : [...Buffer.from(ch, "utf8")];
      const smalls = bytes.map((b) => {
        const id = tokenizer.tokenToId(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
        return id === undefined ? undefined : this.toSmallMap.get(id);
      });
      if (smalls.some((x) => x === undefined)) throw new Error(`cannot spell token ${JSON.stringify(text)} with the trimmed vocabulary: its byte tokens are missing`);
      pieces.push(...(smalls as number[]));
      i += ch.length;
    }
    this.spellings.set(fullId, pieces);
    return pieces;
  }
}

/**
 * Text <-> the ids a model reads and writes: the full tokenizer's ids, or a trimmed vocabulary's small
 * ids. The rollout, the server and the trainer use this, never the tokenizer's ids directly.
 */
export interface TokenCodec {
  readonly tokenizer: Tokenizer;
  readonly vocab: TrimmedVocab | undefined;
  /** Rows of the model's embedding. */
  readonly size: number;
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
  /** A token string's model id (e.g. "<|im_end|>"); throws when absent. */
  tokenId(token: string): number;
}

export function tokenCodec(tokenizer: Tokenizer, vocab?: TrimmedVocab): TokenCodec {
  if (vocab && vocab.baseVocabSize !== tokenizer.vocabSize) {
    throw new Error(`the trimmed vocabulary was built for a ${vocab.baseVocabSize}-id tokenizer, but this one has ${tokenizer.vocabSize} ids; rebuild it`);
  }
  return {
    tokenizer,
    vocab,
    size: vocab ? vocab.size : tokenizer.vocabSize,
    encode: (text) => (vocab ? vocab.toSmall(tokenizer.encode(text), tokenizer) : tokenizer.encode(text)),
    decode: (ids) => tokenizer.decode(vocab ? vocab.toFull(ids) : ids),
    tokenId: (token) => {
      const id = tokenizer.requireId(token);
      if (!vocab) return id;
      if (!vocab.has(id)) throw new Error(`the trimmed vocabulary has no token "${token}"`);
      return vocab.toSmall([id], tokenizer)[0]!;
    },
  };
}
