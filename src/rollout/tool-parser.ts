/**
 * Tool-call parsers: the sampled text of one assistant turn -> its content and its tool calls, one
 * parser per tool format (src/model/families/tool-formats.ts):
 *
 *   hermes (Qwen2.5, Qwen3)  `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks
 *   llama3-json (Llama 3.1)  the whole turn is `{"name": ..., "parameters": {...}}`, optionally after
 *                            `<|python_tag|>`
 *   phi3-hermes (Phi-3)      the Hermes blocks, written as plain text in Phi-3's turns
 *
 * The rollout takes the parser of the chat template's tool format (the checkpoint family's), or the
 * one a config names (`rollout.toolFormat`). A call that cannot be read is not dropped: it goes to the
 * environment as it was written (`arguments` is raw text, possibly malformed), the turn counts it as
 * malformed and says why in `errors`, and the environment answers with an error observation the agent
 * can recover from. This file parses text only; it does not tokenize and does not validate arguments
 * against a schema.
 */
import type { AgentTurn, ToolCall } from "../core/index.js";
import { TOOL_FORMATS, type ChatTemplate, type ToolFormat } from "../model/index.js";

export interface ToolCallParser {
  /** The family name, e.g. "qwen". */
  readonly name: string;
  /** Splits one assistant turn's text (without its end-of-turn token) into content and tool calls. */
  parse(text: string, callIdPrefix: string): ParsedTurn;
}

export interface ParsedTurn extends AgentTurn {
  /** Calls that could not be read as `{"name", "arguments"}` JSON (they are still in `toolCalls`). */
  malformed: number;
  /** Why each malformed call could not be read, one line each ("call 0: ..."); empty when none. */
  errors: string[];
}

/** What JSON.parse said about `text`, or null when it parses. */
function jsonError(text: string): string | null {
  try {
    JSON.parse(text);
    return null;
  } catch (err) {
    return (err as Error).message;
  }
}

/** Why a call's text is not a `{"name": string, <argsKey>: object}` JSON object. */
function callError(inner: string, argsKey: string): string {
  const err = jsonError(inner);
  if (err !== null) return `not valid JSON (${err})`;
  const obj: unknown = JSON.parse(inner);
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return `not a JSON object`;
  return `no string "name"; write {"name": ..., "${argsKey}": {...}}`;
}

const ARGUMENTS_TEXT = /^\s*\{\s*"name"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*"arguments"\s*:\s*([\s\S]*?)\s*\}\s*$/;
const NAME_TEXT = /"name"\s*:\s*"((?:[^"\\]|\\.)*)"/;
const LOOSE_ARGUMENTS = /"arguments"\s*:\s*([\s\S]*)$/;

function readCall(inner: string, id: string): { call: ToolCall; malformed: boolean; error?: string } {
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
  return { call: { id, name, arguments: loose.trim() }, malformed: true, error: callError(inner, "arguments") };
}

/** Hermes `<tool_call>` blocks in `text`, read as `name` (the Qwen and Phi-3 formats). */
function parseHermes(text: string, callIdPrefix: string): ParsedTurn {
  const toolCalls: ToolCall[] = [];
  const errors: string[] = [];
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
    const index = toolCalls.length;
    const { call, malformed: bad, error } = readCall(inner.trim(), `${callIdPrefix}${index}`);
    toolCalls.push(call);
    if (bad || close < 0) {
      malformed++;
      errors.push(`call ${index}: ${close < 0 ? "<tool_call> is not closed by </tool_call>" : error}`);
    }
    if (close < 0) break;
    pos = close + "</tool_call>".length;
  }
  return { content: content.trim(), toolCalls, malformed, errors };
}

/** The Qwen / Hermes `<tool_call>` JSON format. */
export const qwenToolParser: ToolCallParser = {
  name: "qwen",
  parse: parseHermes,
};

/**
 * Phi-3's format: its published template has no tool format, so sinkflex's convention writes Hermes
 * `<tool_call>` blocks as plain text in the assistant's turn (src/model/chat-template.ts, toolsIntoText).
 */
export const phi3ToolParser: ToolCallParser = {
  name: "phi3",
  parse: parseHermes,
};

