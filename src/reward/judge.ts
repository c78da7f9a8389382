/**
 * An LLM judge: scores a trajectory against a rubric through any OpenAI-compatible chat endpoint
 * (a hosted model, vLLM, or `sinkflex serve`).
 *
 * The judge must answer with one JSON object `{"score": <number in [0,1]>, "reason": "<text>"}`;
 * anything else is a parse error (retried, then reported), never a guessed score. Calls run with a
 * concurrency limit, a rate limit, a timeout and retries with backoff; answers are cached by the
 * hash of (model, rubric, transcript), in memory and optionally in a JSONL file.
 */
import { createHash } from "node:crypto";
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import type { ChatMessage } from "../gym/index.js";
import type { ComponentScore, RewardComponent, RewardInput } from "./rubric.js";

export interface JudgeOptions {
  /** e.g. http://127.0.0.1:8000/v1 */
  baseUrl: string;
  model: string;
  apiKey?: string;
  /** What a good trajectory is, in words. */
  rubric: string;
  name?: string;
  weight?: number;
  /** Simultaneous requests. Default 4. */
  concurrency?: number;
  /** Maximum request starts per second; 0 = unlimited. Default 0. */
  requestsPerSecond?: number;
  /** Per-request timeout. Default 30 s. */
  timeoutMs?: number;
  /** Retries after the first attempt (network errors, HTTP 429/5xx, unparseable answers). Default 2. */
  retries?: number;
  /** A JSONL file to persist the cache across runs. */
  cacheFile?: string;
  /** Characters of transcript sent at most (the head is cut). Default 24,000. */
  maxTranscriptChars?: number;
}

export class JudgeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "JudgeError";
  }
}

