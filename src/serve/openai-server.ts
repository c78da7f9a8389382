/**
 * An OpenAI-compatible HTTP server over a sinkflex policy: `/v1/models`, `/v1/completions` (text or
 * token-id prompts) and `/v1/chat/completions` (tools and tool calls through the model's own chat
 * template and tool-call format), with streaming (server-sent events), log-probs, token ids
 * (`return_token_ids`, `return_tokens_as_token_ids`, as vLLM), `n` choices forked from one prefill,
 * the OpenAI error shape, an optional API key and limits on body size and tokens.
 *
 * Requests from concurrent clients are decoded together through the batch decoder. Hostile input is
 * answered with a 4xx that says what was wrong: text from messages never becomes a special token (the
 * chat template escapes it), malformed tool calls, tools and template variables are refused, a prompt
 * is checked against the context by a cheap bound before it is tokenized, and a client that goes away
 * stops its generation. Without an API key it only listens on loopback unless told `insecure`.
 *
 * This file speaks HTTP and JSON; loading a checkpoint is the CLI's job (src/cli/commands/serve.ts).
 */
import { timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { isIP, type AddressInfo } from "node:net";
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
  /** Prompt plus completion limit in tokens: at most the model's positions (`openServer` checks that). */
  maxContextTokens: number;
  /** When set, requests need `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Listen beyond loopback without an API key. */
  insecure?: boolean;
  /** Request body limit in bytes. Default 64 KiB plus 32 bytes per context token, at most 4 MiB. */
  maxBodyBytes?: number;
  /** Largest `max_tokens` accepted. Default 4096. */
  maxTokens?: number;
  /** Largest `n`. Default 16. */
  maxChoices?: number;
  parser?: ToolCallParser;
  templateVars?: Record<string, unknown>;
}

/** The default body limit for a context of `maxContextTokens`: room for the prompt's text and the JSON around it. */
export function defaultMaxBodyBytes(maxContextTokens: number): number {
  return Math.min(4 * 1024 * 1024, 64 * 1024 + 32 * maxContextTokens);
}

/** Whether `host` only accepts connections from this machine: 127.0.0.0/8, ::1 or localhost. */
export function isLoopbackHost(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, "$1");
  if (h === "localhost" || h === "::1") return true;
  const v4 = h.startsWith("::ffff:") ? h.slice("::ffff:".length) : h;
  return isIP(v4) === 4 && v4.startsWith("127.");
}

/**
 * Refuses to serve beyond loopback without an API key (anyone who reaches the address could use the
 * model) unless `insecure`; returns the warning to print when it is insecure, else undefined.
 */
export function checkExposure(host: string, apiKey: string | undefined, insecure = false): string | undefined {
  if (apiKey !== undefined && apiKey.length === 0) throw new Error("the API key is empty; set SINKFLEX_API_KEY (or --api-key) to a non-empty secret, or leave it unset on loopback");
  if (apiKey !== undefined || isLoopbackHost(host)) return undefined;
  if (!insecure) {
    throw new Error(
      `refusing to serve on ${host} without an API key: anyone who can reach that address could use the model. Set SINKFLEX_API_KEY (or --api-key), listen on 127.0.0.1, or pass --insecure to serve without a key anyway`,
    );
  }
  return `warning: serving on ${host} without an API key (--insecure): anyone who can reach that address can use the model`;
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

/** Thrown inside a request whose client went away: nothing more is sent. */
class ClientGone extends Error {}

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
    const declared = Number(req.headers["content-length"]);
    if (Number.isFinite(declared) && declared > limit) {
      reject(new ApiError(413, `the request body is ${declared} bytes, larger than ${limit} bytes; send a shorter prompt`, "invalid_request_error", null, "body_too_large"));
      req.resume();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const fail = (e: unknown) => {
      if (settled) return;
      settled = true;
      reject(e);
    };
    req.on("data", (c: Buffer) => {
      if (settled) return;
      size += c.length;
      if (size > limit) {
        fail(new ApiError(413, `the request body is larger than ${limit} bytes; send a shorter prompt`, "invalid_request_error", null, "body_too_large"));
        req.resume();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => {
      if (settled) return;
      settled = true;
      const text = Buffer.concat(chunks).toString("utf8");
      try {
        const v: unknown = text ? JSON.parse(text) : {};
        if (!isObject(v)) throw new Error("not an object");
        resolve(v);
      } catch (e) {
        reject(new ApiError(400, `the request body is not a JSON object (${(e as Error).message})`));
      }
    });
    req.on("error", fail);
    req.on("close", () => fail(new ClientGone("the client closed the connection before sending the whole body")));
  });
}

function isObject(v: unknown): v is Json {
  return v !== null && typeof v === "object" && !Array.isArray(v);
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
        if (!isObject(p) || p.type !== "text" || typeof p.text !== "string") throw new ApiError(400, `${where}: only text content parts are supported`, "invalid_request_error", "messages");
        return p.text;
      })
      .join("");
  }
  throw new ApiError(400, `${where}: content must be a string or an array of text parts`, "invalid_request_error", "messages");
}

