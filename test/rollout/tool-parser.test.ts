/** The tool-call parsers: content, exact argument text, malformed and unclosed calls with their parse errors, the choice by format. */
import { describe, expect, it } from "vitest";
import { ChatTemplate } from "../../src/model/chat-template.js";
import { llama3ToolParser, phi3ToolParser, qwenToolParser, toolParser, toolParserFor, toolParserForFormat, toolParserForTemplate } from "../../src/rollout/tool-parser.js";

describe("qwenToolParser", () => {
  it("splits content and calls, keeping the argument text exactly as written", () => {
    const r = qwenToolParser.parse('Let me check.\n<tool_call>\n{"name": "get", "arguments": {"id": 7,  "q": "x}"}}\n</tool_call>\n<tool_call>\n{"name":"put","arguments":{}}\n</tool_call>', "c_");
    expect(r.content).toBe("Let me check.");
    expect(r.toolCalls).toEqual([
      { id: "c_0", name: "get", arguments: '{"id": 7,  "q": "x}"}' },
      { id: "c_1", name: "put", arguments: "{}" },
    ]);
    expect(r.malformed).toBe(0);
  });

  it("passes malformed calls on as raw text", () => {
    const r = qwenToolParser.parse('<tool_call>\n{"name": "get", "arguments": {id: 7}\n</tool_call>', "c_");
    expect(r.toolCalls).toEqual([{ id: "c_0", name: "get", arguments: "{id: 7" }]);
    expect(r.malformed).toBe(1);
    expect(r.errors).toEqual([expect.stringMatching(/^call 0: not valid JSON \(.+\)$/)]);
    const garbage = qwenToolParser.parse("<tool_call>\nnot json at all\n</tool_call>", "c_");
    expect(garbage.toolCalls).toEqual([{ id: "c_0", name: "", arguments: "not json at all" }]);
    const nameless = qwenToolParser.parse('<tool_call>\n{"arguments": {}}\n</tool_call>', "c_");
    expect(nameless.errors).toEqual(['call 0: no string "name"; write {"name": ..., "arguments": {...}}']);
  });

  it("reads a call whose keys come in another order, and an unclosed call", () => {
    const r = qwenToolParser.parse('<tool_call>{"arguments": {"a": 1}, "name": "f"}</tool_call>', "c_");
    expect(r.toolCalls).toEqual([{ id: "c_0", name: "f", arguments: '{"a":1}' }]);
    const cut = qwenToolParser.parse('ok <tool_call>\n{"name": "f", "argu', "c_");
    expect(cut.content).toBe("ok");
    expect(cut.malformed).toBe(1);
    expect(cut.errors).toEqual(["call 0: <tool_call> is not closed by </tool_call>"]);
    expect(cut.toolCalls[0]!.name).toBe("f");
  });

  it("returns plain text when there is no call", () => {
    expect(qwenToolParser.parse("  The answer is 42.\n", "c_")).toEqual({ content: "The answer is 42.", toolCalls: [], malformed: 0, errors: [] });
  });

  it("is chosen for templates that write <tool_call>", () => {
    expect(toolParserForTemplate("...<tool_call>...").name).toBe("qwen");
    expect(toolParserForTemplate("{{ messages }}").name).toBe("plain");
    expect(() => toolParser("nope")).toThrow(/unknown tool-call format "nope"/);
  });
});

describe("llama3ToolParser", () => {
  it("reads a JSON call, passes malformed ones on, and leaves plain text as content", () => {
    expect(llama3ToolParser.parse('<|python_tag|>{"name": "get", "parameters": {"id": 7}}', "c_").toolCalls).toEqual([{ id: "c_0", name: "get", arguments: '{"id":7}' }]);
    const bad = llama3ToolParser.parse('{"name": "get", "parameters": {id: 7}}', "c_");
    expect(bad).toMatchObject({ content: "", toolCalls: [{ id: "c_0", name: "get", arguments: "{id: 7}" }], malformed: 1 });
    expect(bad.errors).toEqual([expect.stringMatching(/^call 0: not valid JSON \(.+\)$/)]);
    expect(llama3ToolParser.parse("Hello there.", "c_")).toEqual({ content: "Hello there.", toolCalls: [], malformed: 0, errors: [] });
    // After <|python_tag|> the turn is a call: text that is not one is a malformed call, not content.
    const tagged = llama3ToolParser.parse("<|python_tag|>brave_search.call(query=1)", "c_");
    expect(tagged.malformed).toBe(1);
    expect(tagged.errors).toHaveLength(1);
    expect(toolParserForTemplate("{{- '<|python_tag|>' }}").name).toBe("llama3");
  });
});

describe("the parser of a tool format", () => {
  it("is the format's, by name, and an unknown format lists the choices", () => {
    expect(toolParserForFormat("hermes")).toBe(qwenToolParser);
    expect(toolParserForFormat("llama3-json")).toBe(llama3ToolParser);
    expect(toolParserForFormat("phi3-hermes")).toBe(phi3ToolParser);
    expect(() => toolParserForFormat("mistral")).toThrow('unknown tool format "mistral"; choose one of "hermes", "llama3-json", "phi3-hermes"');
  });

  it("follows the template's own tool format, else the family's, and a named format overrides both", () => {
    const silent = "{% for m in messages %}{{ m.content }}{% endfor %}";
    expect(toolParserFor(new ChatTemplate(silent)).name).toBe("plain");
    expect(toolParserFor(new ChatTemplate(silent, {}, "auto", "phi3-hermes")).name).toBe("phi3");
    // A template that writes <tool_call> is read as Hermes whatever the family (a Llama-shaped model trained on the Qwen format).
    expect(toolParserFor(new ChatTemplate("{{ '<tool_call>' }}", {}, "auto", "llama3-json")).name).toBe("qwen");
    expect(toolParserFor(new ChatTemplate("{{ '<tool_call>' }}"), "llama3-json").name).toBe("llama3");
  });
});
