/**
 * An OpenAI-compatible HTTP server over a sinkflex policy: `/v1/models`, `/v1/completions` (text or
 * token-id prompts) and `/v1/chat/completions` (tools and tool calls through the model's own chat
 * template and tool-call format), with streaming (server-sent events), log-probs, token ids
 * (`return_token_ids`, `return_tokens_as_token_ids`, as vLLM), `n` choices forked from one prefill,
 * the OpenAI error shape, an optional API key and limits on body size and tokens.
 *
 * Requests from concurrent clients are decoded together through the batch decoder. This file speaks
 * HTTP and JSON; loading a checkpoint is the CLI's job (src/cli/commands/serve.ts).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { ChatMessage, ToolCall, ToolSpec } from "../gym/chat.js";
import type { EngineSession, SampleParams } from "../engine/types.js";
import type { ChatTemplate } from "../model/chat-template.js";
import type { TokenCodec } from "../model/vocab.js";
import { BatchDecoder, type Sampler } from "../rollout/batch-decoder.js";
import { toolParserForTemplate, type ToolCallParser } from "../rollout/tool-parser.js";

export interface ServeOptions {
  sampler: Sampler;
  codec: TokenCodec;
  template: ChatTemplate;
  /** The model id clients send and `/v1/models` lists. */
  modelName: string;
  /** When set, requests need `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Request body limit in bytes. Default 4 MiB. */
  maxBodyBytes?: number;
  /** Largest `max_tokens` accepted. Default 4096. */
  maxTokens?: number;
  /** Prompt plus completion limit. Default 32768. */
  maxContextTokens?: number;
  /** Largest `n`. Default 16. */
  maxChoices?: number;
  parser?: ToolCallParser;
  templateVars?: Record<string, unknown>;
}

class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = "invalid_request_error",
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

type Json = Record<string, unknown>;

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res: ServerResponse, err: ApiError): void {
  sendJson(res, err.status, { error: { message: err.message, type: err.type, param: err.param, code: err.code } });
}

function readBody(req: IncomingMessage, limit: number): Promise<Json> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on("data", (c: Buffer) => {
      if (failed) return;
      size += c.length;
      if (size > limit) {
        failed = true;
        reject(new ApiError(413, `the request body is larger than ${limit} bytes; send a shorter prompt`, "invalid_request_error", null, "body_too_large"));
        req.resume();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => {
      if (failed) return;
      const text = Buffer.concat(chunks).toString("utf8");
      try {
        const v: unknown = text ? JSON.parse(text) : {};
        if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error("not an object");
        resolve(v as Json);
      } catch (e) {
        reject(new ApiError(400, `the request body is not a JSON object (${(e as Error).message})`));
      }
    });
    req.on("error", reject);
  });
}

function num(body: Json, key: string, def: number, min: number, max: number, integer = false): number {
  const v = body[key];
  if (v === undefined || v === null) return def;
  if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max || (integer && !Number.isInteger(v))) {
    throw new ApiError(400, `${key} must be ${integer ? "an integer" : "a number"} in [${min}, ${max}], got ${JSON.stringify(v)}`, "invalid_request_error", key);
  }
  return v;
}

function textContent(content: unknown, where: string): string {
  if (typeof content === "string") return content;
  if (content === null || content === undefined) return "";
  if (Array.isArray(content)) {
    return content
      .map((p: unknown) => {
        const part = p as { type?: string; text?: string };
        if (part?.type !== "text" || typeof part.text !== "string") throw new ApiError(400, `${where}: only text content parts are supported`, "invalid_request_error", "messages");
        return part.text;
      })
      .join("");
  }
  throw new ApiError(400, `${where}: content must be a string or an array of text parts`, "invalid_request_error", "messages");
}