const TOOL_CALL_SHAPE = "{id, type: 'function', function: {name, arguments}}";

/** One assistant tool call in the OpenAI shape -> a sinkflex tool call. */
function toToolCall(raw: unknown, where: string, defaultId: string): ToolCall {
  const bad = (what: string) => new ApiError(400, `${where} ${what}; each tool call is ${TOOL_CALL_SHAPE}`, "invalid_request_error", "messages");
  if (!isObject(raw)) throw bad(`must be an object, got ${JSON.stringify(raw)}`);
  if (raw.type !== undefined && raw.type !== "function") throw bad(`has type ${JSON.stringify(raw.type)}; only 'function' is supported`);
  if (raw.id !== undefined && raw.id !== null && (typeof raw.id !== "string" || raw.id === "")) throw bad("has an id that is not a non-empty string");
  const fn = raw.function;
  if (!isObject(fn)) throw bad("needs function: {name, arguments}");
  if (typeof fn.name !== "string" || fn.name === "") throw bad("needs function.name, a non-empty string");
  const args = fn.arguments;
  if (args !== undefined && args !== null && typeof args !== "string" && !isObject(args)) throw bad("has function.arguments that is neither a JSON string nor an object");
  return { id: typeof raw.id === "string" ? raw.id : defaultId, name: fn.name, arguments: typeof args === "string" ? args : JSON.stringify(args ?? {}) };
}

/** OpenAI chat messages -> sinkflex messages; a tool message must answer a tool call made before it. */
function toChatMessages(raw: unknown): ChatMessage[] {
  if (!Array.isArray(raw) || raw.length === 0) throw new ApiError(400, "messages must be a non-empty array", "invalid_request_error", "messages");
  const calls = new Map<string, string>();
  return raw.map((m: unknown, i): ChatMessage => {
    const where = `messages[${i}]`;
    if (!isObject(m)) throw new ApiError(400, `${where} must be an object {role, content}, got ${JSON.stringify(m)}`, "invalid_request_error", "messages");
    switch (m.role) {
      case "system":
      case "developer":
        return { role: "system", content: textContent(m.content, where) };
      case "user":
        return { role: "user", content: textContent(m.content, where) };
      case "assistant": {
        const rawCalls = m.tool_calls;
        if (rawCalls !== undefined && rawCalls !== null && !Array.isArray(rawCalls)) {
          throw new ApiError(400, `${where}.tool_calls must be an array of ${TOOL_CALL_SHAPE}, got ${JSON.stringify(rawCalls)}`, "invalid_request_error", "messages");
        }
        const toolCalls = ((rawCalls as unknown[] | null | undefined) ?? []).map((c, j) => toToolCall(c, `${where}.tool_calls[${j}]`, `call_${i}_${j}`));
        for (const c of toolCalls) calls.set(c.id, c.name);
        return { role: "assistant", content: textContent(m.content, where), ...(toolCalls.length ? { toolCalls } : {}) };
      }
      case "tool": {
        const id = m.tool_call_id;
        if (typeof id !== "string" || id === "") throw new ApiError(400, `${where}.tool_call_id must be the id of a tool call made by an earlier assistant message`, "invalid_request_error", "messages");
        const name = calls.get(id);
        if (name === undefined) {
          const known = [...calls.keys()];
          throw new ApiError(
            400,
            `${where}.tool_call_id ${JSON.stringify(id)} answers no tool call made before it (${known.length ? `known ids: ${known.map((k) => JSON.stringify(k)).join(", ")}` : "no assistant message before it made a tool call"})`,
            "invalid_request_error",
            "messages",
          );
        }
        if (m.name !== undefined && m.name !== null && typeof m.name !== "string") throw new ApiError(400, `${where}.name must be a string`, "invalid_request_error", "messages");
        return { role: "tool", toolCallId: id, name: typeof m.name === "string" && m.name !== "" ? m.name : name, content: textContent(m.content, where) };
      }
      default:
        throw new ApiError(400, `${where}.role must be system, developer, user, assistant or tool, got ${JSON.stringify(m.role)}`, "invalid_request_error", "messages");
    }
  });
}

