/**
 * The chat template and tokenizer against Hugging Face transformers: each fixture conversation
 * (scripts/make-chat-fixture.py) must render to the same text and encode to the same ids.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import type { ChatMessage, ToolSpec } from "../../src/core/index.js";
import { ChatTemplate, renderIds, toHfMessages } from "../../src/model/chat-template.js";
import { loadQwen3Tokenizer } from "../../src/model/tokenizer.js";

interface Case {
  name: string;
  messages: ChatMessage[];
  tools?: ToolSpec[];
  addGenerationPrompt: boolean;
  extra?: Record<string, unknown>;
  text: string;
  ids: number[];
}
const fixture = JSON.parse(readFileSync(new URL("./fixtures/qwen3-chat.json", import.meta.url), "utf8")) as {
  cases: Case[];
  encodings: { text: string; ids: number[] }[];
};

describe("Qwen3 chat template (vs transformers)", () => {
  const tokenizer = loadQwen3Tokenizer();
  const template = ChatTemplate.fromTokenizer(tokenizer);

  it("uses raw tool-call arguments for the Qwen template", () => {
    expect(template.toolArguments).toBe("raw");
  });

  for (const c of fixture.cases) {
    it(`renders and encodes "${c.name}" exactly`, () => {
      const options = { tools: c.tools, addGenerationPrompt: c.addGenerationPrompt, extra: c.extra };
      expect(template.render(c.messages, options)).toBe(c.text);
      expect(renderIds(tokenizer, template, c.messages, options)).toEqual(c.ids);
    });
  }

  it("converts tool calls to the Hugging Face shape, parsed or raw", () => {
    const msgs: ChatMessage[] = [
      { role: "assistant", content: "", toolCalls: [{ id: "1", name: "f", arguments: '{"a": [1, 2]}' }, { id: "2", name: "g", arguments: "{bad" }] },
      { role: "tool", toolCallId: "1", name: "f", content: "ok" },
    ];
    const parsed = toHfMessages(msgs, "parsed");
    expect(parsed[0]).toEqual({
      role: "assistant",
      content: "",
      tool_calls: [
        { id: "1", type: "function", function: { name: "f", arguments: { a: [1, 2] } } },
        { id: "2", type: "function", function: { name: "g", arguments: "{bad" } },
      ],
    });
    expect(parsed[1]).toEqual({ role: "tool", tool_call_id: "1", name: "f", content: "ok" });
    expect((toHfMessages(msgs, "raw")[0] as { tool_calls: { function: { arguments: unknown } }[] }).tool_calls[0]!.function.arguments).toBe('{"a": [1, 2]}');
  });

  it("picks parsed arguments for a template that always applies tojson", () => {
    const t = new ChatTemplate("{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}");
    expect(t.toolArguments).toBe("parsed");
    expect(t.render([{ role: "assistant", content: "", toolCalls: [{ id: "1", name: "f", arguments: '{"x":1}' }] }])).toBe('{"x": 1}');
  });

  it("says what to do when a tokenizer has no template", () => {
    expect(() => new ChatTemplate("{% for x in %}")).toThrow(/does not parse as Jinja/);
  });
});

describe("Qwen3 tokenizer (vs transformers)", () => {
  const tokenizer = loadQwen3Tokenizer();
  it("has the Qwen3 vocabulary and special tokens", () => {
    expect(tokenizer.vocabSize).toBe(151669);
    expect(tokenizer.eosToken).toBe("<|im_end|>");
    expect(tokenizer.eosTokenId).toBe(151645);
    expect(tokenizer.requireId("<|im_start|>")).toBe(151644);
    expect(tokenizer.requireId("<tool_call>")).toBe(151657);
    expect(() => tokenizer.requireId("<nope>")).toThrow(/no token "<nope>"/);
  });
  for (const e of fixture.encodings) {
    it(`encodes and decodes ${JSON.stringify(e.text.slice(0, 24))}`, () => {
      expect(tokenizer.encode(e.text)).toEqual(e.ids);
      expect(tokenizer.decode(e.ids)).toBe(e.text);
    });
  }
  it("rejects ids outside the vocabulary", () => {
    expect(() => tokenizer.decode([5, 999999])).toThrow(/outside this tokenizer's vocabulary/);
  });
});