/** OpenAI chat messages -> sinkflex messages. */
function toChatMessages(raw: unknown): ChatMessage[] {
  if (!Array.isArray(raw) || raw.length === 0) throw new ApiError(400, "messages must be a non-empty array", "invalid_request_error", "messages");
  return raw.map((m: unknown, i): ChatMessage => {
    const msg = m as Json;
    const where = `messages[${i}]`;
    switch (msg?.role) {
      case "system":
      case "developer":
        return { role: "system", content: textContent(msg.content, where) };
      case "user":
        return { role: "user", content: textContent(msg.content, where) };
      case "assistant": {
        const calls = (msg.tool_calls as Json[] | undefined)?.map((c, j): ToolCall => {
          const fn = c.function as { name?: unknown; arguments?: unknown } | undefined;
          if (!fn || typeof fn.name !== "string") throw new ApiError(400, `${where}.tool_calls[${j}] needs function.name`, "invalid_request_error", "messages");
          return { id: String(c.id ?? `call_${j}`), name: fn.name, arguments: typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments ?? {}) };
        });
        return { role: "assistant", content: textContent(msg.content, where), ...(calls?.length ? { toolCalls: calls } : {}) };
      }
      case "tool":
        return { role: "tool", toolCallId: String(msg.tool_call_id ?? ""), name: String(msg.name ?? ""), content: textContent(msg.content, where) };
      default:
        throw new ApiError(400, `${where}.role must be system, developer, user, assistant or tool, got ${JSON.stringify(msg?.role)}`, "invalid_request_error", "messages");
    }
  });
}

function toToolSpecs(raw: unknown): ToolSpec[] | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (!Array.isArray(raw)) throw new ApiError(400, "tools must be an array of {type: 'function', function: {...}}", "invalid_request_error", "tools");
  return raw.map((t: unknown, i) => {
    const fn = (t as { function?: { name?: unknown; description?: unknown; parameters?: unknown } }).function;
    if (!fn || typeof fn.name !== "string") throw new ApiError(400, `tools[${i}] needs function.name`, "invalid_request_error", "tools");
    return { name: fn.name, description: typeof fn.description === "string" ? fn.description : "", parameters: (fn.parameters as Json) ?? { type: "object", properties: {} } };
  });
}

export class OpenAIServer {
  private server: Server | undefined;
  private readonly decoder: BatchDecoder;
  private readonly parser: ToolCallParser;
  private readonly created = Math.floor(Date.now() / 1000);
  private counter = 0;

  constructor(readonly options: ServeOptions) {
    this.decoder = new BatchDecoder(options.sampler);
    this.parser = options.parser ?? toolParserForTemplate(options.template.source);
  }

