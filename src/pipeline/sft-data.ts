/**
 * Turns finished conversations (expert episodes, imported chat JSONL) into SFT examples: the token
 * ids a rollout would have produced for them, with the loss mask on the assistant turns only.
 *
 * The ids are built with the rollout's own incremental renderer, so an SFT example and a sampled
 * trajectory of the same conversation are the same tokens: the model is trained on exactly the layout
 * it will sample in. `readSftData` reads and checks the `sft.data` files against the envs they train.
 */
import { readFileSync } from "node:fs";
import type { AssistantMessage, ChatMessage, ToolSpec } from "../gym/index.js";
import { IncrementalRenderer } from "../rollout/index.js";
import type { SftExample } from "../rl/index.js";
import type { PolicyText } from "./policy.js";
import { makeChatEnv, type SuitePlan } from "./tasks.js";

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
  const eos = policy.template.endOfTurn ?? policy.tokenizer.eosToken!;
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
    const render = (count: number) => policy.template.render(conv.messages.slice(0, count), { tools: conv.tools, extra: policy.templateVars, addGenerationPrompt: false });
    let text: string;
    try {
      text = render(n);
    } catch (err) {
      // Llama 3.1's template puts the tools into the first user turn and refuses a conversation without one.
      if (conv.tools.length === 0 || conv.messages[n]?.role !== "user") throw err;
      text = render(n + 1);
    }
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

/** One `sft.data` file, read and checked against the env it trains. */
export interface SftDataFile {
  file: string;
  conversations: Conversation[];
}

/** The problems listed at most in one error (the rest are counted). */
const MAX_LISTED_PROBLEMS = 30;

/** JSON with object keys sorted, for comparing tool specs whatever their key order. */
function canonical(x: unknown): string {
  if (Array.isArray(x)) return `[${x.map(canonical).join(",")}]`;
  if (x && typeof x === "object") {
    return `{${Object.keys(x).sort().filter((k) => (x as Record<string, unknown>)[k] !== undefined).map((k) => `${JSON.stringify(k)}:${canonical((x as Record<string, unknown>)[k])}`).join(",")}}`;
  }
  return JSON.stringify(x);
}

/** The tools a reset of the plan's env shows (its first training task). */
async function envTools(plan: SuitePlan): Promise<ToolSpec[]> {
  const env = await makeChatEnv(plan.envId, plan.options);
  try {
    const [obs] = await env.reset({ seed: 0, options: { taskIndex: plan.trainTasks[0] ?? 0 } });
    return obs.tools ?? [];
  } finally {
    await env.close();
  }
}

/** What a conversation opens with (its messages before the first assistant turn), as a comparable key. */
function openingKey(messages: readonly { role?: unknown; content?: unknown }[]): string {
  const first = messages.findIndex((m) => m.role === "assistant");
  return canonical(messages.slice(0, first < 0 ? messages.length : first).map((m) => ({ role: m.role, content: m.content ?? "" })));
}

/**
 * Checks one parsed JSONL record against the tools of the suites: `tools` present and equal to one
 * suite's env tools, every tool call naming one of them with arguments as a JSON string (an object is
 * counted in `converted`), every tool result answering a call of the assistant turn before it, and
 * every call answered. Returns the problems (empty when the record is sound).
 */
