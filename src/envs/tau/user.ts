/**
 * User simulators for the retail and airline envs: the customer the agent talks to.
 *
 * `ScriptedUser` is deterministic and driven by the task: it gives its identity when asked (name and
 * zip or email in retail, user id in airline, as the instruction states them), states the request
 * its gold actions describe, says yes only to a proposed change that names one of its pending gold
 * changes, and ends with `###STOP###` once they are all made. `LlmUser` plays the instruction through
 * any OpenAI-compatible chat endpoint, with the benchmark's convention that the user ends the
 * conversation by writing `###STOP###`. Neither knows the tools' implementations.
 */
import type { Collections, Domain } from "./db.js";
import { describeAction, mentions } from "./describe.js";
import { pyEqual } from "./pyjson.js";
import type { TauAction, TauTask } from "./tasks.js";
import { WRITE_TOOLS } from "./tools.js";

export const STOP = "###STOP###";

/** A tool call the agent made so far in the episode. */
export interface MadeCall {
  name: string;
  kwargs: Record<string, any>;
}

export interface UserSimulator {
  /** The user's first message. */
  start(): Promise<string>;
  /** The user's reply to the agent's message; `calls` are the agent's tool calls so far. */
  reply(agentMessage: string, calls: readonly MadeCall[]): Promise<string>;
}

/** How the user proves who they are, read from the instruction (the database as a fallback). */
export interface Identity {
  name?: { first: string; last: string };
  zip?: string;
  email?: string;
  userId?: string;
}

export function identityOf(domain: Domain, task: TauTask, base?: Collections): Identity {
  const text = task.instruction ?? "";
  if (domain === "airline") return { userId: /user id is ([A-Za-z0-9_]+)/i.exec(text)?.[1] ?? task.user_id };
  const email = /email is ([^\s,]+?)\.?(?:\s|$)/i.exec(text)?.[1];
  if (email) return { email };
  const nameZip = /name is ([A-Za-z'-]+) ([A-Za-z' -]+?) and your zip(?: code)? is (\d{5})/i.exec(text);
  if (nameZip) return { name: { first: nameZip[1]!, last: nameZip[2]! }, zip: nameZip[3]! };
  const user = base?.users?.[task.user_id];
  if (user) return { name: { first: user.name.first_name, last: user.name.last_name }, zip: user.address.zip };
  return {};
}

function identityText(id: Identity): string {
  if (id.userId) return `My user id is ${id.userId}.`;
  if (id.email) return `My email is ${id.email}.`;
  if (id.name && id.zip) return `My name is ${id.name.first} ${id.name.last} and my zip code is ${id.zip}.`;
  return "I'm sorry, I don't remember my details.";
}

const ASKS_IDENTITY = /(e-?mail|zip|user id|your name|full name|identif|verify|authenticat)/i;
const ASKS_CONFIRMATION = /(confirm|proceed|go ahead|shall i|should i|yes\/no|\(yes\))/i;

