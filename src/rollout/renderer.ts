/**
 * The incremental renderer: token-in/token-out conversation state for one trajectory.
 *
 * The prompt is rendered once with the chat template and encoded. After that, each turn only extends
 * the ids: the sampled tokens stay exactly as sampled, and the new ids are the template's framing of
 * the new messages (closing the assistant turn, the tool results or user reply, the generation prompt).
 * They are found by rendering the conversation as text and taking the part after what the trajectory
 * already holds; the history is never re-tokenized.
 *
 * The drift detector: the text the trajectory holds (plus the template's close of the assistant turn)
 * must be a prefix of the template's full rendering. When it is not — the template rewrites or drops
 * earlier content (Qwen3 drops past `<think>` blocks), or the model wrote a tool call in a layout the
 * template would write differently — a `DriftReport` says where, and the caller flags or splits the
 * trajectory. This file knows no engine and no environment.
 *
 * The end-of-turn token is the template's (`ChatTemplate.endOfTurn`: Phi-3's `<|end|>`, else the
 * tokenizer's eos_token). New framing is encoded as the text after that token, so a token that strips the
 * whitespace after it (Phi-3's `<|end|>`) strips it here too, as in a full encode.
 */
import type { AssistantMessage, ChatMessage, ChatObservation, ToolSpec } from "../core/index.js";
import type { ChatTemplate } from "../model/index.js";
import type { TokenCodec } from "../model/index.js";

export interface DriftReport {
  /** The turn after which the template's rendering stopped extending the trajectory (0-based). */
  turn: number;
  /** Character offset of the first difference in the conversation text. */
  offset: number;
  /** What the trajectory holds around the offset. */
  held: string;
  /** What the template renders there. */
  rendered: string;
}

export type ExtendResult =
  | { kind: "extend"; ids: number[] }
  /** The template is not prefix-stable here; `ids` frames only the new messages (flag mode). */
  | { kind: "drift"; ids: number[]; drift: DriftReport }
  /** Split mode: the trajectory restarts from `ids`, the template's full rendering. */
  | { kind: "split"; ids: number[]; drift: DriftReport };

export interface RendererOptions {
  /** Extra template variables (e.g. `{ enable_thinking: false }`). */
  extra?: Record<string, unknown>;
  /** On drift: keep extending and report it (`flag`), or restart from a full re-render (`split`). */
  onDrift?: "flag" | "split";
}

const MARKER = "\u0000sinkflex-marker\u0000";

function firstDifference(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a.charCodeAt(i) !== b.charCodeAt(i)) return i;
  return n;
}

/**
 * The text a template writes right after an assistant turn's end-of-turn token (Qwen: "\n"), found
 * by rendering a probe conversation.
 */
export function assistantCloseTail(template: ChatTemplate, eosToken: string, extra?: Record<string, unknown>): string {
  const probe = "sinkflex probe reply";
  const text = template.render(
    [
      { role: "user", content: "q" },
      { role: "assistant", content: probe },
      { role: "user", content: "r" },
    ],
    { extra },
  );
  const at = text.indexOf(probe);
  const eos = at < 0 ? -1 : text.indexOf(eosToken, at + probe.length);
  if (eos < 0) throw new Error(`the chat template does not end an assistant turn with the eos token ${JSON.stringify(eosToken)}; set the tokenizer's eos_token to the template's end-of-turn token`);
  const user = text.indexOf("r", eos + eosToken.length);
  const after = text.slice(eos + eosToken.length);
  // The tail is what comes before the next message's header; the header starts with the same text as
  // the first message's header, found by rendering the user message alone.
  const alone = template.render([{ role: "user", content: "r" }], { extra });
  const header = alone.slice(0, alone.indexOf("r"));
  const headerAt = header ? after.indexOf(header) : user - eos - eosToken.length;
  return headerAt > 0 ? after.slice(0, headerAt) : "";
}

/** assistantCloseTail per template, eos token and template variables (a renderer is made per episode). */
const closeTails = new WeakMap<ChatTemplate, Map<string, string>>();

export class IncrementalRenderer {
  private messages: ChatMessage[] = [];
  private tools: ToolSpec[] | undefined;
  /** The text of every id the trajectory holds, in order. */
  private text = "";
  private turn = 0;
  private readonly closeTail: string;
  private readonly eosToken: string;