  /** Listens on 127.0.0.1 (or `host`); port 0 picks a free port. Returns the base URL ending in /v1. */
  async listen(port = 0, host = "127.0.0.1"): Promise<string> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(port, host, () => resolve());
    });
    const addr = this.server.address() as AddressInfo;
    return `http://${host}:${addr.port}/v1`;
  }

  async close(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections?.();
    await new Promise<void>((r) => s.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const o = this.options;
      if (o.apiKey !== undefined && req.headers.authorization !== `Bearer ${o.apiKey}`) {
        throw new ApiError(401, "invalid or missing API key; send Authorization: Bearer <key>", "authentication_error", null, "invalid_api_key");
      }
      const path = (req.url ?? "/").split("?")[0]!.replace(/\/$/, "");
      if (req.method === "GET" && path === "/v1/models") {
        sendJson(res, 200, { object: "list", data: [{ id: o.modelName, object: "model", created: this.created, owned_by: "sinkflex" }] });
        return;
      }
      if (req.method === "POST" && (path === "/v1/completions" || path === "/v1/chat/completions")) {
        const body = await readBody(req, o.maxBodyBytes ?? 4 * 1024 * 1024);
        if (body.model !== undefined && body.model !== o.modelName) {
          throw new ApiError(404, `the model ${JSON.stringify(body.model)} does not exist; this server serves ${JSON.stringify(o.modelName)}`, "invalid_request_error", "model", "model_not_found");
        }
        if (path === "/v1/completions") await this.completions(body, res);
        else await this.chat(body, res);
        return;
      }
      throw new ApiError(404, `no route ${req.method} ${path}; try GET /v1/models, POST /v1/completions or POST /v1/chat/completions`, "invalid_request_error", null, "not_found");
    } catch (err) {
      if (res.headersSent) {
        res.end();
        return;
      }
      sendError(res, err instanceof ApiError ? err : new ApiError(500, `internal error: ${(err as Error).message}`, "server_error"));
    }
  }

  private sampling(body: Json, promptLength: number, defaultMax: number): { params: SampleParams; n: number } {
    const o = this.options;
    const maxCap = o.maxTokens ?? 4096;
    const maxTokens = num(body, body.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens", Math.min(defaultMax, maxCap), 1, maxCap, true);
    const context = o.maxContextTokens ?? 32768;
    if (promptLength + maxTokens > context) {
      throw new ApiError(400, `the prompt has ${promptLength} tokens and max_tokens is ${maxTokens}, more than this server's context limit of ${context}; shorten the prompt or lower max_tokens`, "invalid_request_error", "max_tokens", "context_length_exceeded");
    }
    const stopIds = body.stop_token_ids;
    if (stopIds !== undefined && (!Array.isArray(stopIds) || !stopIds.every((x) => Number.isInteger(x) && x >= 0 && x < o.codec.size))) {
      throw new ApiError(400, `stop_token_ids must be token ids in [0, ${o.codec.size - 1}]`, "invalid_request_error", "stop_token_ids");
    }
    const eos = o.codec.tokenizer.eosToken ? o.codec.tokenId(o.codec.tokenizer.eosToken) : undefined;
    const stopTokens = [...new Set([...(eos !== undefined && !body.ignore_eos ? [eos] : []), ...((stopIds as number[] | undefined) ?? [])])];
    const seed = body.seed === undefined || body.seed === null ? undefined : num(body, "seed", 0, 0, 2 ** 53, true);
    const topK = num(body, "top_k", 0, -1, 1e9, true);
    return {
      params: {
        temperature: num(body, "temperature", 1, 0, 2),
        topP: num(body, "top_p", 1, 1e-9, 1),
        topK: topK < 0 ? 0 : topK,
        seed,
        maxTokens,
        stopTokens,
      },
      n: num(body, "n", 1, 1, o.maxChoices ?? 16, true),
    };
  }

  private encodePrompt(prompt: unknown): number[] {
    const size = this.options.codec.size;
    if (typeof prompt === "string") return this.options.codec.encode(prompt);
    if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((x) => Number.isInteger(x))) {
      if (!prompt.every((x: number) => x >= 0 && x < size)) throw new ApiError(400, `prompt token ids must be in [0, ${size - 1}]`, "invalid_request_error", "prompt");
      return prompt as number[];
    }
    if (Array.isArray(prompt) && prompt.length === 1) return this.encodePrompt(prompt[0]);
    throw new ApiError(400, "prompt must be a non-empty string or an array of token ids (one prompt per request)", "invalid_request_error", "prompt");
  }

  /** Samples n choices from one prefilled prompt; `onTokens` streams each choice's tokens as they come. */
  private async generate(
    promptIds: number[],
    params: SampleParams,
    n: number,
    onTokens?: (choice: number, tokens: number[], logprobs: number[]) => void,
  ): Promise<{ tokens: number[]; logprobs: number[]; finish: "stop" | "length" }[]> {
    const root = await this.options.sampler.session(promptIds);
    const sessions: EngineSession[] = n === 1 ? [root] : Array.from({ length: n }, () => root.fork());
    try {
      const seedFor = (i: number, step: number) => (params.seed === undefined ? undefined : (params.seed + i * 1_000_003 + step * 7919) >>> 0);
      if (!onTokens) {
        const results = await Promise.all(sessions.map((s, i) => this.decoder.sample(s, { ...params, seed: seedFor(i, 0) })));
        return results.map((r) => ({ tokens: r.tokens, logprobs: r.logprobs, finish: r.finishReason }));
      }
      // Streaming: one token per decoding step, sent as soon as it is sampled.
      const out = sessions.map(() => ({ tokens: [] as number[], logprobs: [] as number[], finish: "length" as "stop" | "length" }));
      await Promise.all(
        sessions.map(async (s, i) => {
          for (let step = 0; step < params.maxTokens; step++) {
            const r = await this.decoder.sample(s, { ...params, maxTokens: 1, seed: seedFor(i, step) });
            out[i]!.tokens.push(...r.tokens);
            out[i]!.logprobs.push(...r.logprobs);
            onTokens(i, r.tokens, r.logprobs);
            if (r.finishReason === "stop" || r.tokens.length === 0) {
              out[i]!.finish = "stop";
              break;
            }
          }
        }),
      );
      return out;
    } finally {
      for (const s of sessions) s.close();
      if (n > 1) root.close();
    }
  }

  private tokenStrings(ids: number[], asIds: boolean): string[] {
    return ids.map((id) => (asIds ? `token_id:${id}` : this.options.codec.decode([id])));
  }

  private async completions(body: Json, res: ServerResponse): Promise<void> {
    const promptIds = this.encodePrompt(body.prompt);
    const { params, n } = this.sampling(body, promptIds.length, 16);
    const wantLogprobs = body.logprobs !== undefined && body.logprobs !== null && body.logprobs !== false;
    const asIds = body.return_tokens_as_token_ids === true;
    const withIds = body.return_token_ids === true;
    const id = `cmpl-${++this.counter}`;
    const codec = this.options.codec;
    const choiceLogprobs = (tokens: number[], lps: number[]) => (wantLogprobs ? { tokens: this.tokenStrings(tokens, asIds), token_logprobs: lps, top_logprobs: null } : null);
    if (body.stream === true) {
      startStream(res);
      const results = await this.generate(promptIds, params, n, (i, tokens, lps) =>
        writeEvent(res, { id, object: "text_completion", created: now(), model: this.options.modelName, choices: [{ index: i, text: codec.decode(tokens), logprobs: choiceLogprobs(tokens, lps), finish_reason: null, ...(withIds ? { token_ids: tokens } : {}) }] }),
      );
      results.forEach((r, i) => writeEvent(res, { id, object: "text_completion", created: now(), model: this.options.modelName, choices: [{ index: i, text: "", logprobs: null, finish_reason: r.finish }] }));
      endStream(res);
      return;
    }
    const results = await this.generate(promptIds, params, n);
    sendJson(res, 200, {
      id,
      object: "text_completion",
      created: now(),
      model: this.options.modelName,
      choices: results.map((r, i) => ({
        index: i,
        text: codec.decode(r.tokens),
        logprobs: choiceLogprobs(r.tokens, r.logprobs),
        finish_reason: r.finish,
        ...(withIds ? { token_ids: r.tokens, prompt_token_ids: promptIds } : {}),
      })),
      usage: usage(promptIds.length, results),
    });
  }

  private async chat(body: Json, res: ServerResponse): Promise<void> {
    const o = this.options;
    const messages = toChatMessages(body.messages);
    const tools = body.tool_choice === "none" ? undefined : toToolSpecs(body.tools);
    const text = o.template.render(messages, { tools, addGenerationPrompt: true, extra: { ...o.templateVars, ...(body.chat_template_kwargs as Json | undefined) } });
    const promptIds = o.codec.encode(text);
    // Without max_tokens, a chat reply may use whatever context is left (up to the server's cap).
    const room = (o.maxContextTokens ?? 32768) - promptIds.length;
    const { params, n } = this.sampling(body, promptIds.length, Math.max(1, Math.min(o.maxTokens ?? 4096, room)));
    const wantLogprobs = body.logprobs === true;
    const withIds = body.return_token_ids === true;
    const id = `chatcmpl-${++this.counter}`;
    const eos = params.stopTokens ?? [];
    const finishFor = (r: { tokens: number[]; finish: "stop" | "length" }, calls: ToolCall[]) => (calls.length > 0 ? "tool_calls" : r.finish);
    const logprobContent = (tokens: number[], lps: number[]) =>
      tokens.map((t, k) => {
        const s = o.codec.decode([t]);
        return { token: s, logprob: lps[k]!, bytes: [...Buffer.from(s, "utf8")], top_logprobs: [] };
      });
    const visible = (tokens: number[]) => (tokens.length && eos.includes(tokens[tokens.length - 1]!) ? tokens.slice(0, -1) : tokens);
    const toMessage = (calls: ToolCall[], content: string) => ({
      role: "assistant",
      content: content === "" && calls.length > 0 ? null : content,
      ...(calls.length ? { tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) } : {}),
    });
    if (body.stream === true) {
      startStream(res);
      const base = { id, object: "chat.completion.chunk", created: now(), model: o.modelName };
      const held = Array.from({ length: n }, () => ({ text: "", sent: 0, inCall: false }));
      for (let i = 0; i < n; i++) writeEvent(res, { ...base, choices: [{ index: i, delta: { role: "assistant", content: "" }, finish_reason: null }] });
      const results = await this.generate(promptIds, params, n, (i, tokens, lps) => {
        const h = held[i]!;
        h.text += o.codec.decode(visible(tokens));
        // Stream plain text; hold back anything that may be the start of a tool call.
        const callAt = h.text.indexOf("<tool_call>");
        if (callAt >= 0) h.inCall = true;
        let safe = callAt >= 0 ? callAt : h.text.length;
        for (let k = Math.min("<tool_call>".length - 1, safe); k > 0; k--) {
          if ("<tool_call>".startsWith(h.text.slice(safe - k, safe))) {
            safe -= k;
            break;
          }
        }
        if (safe > h.sent) {
          writeEvent(res, { ...base, choices: [{ index: i, delta: { content: h.text.slice(h.sent, safe) }, logprobs: wantLogprobs ? { content: logprobContent(tokens, lps) } : null, finish_reason: null }] });
          h.sent = safe;
        }
      });
      results.forEach((r, i) => {
        const h = held[i]!;
        const parsed = this.parser.parse(h.text, `call_${this.counter}_${i}_`);
        const rest = h.inCall ? "" : h.text.slice(h.sent);
        const delta: Json = {};
        if (rest) delta.content = rest;
        if (parsed.toolCalls.length) delta.tool_calls = parsed.toolCalls.map((c, k) => ({ index: k, id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
        writeEvent(res, { ...base, choices: [{ index: i, delta, finish_reason: finishFor(r, parsed.toolCalls) }], ...(withIds ? { token_ids: r.tokens } : {}) });
      });
      endStream(res);
      return;
    }
    const results = await this.generate(promptIds, params, n);
    sendJson(res, 200, {
      id,
      object: "chat.completion",
      created: now(),
      model: o.modelName,
      choices: results.map((r, i) => {
        const parsed = this.parser.parse(o.codec.decode(visible(r.tokens)), `call_${this.counter}_${i}_`);
        return {
          index: i,
          message: toMessage(parsed.toolCalls, parsed.content),
          logprobs: wantLogprobs ? { content: logprobContent(r.tokens, r.logprobs) } : null,
          finish_reason: finishFor(r, parsed.toolCalls),
          ...(withIds ? { token_ids: r.tokens } : {}),
        };
      }),
      ...(withIds ? { prompt_token_ids: promptIds } : {}),
      usage: usage(promptIds.length, results),
    });
  }
}

function now(): number {
  return Math.floor(Date.now() / 1000);
}

function usage(prompt: number, results: { tokens: number[] }[]) {
  const completion = results.reduce((a, r) => a + r.tokens.length, 0);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

function startStream(res: ServerResponse): void {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
}

function writeEvent(res: ServerResponse, data: unknown): void {
  res.write(`data: ${JSON.stringify(data)}\n\n`);
}

function endStream(res: ServerResponse): void {
  res.write("data: [DONE]\n\n");
  res.end();
}