function toToolSpecs(raw: unknown): ToolSpec[] | undefined {
  if (raw === undefined || raw === null) return undefined;
  const shape = "{type: 'function', function: {name, description, parameters}}";
  if (!Array.isArray(raw)) throw new ApiError(400, `tools must be an array of ${shape}`, "invalid_request_error", "tools");
  return raw.map((t: unknown, i) => {
    const bad = (what: string) => new ApiError(400, `tools[${i}] ${what}; each tool is ${shape}`, "invalid_request_error", "tools");
    if (!isObject(t)) throw bad(`must be an object, got ${JSON.stringify(t)}`);
    if (t.type !== undefined && t.type !== "function") throw bad(`has type ${JSON.stringify(t.type)}; only 'function' is supported`);
    const fn = t.function;
    if (!isObject(fn)) throw bad("needs function: {name, description, parameters}");
    if (typeof fn.name !== "string" || fn.name === "") throw bad("needs function.name, a non-empty string");
    if (fn.description !== undefined && fn.description !== null && typeof fn.description !== "string") throw bad("has a function.description that is not a string");
    if (fn.parameters !== undefined && fn.parameters !== null && !isObject(fn.parameters)) throw bad("has function.parameters that is not a JSON Schema object");
    return { name: fn.name, description: typeof fn.description === "string" ? fn.description : "", parameters: isObject(fn.parameters) ? fn.parameters : { type: "object", properties: {} } };
  });
}

/** Template variables the server sets itself; a client may not replace them through chat_template_kwargs. */
const RESERVED_TEMPLATE_VARS: Record<string, string> = {
  messages: "send the conversation as the request's messages",
  tools: "send tools as the request's tools field",
  add_generation_prompt: "the server always adds the generation prompt",
  bos_token: "the tokenizer's own token is used",
  eos_token: "the tokenizer's own token is used",
};

function templateKwargs(raw: unknown): Json {
  if (raw === undefined || raw === null) return {};
  if (!isObject(raw)) throw new ApiError(400, `chat_template_kwargs must be an object of template variables (e.g. {"enable_thinking": false}), got ${JSON.stringify(raw)}`, "invalid_request_error", "chat_template_kwargs");
  for (const key of Object.keys(raw)) {
    const why = RESERVED_TEMPLATE_VARS[key];
    if (why !== undefined) throw new ApiError(400, `chat_template_kwargs.${key} is set by the server (${why}); remove it`, "invalid_request_error", "chat_template_kwargs");
  }
  return raw;
}

/** An upper bound on the bytes of text one token covers: no prompt shorter than bytes / this in tokens. */
function maxBytesPerToken(codec: TokenCodec): number {
  const tokenizer = codec.tokenizer;
  let longest = 1;
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    const t = tokenizer.idToToken(id);
    if (t !== undefined && t.length * 3 > longest) longest = Math.max(longest, Buffer.byteLength(t));
  }
  // A token's own string is never shorter in UTF-8 than the text it stands for (byte-level symbols,
  // metaspace, byte fallback); a normalizer may compose up to three code points into one, hence x3.
  return tokenizer.tokenizerJson.normalizer ? 3 * longest : longest;
}

export class OpenAIServer {
  private server: Server | undefined;
  private readonly decoder: BatchDecoder;
  private readonly parser: ToolCallParser;
  private readonly created = Math.floor(Date.now() / 1000);
  private counter = 0;
  private active = 0;
  private bytesPerToken: number | undefined;

  constructor(readonly options: ServeOptions) {
    if (!Number.isInteger(options.maxContextTokens) || options.maxContextTokens < 1) {
      throw new RangeError(`maxContextTokens must be a positive integer (at most the model's positions), got ${options.maxContextTokens}`);
    }
    this.decoder = new BatchDecoder(options.sampler);
    this.parser = options.parser ?? toolParserForTemplate(options.template.source);
  }

  /** Choices being decoded right now (each holds an engine session); 0 when the server is idle. */
  get activeGenerations(): number {
    return this.active;
  }

