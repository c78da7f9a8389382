/** The trimmed vocabulary: corpus ids + specials + byte tokens, mapped both ways, any text still encodes. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ChatTemplate } from "../../src/model/chat-template.js";
import { loadQwen3Tokenizer, Tokenizer } from "../../src/model/tokenizer.js";
import { byteTokenIds, tokenCodec, TrimmedVocab } from "../../src/model/vocab.js";

describe("TrimmedVocab", () => {
  const tokenizer = loadQwen3Tokenizer();
  const template = ChatTemplate.fromTokenizer(tokenizer);
  const corpusText = template.render(
    [
      { role: "system", content: "You are a retail agent." },
      { role: "user", content: "Cancel order #W1 please." },
      { role: "assistant", content: "", toolCalls: [{ id: "1", name: "cancel_order", arguments: '{"order_id": "#W1"}' }] },
      { role: "tool", toolCallId: "1", name: "cancel_order", content: '{"status": "cancelled"}' },
      { role: "assistant", content: "Done: order #W1 is cancelled." },
    ],
    { addGenerationPrompt: false },
  );
  const corpus = [tokenizer.encode(corpusText)];
  const vocab = TrimmedVocab.build(tokenizer, corpus);

  it("keeps corpus ids, all 256 byte tokens and the added tokens, and nothing else", () => {
    expect(new Set(byteTokenIds(tokenizer)).size).toBe(256);
    const added = (tokenizer.tokenizerJson.added_tokens as unknown[]).length;
    expect(vocab.size).toBeGreaterThanOrEqual(256 + added);
    expect(vocab.size).toBeLessThan(256 + added + corpus[0]!.length + 1);
    for (const id of corpus[0]!) expect(vocab.has(id)).toBe(true);
  });

  it("maps corpus ids exactly both ways", () => {
    const small = vocab.toSmall(corpus[0]!, tokenizer);
    expect(small.every((id) => id < vocab.size)).toBe(true);
    expect(vocab.toFull(small)).toEqual(corpus[0]);
  });

  it("encodes unseen text through byte fallback and decodes it back unchanged", () => {
    const codec = tokenCodec(tokenizer, vocab);
    const text = "Unseen words: Zürich, 東京, emoji 🦜, tabs\tand    spaces.";
    const ids = codec.encode(text);
    expect(ids.every((id) => id >= 0 && id < vocab.size)).toBe(true);
    expect(codec.decode(ids)).toBe(text);
    expect(codec.tokenId("<|im_end|>")).toBe(vocab.toSmall([151645], tokenizer)[0]);
  });

  it("saves and loads from a checkpoint folder", () => {
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-vocab-"));
    try {
      expect(TrimmedVocab.load(dir)).toBeUndefined();
      vocab.save(dir);
      const back = TrimmedVocab.load(dir)!;
      expect(back.fullIds).toEqual(vocab.fullIds);
      expect(back.toSmall(corpus[0]!, tokenizer)).toEqual(vocab.toSmall(corpus[0]!, tokenizer));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("rejects a malformed file and a mismatched tokenizer", () => {
    expect(() => TrimmedVocab.fromJSON({ format: "x" } as never)).toThrow(/not a sinkflex trimmed vocabulary/);
    const other = TrimmedVocab.fromJSON({ format: "sinkflex-trimmed-vocab-v1", baseVocabSize: 10, fullIds: [1, 2] });
    expect(() => tokenCodec(tokenizer, other)).toThrow(/rebuild it/);
  });
});

describe("Tokenizer.encode on chat text", () => {
  const tokenizer = loadQwen3Tokenizer();
  const template = ChatTemplate.fromTokenizer(tokenizer);
  const whole = (text: string) => (tokenizer as unknown as { encodePiece(t: string): number[] }).encodePiece(text);
  const tools = [{ name: "lookup", description: "Looks a word up in the dictionary and returns its meanings. ".repeat(4), parameters: { type: "object", properties: { word: { type: "string" } } } }];

  it("cut at each message and with long pieces remembered, gives the ids of encoding the text whole", () => {
    for (const [i, word] of ["alpha", "beta", "gamma"].entries()) {
      const text = template.render(
        [
          { role: "system", content: "You answer questions about words, briefly and exactly. ".repeat(5) },
          { role: "user", content: `What does ${word} mean? ${"Please be precise. ".repeat(i * 12)}` },
          { role: "assistant", content: "Let me look.", toolCalls: [{ id: "1", name: "lookup", arguments: JSON.stringify({ word }) }] },
          { role: "tool", toolCallId: "1", name: "lookup", content: `${word}: the ${i + 1}th letter\u00e9 \u4e2d\u6587 ${"x".repeat(300)}` },
        ],
        { tools, addGenerationPrompt: true },
      );
      expect(text.length).toBeGreaterThan(600);
      const expected = whole(text);
      expect(tokenizer.encode(text)).toEqual(expected);
      expect(tokenizer.encode(text)).toEqual(expected); // the remembered pieces
      expect(tokenizer.encode(`no special token at the start ${text}`)).toEqual(whole(`no special token at the start ${text}`));
    }
  });
});

describe("TrimmedVocab on a sentencepiece tokenizer (Phi-3)", () => {
  it("spells a word outside the trimmed set with <0xXX> byte tokens (the word-start symbol as a space) and decodes it back", () => {
    const tokenizer = Tokenizer.fromDir(join(import.meta.dirname, "fixtures", "families", "phi3"));
    const vocab = TrimmedVocab.build(tokenizer, [tokenizer.encode("<|user|>\nreserve four crates<|end|>")]);
    const codec = tokenCodec(tokenizer, vocab);
    for (const text of ["hi there", "naïve café ✓", "reserve hi"]) {
      const full = tokenizer.encode(text);
      expect(full.some((id) => !vocab.has(id)), text).toBe(true);
      const small = vocab.toSmall(full, tokenizer);
      expect(small.every((id) => id < vocab.size)).toBe(true);
      expect(codec.decode(codec.encode(text))).toBe(tokenizer.decode(full));
    }
  });
});