function recordProblems(rec: Record<string, unknown>, suites: { name: string; tools: ToolSpec[] }[], converted: { n: number }): string[] {
  const problems: string[] = [];
  const envList = (tools: ToolSpec[]) => tools.map((t) => t.name).join(", ");
  if (!Array.isArray(rec.messages)) return ['expected an object with a "messages" array (and the env\'s "tools")'];
  const messages = rec.messages as Record<string, any>[];
  let tools: ToolSpec[] = [];
  if (!Array.isArray(rec.tools) || rec.tools.length === 0) {
    problems.push(`no "tools": list the env's tool specs, each {"type": "function", "function": {name, description, parameters}} (the env's tools: ${suites.map((s) => `${s.name}: ${envList(s.tools)}`).join("; ")})`);
  } else {
    tools = (rec.tools as Record<string, any>[]).map((t) => (t && typeof t === "object" && t.function ? t.function : t) as ToolSpec);
    if (tools.some((t) => !t || typeof t.name !== "string")) problems.push('a "tools" entry has no name: each is {"type": "function", "function": {name, description, parameters}}');
    else {
      // The suite these tools are (equal names), or the closest one.
      const names = new Set(tools.map((t) => t.name));
      const overlap = (s: { tools: ToolSpec[] }) => s.tools.filter((t) => names.has(t.name)).length - Math.abs(s.tools.length - names.size) / 1000;
      const suite = [...suites].sort((a, b) => overlap(b) - overlap(a))[0]!;
      const theirs = new Map(suite.tools.map((t) => [t.name, t]));
      const missing = suite.tools.filter((t) => !names.has(t.name)).map((t) => t.name);
      const extra = tools.filter((t) => !theirs.has(t.name)).map((t) => t.name);
      const differ = tools.filter((t) => theirs.has(t.name) && canonical(t) !== canonical(theirs.get(t.name))).map((t) => t.name);
      if (missing.length || extra.length || differ.length) {
        problems.push(
          `"tools" differ from the tools of ${suite.name} (${envList(suite.tools)}):` +
            (missing.length ? ` missing ${missing.join(", ")};` : "") +
            (extra.length ? ` not the env's: ${extra.join(", ")};` : "") +
            (differ.length ? ` description or parameters differ: ${differ.join(", ")};` : "") +
            " write the env's own tool specs (`sinkflex envs export-sft` writes them with an expert's episodes; toolSpec(tool) in code)",
        );
      }
    }
  }
  const known = new Set(tools.map((t) => t.name));
  if (!messages.some((m) => m?.role === "assistant")) problems.push("no assistant turn: nothing to train on");
  if (messages[0]?.role === "assistant") problems.push("message 0 is an assistant turn: a conversation opens with the system prompt or the user's message");
  let open = new Map<string, string>(); // the calls of the last assistant turn not yet answered: id -> tool name
  let openFrom = -1;
  const unanswered = () => [...open.keys()].map((id) => `message ${openFrom}: the call ${JSON.stringify(id)} has no tool result (a "tool" message with its tool_call_id)`);
  messages.forEach((m, k) => {
    const at = `message ${k}`;
    if (!m || typeof m !== "object") return problems.push(`${at}: not an object`);
    if (m.role === "assistant") {
      problems.push(...unanswered());
      open = new Map();
      openFrom = k;
      if (m.tool_calls === undefined) return;
      if (!Array.isArray(m.tool_calls)) return problems.push(`${at}: tool_calls must be an array`);
      (m.tool_calls as Record<string, any>[]).forEach((c, ci) => {
        const where = `${at}: tool_calls[${ci}]`;
        const name = c?.function?.name;
        if (typeof c?.id !== "string" || c.id === "") problems.push(`${where}: no "id" (the tool result names it in tool_call_id)`);
        else if (open.has(c.id)) problems.push(`${where}: the id ${JSON.stringify(c.id)} is used twice in this turn`);
        else open.set(c.id, String(name));
        if (typeof name !== "string") problems.push(`${where}: no function.name`);
        else if (tools.length && !known.has(name)) problems.push(`${where}: calls ${JSON.stringify(name)}, which is not one of the env's tools (${[...known].join(", ")})`);
        const args = c?.function?.arguments;
        if (typeof args === "string") {
          let parsed: unknown;
          try {
            parsed = args.trim() === "" ? {} : JSON.parse(args);
          } catch (err) {
            return problems.push(`${where}: arguments are not valid JSON (${(err as Error).message})`);
          }
          if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) problems.push(`${where}: arguments must be a JSON object, got ${args.slice(0, 60)}`);
        } else if (args && typeof args === "object" && !Array.isArray(args)) converted.n++;
        else problems.push(`${where}: arguments must be a JSON string of an object (as the OpenAI format has them), got ${JSON.stringify(args)}`);
      });
    } else if (m.role === "tool") {
      const id = m.tool_call_id;
      if (typeof id !== "string" || !open.has(id)) {
        problems.push(`${at}: tool_call_id ${JSON.stringify(id)} answers no unanswered call of the assistant turn before it${open.size ? ` (its calls waiting for results: ${[...open.keys()].join(", ")})` : ""}`);
      } else {
        if (m.name !== undefined && m.name !== open.get(id)) problems.push(`${at}: name ${JSON.stringify(m.name)} differs from the call's tool ${JSON.stringify(open.get(id))}`);
        open.delete(id);
      }
    } else if (m.role === "system" || m.role === "user") {
      problems.push(...unanswered());
      open = new Map();
    } else problems.push(`${at}: unknown role ${JSON.stringify(m.role)} (system, user, assistant or tool)`);
  });
  problems.push(...unanswered());
  return problems;
}