  constructor(
    readonly codec: TokenCodec,
    readonly template: ChatTemplate,
    readonly options: RendererOptions = {},
  ) {
    const eos = template.endOfTurn ?? codec.tokenizer.eosToken;
    if (!eos) throw new Error(`the tokenizer (${codec.tokenizer.source}) has no eos_token; the renderer needs the end-of-turn token`);
    this.eosToken = eos;
    const key = `${eos}\u0000${JSON.stringify(options.extra ?? {})}`;
    let tails = closeTails.get(template);
    if (!tails) closeTails.set(template, (tails = new Map()));
    let tail = tails.get(key);
    if (tail === undefined) tails.set(key, (tail = assistantCloseTail(template, eos, options.extra)));
    this.closeTail = tail;
  }

  /** The model id of the end-of-turn token, the stop token for sampling. */
  get eosId(): number {
    return this.codec.tokenId(this.eosToken);
  }

  /**
   * The text held so far. Until the trajectory drifts it is exactly the template's rendering of
   * `conversation` with the generation prompt, so a caller can use it instead of rendering again.
   */
  get renderedText(): string {
    return this.text;
  }

  /** The conversation so far (opening messages, parsed assistant turns, observations). */
  get conversation(): readonly ChatMessage[] {
    return this.messages;
  }

  get toolSpecs(): readonly ToolSpec[] | undefined {
    return this.tools;
  }

  /** The prompt text of the opening observation (system, user, tools) with the generation prompt. */
  promptText(obs: ChatObservation): string {
    return this.template.render(obs.messages, { tools: obs.tools, addGenerationPrompt: true, extra: this.options.extra, trustedAssistant: true });
  }

  /** Starts the trajectory: the prompt's ids. `promptIds` may be given when already encoded (shared prefixes). */
  start(obs: ChatObservation, promptIds?: number[]): number[] {
    this.messages = [...obs.messages];
    this.tools = obs.tools;
    this.text = this.promptText(obs);
    this.turn = 0;
    return promptIds ?? this.codec.encode(this.text);
  }

  /**
   * Records a sampled assistant turn (its ids end with the end-of-turn token) and its parsed message,
   * then the observation's new messages; returns the ids to append before the next sample.
   */
  extend(sampledIds: readonly number[], assistant: AssistantMessage, newMessages: readonly ChatMessage[]): ExtendResult {
    const turn = this.turn++;
    this.text += this.codec.decode(sampledIds);
    const all = [...this.messages, assistant, ...newMessages];
    const full = this.template.render(all, { tools: this.tools, addGenerationPrompt: true, extra: this.options.extra, trustedAssistant: true });
    const held = this.text + this.closeTail;
    this.messages = all;
    if (full.startsWith(held)) {
      const ids = this.encodeAfterTurn(full.slice(this.text.length));
      this.text = full;
      return { kind: "extend", ids };
    }
    const offset = firstDifference(full, held);
    const drift: DriftReport = {
      turn,
      offset,
      held: held.slice(Math.max(0, offset - 40), offset + 80),
      rendered: full.slice(Math.max(0, offset - 40), offset + 80),
    };
    if (this.options.onDrift === "split") {
      this.text = full;
      return { kind: "split", ids: this.codec.encode(full), drift };
    }
    const added = this.closeTail + full.slice(this.newMessagesStart(full, all, newMessages.length));
    const ids = this.encodeAfterTurn(added);
    this.text += added;
    return { kind: "drift", ids, drift };
  }

  /**
   * The ids of text that follows the held text, which ends with the end-of-turn token: encoded after that
   * token, as a full encode would see it (a token with rstrip eats the whitespace after it), then dropped.
   */
  private encodeAfterTurn(text: string): number[] {
    if (!this.text.endsWith(this.eosToken)) return this.codec.encode(text);
    const ids = this.codec.encode(this.eosToken + text);
    if (ids[0] !== this.eosId) throw new Error(`the end-of-turn token ${JSON.stringify(this.eosToken)} does not encode to its own id; the tokenizer and the chat template disagree`);
    return ids.slice(1);
  }

  /** Where the framing of the last `count` messages starts in `full` (after the assistant's close). */
  private newMessagesStart(full: string, all: ChatMessage[], count: number): number {
    if (count === 0) return full.length;
    const marked = all.map((m, i) => (i === all.length - count ? { ...m, content: MARKER + m.content } : m));
    const withMarker = this.template.render(marked, { tools: this.tools, addGenerationPrompt: true, extra: this.options.extra, trustedAssistant: true });
    const p = firstDifference(full, withMarker);
    const eos = full.lastIndexOf(this.eosToken, p);
    if (eos < 0) return p;
    const start = eos + this.eosToken.length;
    return full.startsWith(this.closeTail, start) ? start + this.closeTail.length : start;
  }
}
