/**
 * The chat template: a model's own Jinja template (from `tokenizer_config.json`) rendering sinkflex
 * chat messages to the exact text the model was trained on.
 *
 * `ChatMessage`s (src/core/chat.ts) are converted to the Hugging Face message dicts the templates expect
 * (`tool_calls: [{id, type: "function", function: {name, arguments}}]`, `tool_call_id`), and the
 * template is rendered with `@huggingface/jinja`. This file renders text only; turning text into token
 * ids is the tokenizer's job, and extending a trajectory turn by turn is the rollout renderer's.
 *
 * Every string of the messages and tools (content, names, ids, tool arguments and results, tool specs)
 * is escaped before rendering (`escapeSpecialText`), so that text holding a special token's text (a
 * user writing `<|im_end|>`) encodes as plain text: only the template's own structure yields special
 * tokens. Without the tokenizer's special tokens (`specials.specialTokens`) nothing is escaped.
 *
 * Tool calls follow the family's tool format (families/tool-formats.ts): tool results go to the template
 * in the format's role (`ipython` for Llama 3.1), and for a template with no tool format (Phi-3) the
 * tools, calls and results are first written into plain system, assistant and user turns
 * (`toolsIntoText`), so that the model's own template still renders every turn.
 */
import { Template } from "@huggingface/jinja";
import type { ChatMessage, ToolSpec } from "../core/index.js";
import { templateToolFormat, toolConvention, type ToolConvention, type ToolFormat } from "./families/tool-formats.js";
import { escapeSpecialText, type Tokenizer } from "./tokenizer.js";

/**
 * How tool-call arguments reach the template. Templates differ: the Qwen family writes a string
 * verbatim and an object through `tojson`; Llama 3 always applies `tojson`. `raw` passes the raw text
 * the model produced (token-exact for Qwen); `parsed` passes the parsed object when the text is valid
 * JSON (the Hugging Face datasets convention); `auto` picks `raw` when the template tests
 * `arguments is string`, else `parsed`.
 */
export type ToolArgumentsMode = "raw" | "parsed" | "auto";

export interface RenderOptions {
  tools?: ToolSpec[];
  /** Append the assistant header so that the model's reply comes next. */
  addGenerationPrompt?: boolean;
  /** Extra template variables, e.g. `{ enable_thinking: false }` for Qwen3. */
  extra?: Record<string, unknown>;
  /**
   * Assistant messages are the policy's own samples, whose token ids the caller holds (the rollout
   * renderer): rendered as sampled, not escaped, so that re-rendering reproduces the held text. Every other
   * message is still escaped. Never set it for assistant messages a client wrote (a server, the gateway).
   */
  trustedAssistant?: boolean;
}

export interface HfToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string | Record<string, unknown> };
}

export type HfMessage =
  | { role: "system" | "user"; content: string }
  | { role: "assistant"; content: string; tool_calls?: HfToolCall[] }
  | { role: "tool" | "ipython"; tool_call_id: string; name: string; content: string };

export interface HfTool {
  type: "function";
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

function parseArguments(raw: string): string | Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(raw);
    if (value !== null && typeof value === "object" && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // Malformed arguments stay the raw text: the template shows exactly what the model wrote.
  }
  return raw;
}

/** Converts sinkflex messages to the Hugging Face message dicts chat templates read; tool results get `toolRole`. */
export function toHfMessages(messages: readonly ChatMessage[], toolArguments: "raw" | "parsed" = "raw", toolRole: "tool" | "ipython" = "tool"): HfMessage[] {
  return messages.map((m): HfMessage => {
    switch (m.role) {
      case "system":
      case "user":
        return { role: m.role, content: m.content };
      case "assistant": {
        const out: HfMessage = { role: "assistant", content: m.content };
        if (m.toolCalls && m.toolCalls.length > 0) {
          out.tool_calls = m.toolCalls.map((c) => ({
            id: c.id,
            type: "function",
            function: { name: c.name, arguments: toolArguments === "parsed" ? parseArguments(c.arguments) : c.arguments },
          }));
        }
        return out;
      }
      case "tool":
        return { role: toolRole, tool_call_id: m.toolCallId, name: m.name, content: m.content };
      default:
        throw new Error(`unknown chat message role ${JSON.stringify((m as { role: unknown }).role)}; expected system, user, assistant or tool`);
    }
  });
}

/** Converts tool specs to the OpenAI function-tool shape templates read. */
export function toHfTools(tools: readonly ToolSpec[]): HfTool[] {
  return tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } }));
}