/** Parses the judge's answer strictly. Exported for tests. */
export function parseJudgeAnswer(text: string): { score: number; reason: string } {
  let value: unknown;
  try {
    value = JSON.parse(text.trim());
  } catch {
    throw new JudgeError(`the judge's answer is not a JSON object: ${JSON.stringify(text.slice(0, 200))}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new JudgeError("the judge's answer must be a JSON object with score and reason");
  const { score, reason } = value as { score?: unknown; reason?: unknown };
  if (typeof score !== "number" || !Number.isFinite(score) || score < 0 || score > 1) {
    throw new JudgeError(`the judge's "score" must be a number in [0, 1], got ${JSON.stringify(score)}`);
  }
  if (typeof reason !== "string") throw new JudgeError(`the judge's "reason" must be a string`);
  return { score, reason };
}

export function renderTranscript(messages: ChatMessage[]): string {
  return messages
    .filter((m) => m.role !== "system")
    .map((m) => {
      if (m.role === "assistant") {
        const calls = (m.toolCalls ?? []).map((c) => `\n  [tool call] ${c.name} ${c.arguments}`).join("");
        return `ASSISTANT: ${m.content}${calls}`;
      }
      if (m.role === "tool") return `TOOL ${m.name}: ${m.content}`;
      return `USER: ${m.content}`;
    })
    .join("\n");
}

export class LlmJudge implements RewardComponent {
  readonly name: string;
  readonly weight: number;
  private readonly cache = new Map<string, { score: number; reason: string }>();
  private active = 0;
  private readonly waiting: (() => void)[] = [];
  private nextStart = 0;
  /** Requests actually sent (cache hits excluded), for metrics and tests. */
  requests = 0;

  constructor(private readonly options: JudgeOptions) {
    if (!/^https?:\/\//.test(options.baseUrl)) throw new Error(`LlmJudge: baseUrl must be an http(s) URL, got "${options.baseUrl}"`);
    if (!options.model) throw new Error("LlmJudge: model is required");
    if (!options.rubric.trim()) throw new Error("LlmJudge: the rubric is empty");
    this.name = options.name ?? "judge";
    this.weight = options.weight ?? 1;
    if (options.cacheFile && existsSync(options.cacheFile)) {
      for (const line of readFileSync(options.cacheFile, "utf8").split("\n")) {
        if (!line.trim()) continue;
        try {
          const { key, score, reason } = JSON.parse(line) as { key: string; score: number; reason: string };
          this.cache.set(key, { score, reason });
        } catch {
          // A torn last line from an interrupted run: skip it.
        }
      }
    }
  }

  async score(input: RewardInput): Promise<ComponentScore> {
    const max = this.options.maxTranscriptChars ?? 24_000;
    let transcript = renderTranscript(input.messages);
    if (transcript.length > max) transcript = `[... ${transcript.length - max} characters cut]\n${transcript.slice(-max)}`;
    const key = createHash("sha256").update(JSON.stringify([this.options.model, this.options.rubric, input.task ?? "", transcript])).digest("hex");
    const cached = this.cache.get(key);
    if (cached) return { score: cached.score, evidence: { reason: cached.reason, cached: true } };
    const answer = await this.withSlot(() => this.ask(input.task, transcript));
    this.cache.set(key, answer);
    if (this.options.cacheFile) appendFileSync(this.options.cacheFile, `${JSON.stringify({ key, ...answer })}\n`);
    return { score: answer.score, evidence: { reason: answer.reason, cached: false } };
  }

  private async ask(task: string | undefined, transcript: string): Promise<{ score: number; reason: string }> {
    const retries = this.options.retries ?? 2;
    let lastError: unknown;
    for (let attempt = 0; attempt <= retries; attempt++) {
      if (attempt > 0) await sleep(Math.min(200 * 2 ** (attempt - 1), 5_000));
      try {
        const text = await this.request(task, transcript);
        return parseJudgeAnswer(text);
      } catch (err) {
        lastError = err;
        if (err instanceof FatalHttpError) break;
      }
    }
    throw new JudgeError(`the judge failed after ${retries + 1} attempt(s): ${lastError instanceof Error ? lastError.message : String(lastError)}`);
  }

  private async request(task: string | undefined, transcript: string): Promise<string> {
    await this.rateLimit();
    this.requests++;
    const body = {
      model: this.options.model,
      temperature: 0,
      messages: [
        {
          role: "system",
          content:
            "You grade an AI agent's conversation against a rubric. Answer with exactly one JSON object and nothing else: " +
            '{"score": <number from 0 to 1>, "reason": "<one sentence>"}.\nRubric:\n' +
            this.options.rubric,
        },
        { role: "user", content: `${task ? `Task:\n${task}\n\n` : ""}Conversation:\n${transcript}` },
      ],
    };
    const url = `${this.options.baseUrl.replace(/\/$/, "")}/chat/completions`;
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...(this.options.apiKey ? { authorization: `Bearer ${this.options.apiKey}` } : {}) },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(this.options.timeoutMs ?? 30_000),
    });
    const text = await response.text();
    if (!response.ok) {
      const message = `HTTP ${response.status} from ${url}: ${text.slice(0, 300)}`;
      if (response.status === 429 || response.status >= 500) throw new Error(message);
      throw new FatalHttpError(message);
    }
    let content: unknown;
    try {
      content = (JSON.parse(text) as { choices?: { message?: { content?: unknown } }[] }).choices?.[0]?.message?.content;
    } catch {
      throw new Error(`the endpoint returned a body that is not JSON: ${text.slice(0, 200)}`);
    }
    if (typeof content !== "string") throw new Error("the endpoint's answer has no choices[0].message.content");
    return content;
  }

  private async withSlot<T>(fn: () => Promise<T>): Promise<T> {
    const limit = Math.max(1, this.options.concurrency ?? 4);
    if (this.active >= limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.active++;
    try {
      return await fn();
    } finally {
      this.active--;
      this.waiting.shift()?.();
    }
  }

  private async rateLimit(): Promise<void> {
    const rps = this.options.requestsPerSecond ?? 0;
    if (rps <= 0) return;
    const now = Date.now();
    const start = Math.max(now, this.nextStart);
    this.nextStart = start + 1000 / rps;
    if (start > now) await sleep(start - now);
  }
}

class FatalHttpError extends Error {}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