/**
 * Reads the `sft.data` files and checks every record against the suites' envs (see `recordProblems`):
 * every problem is named with its file and line, and any problem is an error. Tool-call arguments given
 * as objects are converted to JSON strings (said once per file). Conversations that open exactly as a
 * held-out task are reported through `warn` (they make the evaluation measure recall).
 */
export async function readSftData(files: readonly string[], plans: readonly SuitePlan[], warn: (msg: string) => void): Promise<SftDataFile[]> {
  if (files.length === 0) return [];
  const suites = await Promise.all(plans.map(async (p) => ({ name: p.name, tools: await envTools(p) })));
  const out: SftDataFile[] = [];
  const openings: { file: string; keys: string[] }[] = [];
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch (err) {
      throw new Error(`sft.data: cannot read ${file}: ${(err as Error).message}`);
    }
    const problems: string[] = [];
    const converted = { n: 0 };
    const keys: string[] = [];
    text.split("\n").forEach((line, n) => {
      if (!line.trim()) return;
      let rec: unknown;
      try {
        rec = JSON.parse(line);
      } catch (err) {
        return problems.push(`${file}:${n + 1}: not valid JSON (${(err as Error).message})`);
      }
      if (!rec || typeof rec !== "object" || Array.isArray(rec)) return problems.push(`${file}:${n + 1}: expected an object {messages, tools}`);
      for (const p of recordProblems(rec as Record<string, unknown>, suites, converted)) problems.push(`${file}:${n + 1}: ${p}`);
      if (Array.isArray((rec as { messages?: unknown }).messages)) keys.push(openingKey((rec as { messages: Record<string, unknown>[] }).messages));
    });
    if (problems.length > 0) {
      const listed = problems.slice(0, MAX_LISTED_PROBLEMS).map((p) => `  ${p}`);
      if (problems.length > MAX_LISTED_PROBLEMS) listed.push(`  ... and ${problems.length - MAX_LISTED_PROBLEMS} more`);
      throw new Error(`sft.data: ${problems.length} problem${problems.length === 1 ? "" : "s"} in ${file}; fix ${problems.length === 1 ? "it" : "them"} and run again:\n${listed.join("\n")}`);
    }
    if (converted.n > 0) warn(`sft.data: ${file}: ${converted.n} tool call${converted.n === 1 ? " has" : "s have"} arguments as a JSON object, not a JSON string (the OpenAI format); converted to strings`);
    out.push({ file, conversations: readChatJsonl(file) });
    openings.push({ file, keys });
  }
  // Demonstrations that open as a held-out task: the evaluation would then measure memory.
  for (const plan of plans) {
    const env = await makeChatEnv(plan.envId, plan.evalOptions);
    const held = new Map<string, number>();
    try {
      for (const t of plan.evalTasks) {
        const [obs] = await env.reset({ seed: 0, options: { taskIndex: t } });
        held.set(openingKey(obs.messages), t);
      }
    } finally {
      await env.close();
    }
    for (const { file, keys } of openings) {
      const hits = keys.filter((k) => held.has(k));
      if (hits.length === 0) continue;
      const tasks = new Set(hits.map((k) => held.get(k)!));
      warn(`sft.data: ${hits.length} conversation${hits.length === 1 ? "" : "s"} of ${file} open exactly as ${tasks.size} of the ${plan.evalTasks.length} held-out tasks of ${plan.name}: the evaluation then measures recall of the demonstrations, not generalization; leave those tasks out of the file, or hold out others (seed, evalOptions)`);
    }
  }
  return out;
}
