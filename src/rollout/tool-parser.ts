/**
 * Tool-call parsers: the sampled text of one assistant turn -> its content and its tool calls.
 *
 * The format is per model family; the Qwen family (Qwen2.5, Qwen3, Hermes style) writes each call as
 * `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`; Llama 3 writes one JSON object
 * `{"name": ..., "parameters": {...}}`. A call that cannot be read is not
 * dropped: it goes to the environment as it was written (`arguments` is raw text, possibly malformed),
 * and the environment answers with an error observation the agent can recover from. This file parses
 * text only; it does not tokenize and does not validate arguments against a schema.
 */
import type { AgentTurn, ToolCall } from "../core/index.js";

export interface ToolCallParser {
  /** The family name, e.g. "qwen". */
  readonly name: string;
  /** Splits one assistant turn's text (without its end-of-turn token) into content and tool calls. */
  parse(text: string, callIdPrefix: string): ParsedTurn;
}

export interface ParsedTurn extends AgentTurn {
  /** Calls that could not be read as `{"name", "arguments"}` JSON (they are still in `toolCalls`). */
  malformed: number;
}

const ARGUMENTS_TEXT = /^\s*\{\s*"name"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*"arguments"\s*:\s*([\s\S]*?)\s*\}\s*$/;
const NAME_TEXT = /"name"\s*:\s*"((?:[^"\\]|\\.)*)"/;
const LOOSE_ARGUMENTS = /"arguments"\s*:\s*([\s\S]*)$/;

function readCall(inner: string, id: string): { call: ToolCall; malformed: boolean } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(inner);
  } catch {
    parsed = undefined;
  }
  if (parsed && typeof parsed === "object" && !Array.isArray(parsed) && typeof (parsed as { name?: unknown }).name === "string") {
    const obj = parsed as { name: string; arguments?: unknown; parameters?: unknown };
    // Keep the arguments exactly as written when the call has the canonical layout, so that the
    // template re-renders the same text; otherwise serialize the parsed value.
    const exact = ARGUMENTS_TEXT.exec(inner);
    const args = exact ? exact[1]! : JSON.stringify(obj.arguments ?? obj.parameters ?? {});
    return { call: { id, name: obj.name, arguments: args }, malformed: false };
  }
  // Malformed: pass the name if it can be seen, and the arguments text as written.
  const name = NAME_TEXT.exec(inner)?.[1] ?? "";
  const loose = LOOSE_ARGUMENTS.exec(inner)?.[1]?.replace(/\}\s*$/, "") ?? inner;
  return { call: { id, name, arguments: loose.trim() }, malformed: true };
}

/** The Qwen / Hermes `<tool_call>` JSON format. */
export const qwenToolParser: ToolCallParser = {
  name: "qwen",
  parse(text, callIdPrefix) {
    const toolCalls: ToolCall[] = [];
    let malformed = 0;
    let content = "";
    let pos = 0;
    for (;;) {
      const open = text.indexOf("<tool_call>", pos);
      if (open < 0) {
        content += text.slice(pos);
        break;
      }
      content += text.slice(pos, open);
      const close = text.indexOf("</tool_call>", open);
      const inner = text.slice(open + "<tool_call>".length, close < 0 ? text.length : close);
      const { call, malformed: bad } = readCall(inner.trim(), `${callIdPrefix}${toolCalls.length}`);
      toolCalls.push(call);
      if (bad || close < 0) malformed++;
      if (close < 0) break;
      pos = close + "</tool_call>".length;
    }
    return { content: content.trim(), toolCalls, malformed };
  },
};

/**
 * The Llama 3.1 / 3.2 JSON format: a turn that is a tool call is one JSON object
 * `{"name": ..., "parameters": {...}}` (optionally after `<|python_tag|>`); anything else is content.
 */
export const llama3ToolParser: ToolCallParser = {
  name: "llama3",
  parse(text, callIdPrefix) {
    const body = text.replace(/^\s*<\|python_tag\|>/, "").trim();
    if (!body.startsWith("{") || !/"name"\s*:/.test(body)) return { content: text.trim(), toolCalls: [], malformed: 0 };
    try {
      const obj = JSON.parse(body) as { name?: unknown; parameters?: unknown; arguments?: unknown };
      if (typeof obj.name === "string") {
        return { content: "", toolCalls: [{ id: `${callIdPrefix}0`, name: obj.name, arguments: JSON.stringify(obj.parameters ?? obj.arguments ?? {}) }], malformed: 0 };
      }
    } catch {
      // Falls through: a call that cannot be read goes to the env as written.
    }
    const name = NAME_TEXT.exec(body)?.[1] ?? "";
    const args = /"(?:parameters|arguments)"\s*:\s*([\s\S]*)$/.exec(body)?.[1]?.replace(/\}\s*$/, "").trim() ?? body;
    return { content: "", toolCalls: [{ id: `${callIdPrefix}0`, name, arguments: args }], malformed: 1 };
  },
};

/** No tool calls: the whole text is the content (for models without a tool format). */
export const plainTextParser: ToolCallParser = {
  name: "plain",
  parse(text) {
    return { content: text.trim(), toolCalls: [], malformed: 0 };
  },
};

const parsers = new Map<string, ToolCallParser>([
  [qwenToolParser.name, qwenToolParser],
  [llama3ToolParser.name, llama3ToolParser],
  [plainTextParser.name, plainTextParser],
]);

/** A parser by family name ("qwen", "plain"). */
export function toolParser(name: string): ToolCallParser {
  const p = parsers.get(name);
  if (!p) throw new Error(`unknown tool-call format "${name}"; known: ${[...parsers.keys()].join(", ")}`);
  return p;
}

/** The parser matching a chat template: "qwen" when it writes `<tool_call>`, "llama3" for Llama 3's JSON calls, else plain text. */
export function toolParserForTemplate(templateSource: string): ToolCallParser {
  if (templateSource.includes("<tool_call>")) return qwenToolParser;
  if (templateSource.includes("<|python_tag|>") || templateSource.includes('"parameters": ')) return llama3ToolParser;
  return plainTextParser;
}
