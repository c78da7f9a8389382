/**
 * Turns finished conversations (expert episodes, imported chat JSONL) into SFT examples: the token
 * ids a rollout would have produced for them, with the loss mask on the assistant turns only.
 *
 * The ids are built with the rollout's own incremental renderer, so an SFT example and a sampled
 * trajectory of the same conversation are the same tokens: the model is trained on exactly the layout
 * it will sample in.
 */
import { readFileSync } from "node:fs";
import type { AssistantMessage, ChatMessage, ToolSpec } from "../gym/chat.js";
import { IncrementalRenderer } from "../rollout/renderer.js";
import type { SftExample } from "../rl/sft.js";
import type { PolicyText } from "./policy.js";

export interface Conversation {
  messages: ChatMessage[];
  tools: ToolSpec[];
}

/**
 * The text the model writes for an assistant turn (its content, tool calls and end-of-turn token).
 * `prompt`, when given, is `before` already rendered with the generation prompt.
 */
function assistantText(policy: PolicyText, before: readonly ChatMessage[], assistant: AssistantMessage, tools: ToolSpec[], prompt?: string): string {
  const opts = { tools, extra: policy.templateVars };
  prompt ??= policy.template.render(before, { ...opts, addGenerationPrompt: true });
  const full = policy.template.render([...before, assistant], { ...opts, addGenerationPrompt: false });
  if (!full.startsWith(prompt)) throw new Error("the chat template renders the conversation differently once an assistant turn is added");
  const eos = policy.tokenizer.eosToken!;
  const rest = full.slice(prompt.length);
  const end = rest.indexOf(eos);
  if (end < 0) throw new Error(`the chat template did not close the assistant turn with ${eos}`);
  return rest.slice(0, end + eos.length);
}

export function conversationToExample(policy: PolicyText, conv: Conversation): SftExample & { drifted: boolean } {
  const firstAssistant = conv.messages.findIndex((m) => m.role === "assistant");
  if (firstAssistant <= 0) throw new Error("a training conversation needs opening messages and at least one assistant turn");
  const renderer = new IncrementalRenderer(policy.codec, policy.template, { extra: policy.templateVars, onDrift: "flag" });
  const tokens: number[] = [];
  const mask: number[] = [];
  const push = (ids: number[], m: 0 | 1) => {
    for (const id of ids) {
      tokens.push(id);
      mask.push(m);
    }
  };
  push(renderer.start({ messages: conv.messages.slice(0, firstAssistant), tools: conv.tools }), 0);
  let drifted = false;
  const untrained: number[] = [];
  let i = firstAssistant;
  while (i < conv.messages.length) {
    const assistant = conv.messages[i] as AssistantMessage;
    if (assistant.role !== "assistant") throw new Error(`message ${i} should be an assistant turn, found ${assistant.role}`);
    let j = i + 1;
    while (j < conv.messages.length && conv.messages[j]!.role !== "assistant") j++;
    // Until a drift, the renderer holds the conversation so far rendered with the generation prompt: the prompt of this turn.
    const sampled = policy.codec.encode(assistantText(policy, renderer.conversation, assistant, conv.tools, drifted ? undefined : renderer.renderedText));
    if (assistant.weight === 0) untrained.push(tokens.length, tokens.length + sampled.length);
    push(sampled, assistant.weight === 0 ? 0 : 1);
    const observation = conv.messages.slice(i + 1, j);
    const next = renderer.extend(sampled, assistant, observation);
    if (next.kind !== "extend") drifted = true;
    if (j < conv.messages.length) push(next.ids, 0);
    i = j;
  }
  return { tokens, lossMask: Uint8Array.from(mask), contextStart: systemPromptLength(policy, conv, tokens), ...(untrained.length ? { untrained } : {}), drifted };
}

/**
 * The number of leading tokens that render the system prompt (with the tool list): what the
 * context-loss phase of SFT leaves out. The longest common prefix of the rendered system messages
 * and the conversation, so a token that straddles the boundary counts as context.
 */
const systemPromptIds = new WeakMap<PolicyText, Map<string, number[]>>();

function systemPromptLength(policy: PolicyText, conv: Conversation, tokens: number[]): number {
  let n = 0;
  while (n < conv.messages.length && conv.messages[n]!.role === "system") n++;
  if (n === 0) return 1;
  // A suite's system prompt is the same in every conversation: rendered and encoded once per policy.
  const key = JSON.stringify([conv.messages.slice(0, n), conv.tools]);
  let cache = systemPromptIds.get(policy);
  if (!cache) systemPromptIds.set(policy, (cache = new Map()));
  let system = cache.get(key);
  if (!system) {
    const text = policy.template.render(conv.messages.slice(0, n), { tools: conv.tools, extra: policy.templateVars, addGenerationPrompt: false });
    cache.set(key, (system = policy.codec.encode(text)));
  }
  let k = 0;
  while (k < system.length && k < tokens.length && system[k] === tokens[k]) k++;
  return Math.max(1, k);
}

/**
 * Reads OpenAI-chat JSONL ({messages, tools} per line, tool_calls in assistant messages; an assistant
 * message's `weight` 0 keeps it out of the loss, 1 or none trains on it).
 */
export function readChatJsonl(path: string): Conversation[] {
  const out: Conversation[] = [];
  readFileSync(path, "utf8")
    .split("\n")
    .forEach((line, n) => {
      if (!line.trim()) return;
      let rec: { messages?: unknown; tools?: unknown };
      try {
        rec = JSON.parse(line);
      } catch (err) {
        throw new Error(`${path}:${n + 1}: not valid JSON (${(err as Error).message})`);
      }
      if (!Array.isArray(rec.messages)) throw new Error(`${path}:${n + 1}: expected an object with a "messages" array`);
      const tools = Array.isArray(rec.tools) ? (rec.tools as { function?: ToolSpec }[]).map((t) => t.function ?? (t as ToolSpec)) : [];
      const messages = (rec.messages as Record<string, any>[]).map((m, k): ChatMessage => {
        const where = `${path}:${n + 1}: message ${k}`;
        if (m.role === "assistant") {
          const calls = Array.isArray(m.tool_calls)
            ? m.tool_calls.map((c: any, ci: number) => ({
                id: String(c.id ?? `call_${ci}`),
                name: String(c.function?.name ?? ""),
                arguments: typeof c.function?.arguments === "string" ? c.function.arguments : JSON.stringify(c.function?.arguments ?? {}),
              }))
            : [];
          if (m.weight !== undefined && m.weight !== 0 && m.weight !== 1) throw new Error(`${where}: weight must be 0 (not trained on) or 1, got ${JSON.stringify(m.weight)}`);
          return { role: "assistant", content: String(m.content ?? ""), ...(calls.length ? { toolCalls: calls } : {}), ...(m.weight === 0 ? { weight: 0 as const } : {}) };
        }
        if (m.role === "tool") return { role: "tool", toolCallId: String(m.tool_call_id ?? ""), name: String(m.name ?? ""), content: String(m.content ?? "") };
        if (m.role === "system" || m.role === "user") return { role: m.role, content: String(m.content ?? "") };
        throw new Error(`${where}: unknown role ${JSON.stringify(m.role)}`);
      });
      out.push({ messages, tools });
    });
  return out;
}