/** JSON as Python's json.dumps writes it by default (", " and ": "), the layout of the Hermes blocks. */
function spacedJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(spacedJson).join(", ")}]`;
  if (value !== null && typeof value === "object") {
    return `{${Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined).map(([k, v]) => `${JSON.stringify(k)}: ${spacedJson(v)}`).join(", ")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/** The system text listing the tools in the Hermes convention (the words of Qwen2.5's template). */
export function hermesToolsText(tools: readonly ToolSpec[]): string {
  return (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" +
    toHfTools(tools).map((t) => `\n${spacedJson(t)}`).join("") +
    '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
  );
}

/** One call as a Hermes block; the arguments exactly as written. */
export function hermesCallText(call: { name: string; arguments: string }): string {
  return `<tool_call>\n{"name": ${JSON.stringify(call.name)}, "arguments": ${call.arguments}}\n</tool_call>`;
}

/**
 * A conversation with its tools, calls and results written into plain turns (for templates with no tool
 * format, Phi-3): the tool list ends the system turn (one is added when there is none), an assistant's
 * calls follow its content as Hermes blocks, and each tool result is a user turn
 * `<tool_response>\n...\n</tool_response>`. Every message maps to one message, so the rendering stays
 * prefix-stable wherever the template's is.
 */
export function toolsIntoText(messages: readonly ChatMessage[], tools: readonly ToolSpec[] | undefined): ChatMessage[] {
  const out = messages.map((m): ChatMessage => {
    if (m.role === "assistant" && m.toolCalls && m.toolCalls.length > 0) {
      return { role: "assistant", content: [m.content, ...m.toolCalls.map(hermesCallText)].filter((s) => s.length > 0).join("\n") };
    }
    if (m.role === "tool") return { role: "user", content: `<tool_response>\n${m.content}\n</tool_response>` };
    return m;
  });
  if (!tools || tools.length === 0) return out;
  const list = hermesToolsText(tools);
  const first = out[0];
  if (first?.role === "system") out[0] = { role: "system", content: first.content ? `${first.content}\n\n${list}` : list };
  else out.unshift({ role: "system", content: list });
  return out;
}

export class ChatTemplate {
  private readonly template: Template;
  readonly toolArguments: "raw" | "parsed";
  /**
   * The tool format: the one the template's own text declares (`<tool_call>`, Llama 3.1's JSON), else the
   * one given (the checkpoint family's); undefined when neither says (the rollout then reads no calls).
   */
  readonly tools: ToolConvention | undefined;

  constructor(
    readonly source: string,
    private readonly specials: { bosToken?: string; eosToken?: string; specialTokens?: readonly string[] } = {},
    toolArguments: ToolArgumentsMode = "auto",
    /** The family's tool format, used where the template's text declares none (Phi-3). */
    toolFormat?: ToolFormat,
  ) {
    try {
      this.template = new Template(source);
    } catch (err) {
      throw new Error(`the chat template does not parse as Jinja: ${(err as Error).message}`);
    }
    this.toolArguments = toolArguments === "auto" ? (/arguments\s+is\s+string/.test(source) ? "raw" : "parsed") : toolArguments;
    const format = templateToolFormat(source) ?? toolFormat;
    this.tools = format === undefined ? undefined : toolConvention(format);
  }

  /** The template of a tokenizer's `tokenizer_config.json`; `toolFormat` is the checkpoint family's. */
  static fromTokenizer(tokenizer: Tokenizer, toolArguments: ToolArgumentsMode = "auto", toolFormat?: ToolFormat): ChatTemplate {
    if (!tokenizer.chatTemplate) {
      throw new Error(
        `the tokenizer (${tokenizer.source}) has no chat_template; add one to tokenizer_config.json (or a chat_template.jinja file beside it)`,
      );
    }
    return new ChatTemplate(tokenizer.chatTemplate, { bosToken: tokenizer.bosToken, eosToken: tokenizer.eosToken, specialTokens: tokenizer.specialTokens }, toolArguments, toolFormat);
  }

  /** The token that ends an assistant turn: the tool format's (Phi-3: `<|end|>`), else the tokenizer's eos_token. */
  get endOfTurn(): string | undefined {
    return this.tools?.endOfTurn ?? this.specials.eosToken;
  }

  /**
   * `value` with every string in it (object keys too) escaped so that it encodes as plain text, never
   * as a special token. `render` does this to messages and tools; a caller passing outside text as a
   * template variable (`extra`) escapes it with this first.
   */
  escape<T>(value: T): T {
    const specials = this.specials.specialTokens;
    if (!specials || specials.length === 0) return value;
    // Copies only what changes: harmless messages come back as they were.
    const walk = (v: unknown): unknown => {
      if (typeof v === "string") return escapeSpecialText(v, specials);
      if (Array.isArray(v)) {
        const out = v.map(walk);
        return out.some((x, i) => x !== v[i]) ? out : v;
      }
      if (v !== null && typeof v === "object") {
        const entries = Object.entries(v);
        const out = entries.map(([k, x]) => [escapeSpecialText(k, specials), walk(x)] as const);
        return out.some(([k, x], i) => k !== entries[i]![0] || x !== entries[i]![1]) ? Object.fromEntries(out) : v;
      }
      return v;
    };
    return walk(value) as T;
  }

  /** Renders messages to text, exactly as the template says. */
  render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
    const inText = this.tools?.toolsInText === true;
    const tools = options.tools && options.tools.length > 0 && !inText ? toHfTools(options.tools) : undefined;
    const hf = toHfMessages(inText ? toolsIntoText(messages, options.tools) : messages, this.toolArguments, this.tools?.toolRole);
    try {
      return this.template.render({
        messages: options.trustedAssistant ? hf.map((m) => (m.role === "assistant" ? m : this.escape(m))) : this.escape(hf),
        ...(tools ? { tools: this.escape(tools) } : {}),
        add_generation_prompt: options.addGenerationPrompt ?? false,
        bos_token: this.specials.bosToken ?? "",
        eos_token: this.specials.eosToken ?? "",
        ...options.extra,
      });
    } catch (err) {
      throw new Error(`rendering the chat template failed: ${(err as Error).message}`);
    }
  }
}

/** Renders and encodes a conversation (the whole-context path; the rollout renderer extends ids instead). */
export function renderIds(tokenizer: Tokenizer, template: ChatTemplate, messages: readonly ChatMessage[], options: RenderOptions = {}): number[] {
  return tokenizer.encode(template.render(messages, options));
}