/**
 * The Llama 3.1 / 3.2 JSON format: a turn that is a tool call is one JSON object
 * `{"name": ..., "parameters": {...}}` (optionally after `<|python_tag|>`); anything else is content.
 */
export const llama3ToolParser: ToolCallParser = {
  name: "llama3",
  parse(text, callIdPrefix) {
    const tagged = /^\s*<\|python_tag\|>/.test(text);
    const body = text.replace(/^\s*<\|python_tag\|>/, "").trim();
    if (!tagged && (!body.startsWith("{") || !/"name"\s*:/.test(body))) return { content: text.trim(), toolCalls: [], malformed: 0, errors: [] };
    try {
      const obj = JSON.parse(body) as { name?: unknown; parameters?: unknown; arguments?: unknown };
      if (obj !== null && typeof obj === "object" && !Array.isArray(obj) && typeof obj.name === "string") {
        return { content: "", toolCalls: [{ id: `${callIdPrefix}0`, name: obj.name, arguments: JSON.stringify(obj.parameters ?? obj.arguments ?? {}) }], malformed: 0, errors: [] };
      }
    } catch {
      // Falls through: a call that cannot be read goes to the env as written.
    }
    const name = NAME_TEXT.exec(body)?.[1] ?? "";
    const args = /"(?:parameters|arguments)"\s*:\s*([\s\S]*)$/.exec(body)?.[1]?.replace(/\}\s*$/, "").trim() ?? body;
    return { content: "", toolCalls: [{ id: `${callIdPrefix}0`, name, arguments: args }], malformed: 1, errors: [`call 0: ${callError(body, "parameters")}`] };
  },
};

/** No tool calls: the whole text is the content (for models without a tool format). */
export const plainTextParser: ToolCallParser = {
  name: "plain",
  parse(text) {
    return { content: text.trim(), toolCalls: [], malformed: 0, errors: [] };
  },
};

const parsers = new Map<string, ToolCallParser>([
  [qwenToolParser.name, qwenToolParser],
  [llama3ToolParser.name, llama3ToolParser],
  [phi3ToolParser.name, phi3ToolParser],
  [plainTextParser.name, plainTextParser],
]);

/** The parser of each tool format. */
export const TOOL_FORMAT_PARSERS: Readonly<Record<ToolFormat, ToolCallParser>> = {
  hermes: qwenToolParser,
  "llama3-json": llama3ToolParser,
  "phi3-hermes": phi3ToolParser,
};

/** A parser by name ("qwen", "llama3", "phi3", "plain"). */
export function toolParser(name: string): ToolCallParser {
  const p = parsers.get(name);
  if (!p) throw new Error(`unknown tool-call format "${name}"; known: ${[...parsers.keys()].join(", ")}`);
  return p;
}

/** The parser of a tool format ("hermes", "llama3-json", "phi3-hermes"); anything else is an error listing them. */
export function toolParserForFormat(format: string): ToolCallParser {
  const p = (TOOL_FORMAT_PARSERS as Record<string, ToolCallParser | undefined>)[format];
  if (!p) throw new Error(`unknown tool format ${JSON.stringify(format)}; choose one of ${TOOL_FORMATS.map((f) => `"${f}"`).join(", ")}`);
  return p;
}

/** The parser matching a chat template's text: "qwen" when it writes `<tool_call>`, "llama3" for Llama 3's JSON calls, else plain text. */
export function toolParserForTemplate(templateSource: string): ToolCallParser {
  if (templateSource.includes("<tool_call>")) return qwenToolParser;
  if (templateSource.includes("<|python_tag|>") || templateSource.includes('"parameters": ')) return llama3ToolParser;
  return plainTextParser;
}

/**
 * The parser a rollout uses with `template`: the named format's when one is given (a config's
 * `rollout.toolFormat`), else the template's tool format (its own text's, or the checkpoint family's),
 * else plain text.
 */
export function toolParserFor(template: ChatTemplate, format?: string): ToolCallParser {
  if (format !== undefined) return toolParserForFormat(format);
  return template.tools ? TOOL_FORMAT_PARSERS[template.tools.format] : plainTextParser;
}