  /**
   * Listens on 127.0.0.1 (or `host`); port 0 picks a free port. Returns the base URL ending in /v1.
   * Beyond loopback it needs an API key, or `insecure` (see `checkExposure`).
   */
  async listen(port = 0, host = "127.0.0.1"): Promise<string> {
    checkExposure(host, this.options.apiKey, this.options.insecure);
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(port, host, () => resolve());
    });
    const addr = this.server.address() as AddressInfo;
    return `http://${host.includes(":") ? `[${host}]` : host}:${addr.port}/v1`;
  }

  async close(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections?.();
    await new Promise<void>((r) => s.close(() => r()));
  }

  private authorized(req: IncomingMessage): boolean {
    const key = this.options.apiKey;
    if (key === undefined) return true;
    const sent = Buffer.from(req.headers.authorization ?? "");
    const want = Buffer.from(`Bearer ${key}`);
    return sent.length === want.length && timingSafeEqual(sent, want);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // A client that goes away cancels its request's generation.
    const gone = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) gone.abort();
    });
    try {
      const o = this.options;
      if (!this.authorized(req)) {
        throw new ApiError(401, "invalid or missing API key; send Authorization: Bearer <key>", "authentication_error", null, "invalid_api_key");
      }
      const path = (req.url ?? "/").split("?")[0]!.replace(/\/$/, "");
      if (req.method === "GET" && path === "/v1/models") {
        sendJson(res, 200, { object: "list", data: [{ id: o.modelName, object: "model", created: this.created, owned_by: "sinkflex" }] });
        return;
      }
      if (req.method === "POST" && (path === "/v1/completions" || path === "/v1/chat/completions")) {
        const body = await readBody(req, o.maxBodyBytes ?? defaultMaxBodyBytes(o.maxContextTokens));
        if (body.model !== undefined && body.model !== o.modelName) {
          throw new ApiError(404, `the model ${JSON.stringify(body.model)} does not exist; this server serves ${JSON.stringify(o.modelName)}`, "invalid_request_error", "model", "model_not_found");
        }
        if (path === "/v1/completions") await this.completions(body, res, gone.signal);
        else await this.chat(body, res, gone.signal);
        return;
      }
      throw new ApiError(404, `no route ${req.method} ${path}; try GET /v1/models, POST /v1/completions or POST /v1/chat/completions`, "invalid_request_error", null, "not_found");
    } catch (err) {
      if (err instanceof ClientGone || gone.signal.aborted || res.destroyed) {
        res.destroy();
        return;
      }
      if (res.headersSent) {
        res.end();
        return;
      }
      sendError(res, err instanceof ApiError ? err : new ApiError(500, `internal error: ${(err as Error).message}`, "server_error"));
    }
  }

  /** Refuses, before tokenizing, text too long to fit the context even at the most bytes per token. */
  private checkTextFits(text: string, param: string): void {
    const context = this.options.maxContextTokens;
    this.bytesPerToken ??= maxBytesPerToken(this.options.codec);
    const bytes = Buffer.byteLength(text);
    const atLeast = Math.ceil(bytes / this.bytesPerToken);
    if (atLeast > context) {
      throw new ApiError(400, `the prompt is ${bytes} bytes, at least ${atLeast} tokens, more than this server's context limit of ${context}; shorten the prompt`, "invalid_request_error", param, "context_length_exceeded");
    }
  }

  private sampling(body: Json, promptLength: number, defaultMax: number): { params: SampleParams; n: number } {
    const o = this.options;
    const maxCap = o.maxTokens ?? 4096;
    const maxTokens = num(body, body.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens", Math.min(defaultMax, maxCap), 1, maxCap, true);
    const context = o.maxContextTokens;
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
    if (typeof prompt === "string") {
      this.checkTextFits(prompt, "prompt");
      return this.options.codec.encode(prompt);
    }
    if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((x) => Number.isInteger(x))) {
      if (!prompt.every((x: number) => x >= 0 && x < size)) throw new ApiError(400, `prompt token ids must be in [0, ${size - 1}]`, "invalid_request_error", "prompt");
      return prompt as number[];
    }
    if (Array.isArray(prompt) && prompt.length === 1) return this.encodePrompt(prompt[0]);
    throw new ApiError(400, "prompt must be a non-empty string or an array of token ids (one prompt per request)", "invalid_request_error", "prompt");
  }

  /**
   * Samples n choices from one prefilled prompt; `onTokens` streams each choice's tokens as they come.
   * Decoding goes a few tokens per call (one when streaming), and stops between calls once `signal`
   * aborts (the client went away); the sessions are closed either way.
   */
  private async generate(
    promptIds: number[],
    params: SampleParams,
    n: number,
    signal: AbortSignal,
    onTokens?: (choice: number, tokens: number[], logprobs: number[]) => void,
  ): Promise<{ tokens: number[]; logprobs: number[]; finish: "stop" | "length" }[]> {
    if (signal.aborted) throw new ClientGone("the client went away");
    const root = await this.options.sampler.session(promptIds);
    const sessions: EngineSession[] = n === 1 ? [root] : Array.from({ length: n }, () => root.fork());
    const chunk = onTokens ? 1 : 16;
    this.active += n;
    try {
      const seedFor = (i: number, step: number) => (params.seed === undefined ? undefined : (params.seed + i * 1_000_003 + step * 7919) >>> 0);
      const out = sessions.map(() => ({ tokens: [] as number[], logprobs: [] as number[], finish: "length" as "stop" | "length" }));
      // Every choice settles before the sessions close (none is still decoding when they do).
      const settled = await Promise.allSettled(
        sessions.map(async (s, i) => {
          try {
            for (let step = 0; out[i]!.tokens.length < params.maxTokens && !signal.aborted; step++) {
              const r = await this.decoder.sample(s, { ...params, maxTokens: Math.min(chunk, params.maxTokens - out[i]!.tokens.length), seed: seedFor(i, step) });
              out[i]!.tokens.push(...r.tokens);
              out[i]!.logprobs.push(...r.logprobs);
              if (!signal.aborted) onTokens?.(i, r.tokens, r.logprobs);
              if (r.finishReason === "stop" || r.tokens.length === 0) {
                out[i]!.finish = "stop";
                break;
              }
            }
          } finally {
            this.active--;
          }
        }),
      );
      const failed = settled.find((r) => r.status === "rejected");
      if (failed) throw failed.reason;
      if (signal.aborted) throw new ClientGone("the client went away");
      return out;
    } finally {
      for (const s of sessions) s.close();
      if (n > 1) root.close();
    }
  }

  private tokenStrings(ids: number[], asIds: boolean): string[] {
    return ids.map((id) => (asIds ? `token_id:${id}` : this.options.codec.decode([id])));
  }

  private async completions(body: Json, res: ServerResponse, signal: AbortSignal): Promise<void> {
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
      const results = await this.generate(promptIds, params, n, signal, (i, tokens, lps) =>
        writeEvent(res, { id, object: "text_completion", created: now(), model: this.options.modelName, choices: [{ index: i, text: codec.decode(tokens), logprobs: choiceLogprobs(tokens, lps), finish_reason: null, ...(withIds ? { token_ids: tokens } : {}) }] }),
      );
      results.forEach((r, i) => writeEvent(res, { id, object: "text_completion", created: now(), model: this.options.modelName, choices: [{ index: i, text: "", logprobs: null, finish_reason: r.finish }] }));
      endStream(res);
      return;
    }
    const results = await this.generate(promptIds, params, n, signal);
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

  /** The chat prompt's ids: messages and tools checked, rendered by the template, bounded, then encoded. */
  private chatPrompt(body: Json): number[] {
    const o = this.options;
    const messages = toChatMessages(body.messages);
    const specs = toToolSpecs(body.tools);
    const tools = body.tool_choice === "none" ? undefined : specs;
    // Template variables from the client are outside text too: escaped like the messages.
    const extra = { ...o.templateVars, ...o.template.escape(templateKwargs(body.chat_template_kwargs)) };
    let text: string;
    try {
      text = o.template.render(messages, { tools, addGenerationPrompt: true, extra });
    } catch (err) {
      throw new ApiError(400, `the model's chat template refused these messages: ${(err as Error).message}`, "invalid_request_error", "messages");
    }
    this.checkTextFits(text, "messages");
    return o.codec.encode(text);
  }

  private async chat(body: Json, res: ServerResponse, signal: AbortSignal): Promise<void> {
    const o = this.options;
    const promptIds = this.chatPrompt(body);
    // Without max_tokens, a chat reply may use whatever context is left (up to the server's cap).
    const room = o.maxContextTokens - promptIds.length;
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
      const results = await this.generate(promptIds, params, n, signal, (i, tokens, lps) => {
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
    const results = await this.generate(promptIds, params, n, signal);
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
  if (!res.destroyed && !res.writableEnded) res.write(`data: ${JSON.stringify(data)}\n\n`);
}

function endStream(res: ServerResponse): void {
  if (res.destroyed || res.writableEnded) return;
  res.write("data: [DONE]\n\n");
  res.end();
}