/** The instruction retold in the first person, without the identity and persona sentences. */
export function firstPersonRequest(instruction: string): string {
  return instruction
    .replace(/Your user id is \w+[.,]?\s*(?:and )?/i, "")
    .replace(/Your name is [^]*?\.(?=\s|$)\s*/i, "")
    .replace(/You are (?:[a-z]+, )*[a-z]+\.\s*/, "")
    .replace(/\bYou are\b/g, "I am")
    .replace(/\byou are\b/g, "I am")
    .replace(/\bYou've\b/g, "I've")
    .replace(/\byou've\b/g, "I've")
    .replace(/\bYour\b/g, "My")
    .replace(/\byour\b/g, "my")
    .replace(/\bYou\b/g, "I")
    .replace(/\byou(?= (?:need|want|will|would|can|could|do|did|don't|have|had|prefer|feel|think|just|also|currently|only|still|really|may|might|must|should|live|reside|wish|like|hope|know|remember|realize)\b)/g, "I")
    .replace(/\byou\b/g, "me")
    .trim();
}

/** The deterministic, task-driven user. */
export class ScriptedUser implements UserSimulator {
  private identityGiven = false;
  private requestStated = false;
  private turns = 0;
  private readonly identity: Identity;
  private readonly writes: TauAction[];
  private readonly wantsTransfer: boolean;

  constructor(
    private readonly domain: Domain,
    private readonly task: TauTask,
    base?: Collections,
    private readonly maxTurns = 40,
  ) {
    this.identity = identityOf(domain, task, base);
    this.writes = task.actions.filter((a) => WRITE_TOOLS[domain].has(a.name));
    this.wantsTransfer = task.actions.some((a) => a.name === "transfer_to_human_agents");
  }

  async start(): Promise<string> {
    return this.domain === "retail" ? "Hi, I need some help with my orders." : "Hi, I need some help with my reservations.";
  }

  /** The gold changes the agent has not made yet (each made call accounts for one of them). */
  pending(calls: readonly MadeCall[]): TauAction[] {
    const used = new Set<number>();
    return this.writes.filter((gold) => {
      const i = calls.findIndex((c, j) => !used.has(j) && c.name === gold.name && pyEqual(c.kwargs, gold.kwargs));
      if (i < 0) return true;
      used.add(i);
      return false;
    });
  }

  private request(pending: TauAction[]): string {
    const parts: string[] = [];
    if (pending.length > 0) parts.push(`I'd like to ${pending.map(describeAction).join("; and also ")}.`);
    if (this.wantsTransfer) parts.push(pending.length > 0 ? "After that, I'd like to be transferred to a human agent." : "I'd like to be transferred to a human agent.");
    if (this.task.outputs.length > 0) parts.push("Please also tell me the figures I'm asking about.");
    if (parts.length === 0) parts.push(firstPersonRequest(this.task.instruction) || "I have a question about my account.");
    return parts.join(" ");
  }

  async reply(agentMessage: string, calls: readonly MadeCall[]): Promise<string> {
    this.turns++;
    if (this.turns > this.maxTurns) return `I have to go now. ${STOP}`;
    const pending = this.pending(calls);
    if (!this.identityGiven && ASKS_IDENTITY.test(agentMessage)) {
      this.identityGiven = true;
      return identityText(this.identity);
    }
    if (ASKS_CONFIRMATION.test(agentMessage) && this.requestStated) {
      if (pending.some((a) => mentions(agentMessage, a))) return "Yes, please go ahead.";
      if (pending.length > 0) return `No, that is not what I want. ${this.request(pending)}`;
      if (this.wantsTransfer && /human|transfer/i.test(agentMessage)) return "Yes, please transfer me.";
      return "No, thank you.";
    }
    if (!this.requestStated) {
      this.requestStated = true;
      return this.request(pending);
    }
    if (pending.length > 0) return `Could you please ${describeAction(pending[0]!)}?`;
    if (this.wantsTransfer) return "I'd like to be transferred to a human agent, please.";
    return `Thank you, that's all I needed. ${STOP}`;
  }
}

export interface LlmUserOptions {
  /** Base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1 (env SINKFLEX_USER_LLM_BASE_URL). */
  baseUrl?: string;
  /** Model name (env SINKFLEX_USER_LLM_MODEL). */
  model?: string;
  /** API key, sent as a Bearer token when set (env SINKFLEX_USER_LLM_API_KEY). */
  apiKey?: string;
  temperature?: number;
  timeoutMs?: number;
}

/** The options with the environment's values filled in; an error says what is missing. */
export function resolveLlmUserOptions(options: LlmUserOptions = {}): Required<Omit<LlmUserOptions, "apiKey">> & { apiKey?: string } {
  const baseUrl = options.baseUrl ?? process.env.SINKFLEX_USER_LLM_BASE_URL;
  const model = options.model ?? process.env.SINKFLEX_USER_LLM_MODEL;
  if (!baseUrl || !model) {
    throw new Error(
      "the LLM user needs a base URL and a model: pass { userLlm: { baseUrl, model, apiKey } } or set SINKFLEX_USER_LLM_BASE_URL and SINKFLEX_USER_LLM_MODEL (and SINKFLEX_USER_LLM_API_KEY if the server wants one)",
    );
  }
  return {
    baseUrl,
    model,
    apiKey: options.apiKey ?? process.env.SINKFLEX_USER_LLM_API_KEY,
    temperature: options.temperature ?? 0,
    timeoutMs: options.timeoutMs ?? 60_000,
  };
}

export function llmUserSystemPrompt(task: TauTask): string {
  return [
    "You are a customer talking to a customer service agent. Your goal and the facts you know:",
    "",
    task.instruction,
    "",
    "Rules:",
    "- Write one short message at a time, as the customer would. Do not reveal the whole goal at once.",
    "- Only give facts from the goal above; if asked for something you do not know, say you do not know.",
    "- Never make up ids, names or numbers. Do not repeat the goal word for word; paraphrase it.",
    `- When your goal is met, or it cannot be met, write ${STOP} on its own to end the conversation.`,
  ].join("\n");
}

/** A user played by a language model behind an OpenAI-compatible `/chat/completions` endpoint. */
export class LlmUser implements UserSimulator {
  private readonly history: { role: "system" | "user" | "assistant"; content: string }[];
  private readonly options: ReturnType<typeof resolveLlmUserOptions>;

  constructor(task: TauTask, options: LlmUserOptions = {}) {
    this.options = resolveLlmUserOptions(options);
    this.history = [{ role: "system", content: llmUserSystemPrompt(task) }];
  }

  async start(): Promise<string> {
    return this.turn("Hi! How can I help you today?");
  }

  async reply(agentMessage: string): Promise<string> {
    return this.turn(agentMessage);
  }

  private async turn(agentMessage: string): Promise<string> {
    // The model plays the customer: the agent's words are its "user" turns.
    this.history.push({ role: "user", content: agentMessage });
    const url = `${this.options.baseUrl.replace(/\/+$/, "")}/chat/completions`;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.options.apiKey) headers.authorization = `Bearer ${this.options.apiKey}`;
    let response: Response;
    try {
      response = await fetch(url, {
        method: "POST",
        headers,
        body: JSON.stringify({ model: this.options.model, messages: this.history, temperature: this.options.temperature }),
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
    } catch (err) {
      throw new Error(`the user LLM at ${url} did not answer (${(err as Error).message}); check SINKFLEX_USER_LLM_BASE_URL and that the server is running`);
    }
    const body = await response.text();
    if (!response.ok) throw new Error(`the user LLM at ${url} answered HTTP ${response.status}: ${body.slice(0, 300)}; check the model name and API key`);
    let content: unknown;
    try {
      content = JSON.parse(body)?.choices?.[0]?.message?.content;
    } catch {
      content = undefined;
    }
    if (typeof content !== "string") throw new Error(`the user LLM at ${url} sent no choices[0].message.content: ${body.slice(0, 300)}`);
    this.history.push({ role: "assistant", content });
    return content;
  }
}
