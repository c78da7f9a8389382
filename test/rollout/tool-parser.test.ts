/** The Qwen `<tool_call>` parser: content, exact argument text, malformed and unclosed calls. */
import { describe, expect, it } from "vitest";
import { llama3ToolParser, qwenToolParser, toolParser, toolParserForTemplate } from "../../src/rollout/tool-parser.js";

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
    const garbage = qwenToolParser.parse("<tool_call>\nnot json at all\n</tool_call>", "c_");
    expect(garbage.toolCalls).toEqual([{ id: "c_0", name: "", arguments: "not json at all" }]);
  });

  it("reads a call whose keys come in another order, and an unclosed call", () => {
    const r = qwenToolParser.parse('<tool_call>{"arguments": {"a": 1}, "name": "f"}</tool_call>', "c_");
    expect(r.toolCalls).toEqual([{ id: "c_0", name: "f", arguments: '{"a":1}' }]);
    const cut = qwenToolParser.parse('ok <tool_call>\n{"name": "f", "argu', "c_");
    expect(cut.content).toBe("ok");
    expect(cut.malformed).toBe(1);
    expect(cut.toolCalls[0]!.name).toBe("f");
  });

  it("returns plain text when there is no call", () => {
    expect(qwenToolParser.parse("  The answer is 42.\n", "c_")).toEqual({ content: "The answer is 42.", toolCalls: [], malformed: 0 });
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
    expect(bad).toEqual({ content: "", toolCalls: [{ id: "c_0", name: "get", arguments: "{id: 7}" }], malformed: 1 });
    expect(llama3ToolParser.parse("Hello there.", "c_")).toEqual({ content: "Hello there.", toolCalls: [], malformed: 0 });
    expect(toolParserForTemplate("{{- '<|python_tag|>' }}").name).toBe("llama3");
  });
});
