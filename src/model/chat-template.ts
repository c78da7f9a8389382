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
 */
import { Template } from "@huggingface/jinja";
import type { ChatMessage, ToolSpec } from "../core/index.js";
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
  | { role: "tool"; tool_call_id: string; name: string; content: string };

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

/** Converts sinkflex messages to the Hugging Face message dicts chat templates read. */
export function toHfMessages(messages: readonly ChatMessage[], toolArguments: "raw" | "parsed" = "raw"): HfMessage[] {
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
        return { role: "tool", tool_call_id: m.toolCallId, name: m.name, content: m.content };
      default:
        throw new Error(`unknown chat message role ${JSON.stringify((m as { role: unknown }).role)}; expected system, user, assistant or tool`);
    }
  });
}

/** Converts tool specs to the OpenAI function-tool shape templates read. */
export function toHfTools(tools: readonly ToolSpec[]): HfTool[] {
  return tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } }));
}

export class ChatTemplate {
  private readonly template: Template;
  readonly toolArguments: "raw" | "parsed";

  constructor(
    readonly source: string,
    private readonly specials: { bosToken?: string; eosToken?: string; specialTokens?: readonly string[] } = {},
    toolArguments: ToolArgumentsMode = "auto",
  ) {
    try {
      this.template = new Template(source);
    } catch (err) {
      throw new Error(`the chat template does not parse as Jinja: ${(err as Error).message}`);
    }
    this.toolArguments = toolArguments === "auto" ? (/arguments\s+is\s+string/.test(source) ? "raw" : "parsed") : toolArguments;
  }

  /** The template of a tokenizer's `tokenizer_config.json`. */
  static fromTokenizer(tokenizer: Tokenizer, toolArguments: ToolArgumentsMode = "auto"): ChatTemplate {
    if (!tokenizer.chatTemplate) {
      throw new Error(
        `the tokenizer (${tokenizer.source}) has no chat_template; add one to tokenizer_config.json (or a chat_template.jinja file beside it)`,
      );
    }
    return new ChatTemplate(tokenizer.chatTemplate, { bosToken: tokenizer.bosToken, eosToken: tokenizer.eosToken, specialTokens: tokenizer.specialTokens }, toolArguments);
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
    const tools = options.tools && options.tools.length > 0 ? toHfTools(options.tools) : undefined;
    try {
      return this.template.render({
        messages: options.trustedAssistant
          ? toHfMessages(messages, this.toolArguments).map((m) => (m.role === "assistant" ? m : this.escape(m)))
          : this.escape(toHfMessages(messages, this.toolArguments)),
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
