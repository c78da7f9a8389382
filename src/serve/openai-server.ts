/**
 * An OpenAI-compatible HTTP server over a sinkflex policy: `/v1/models`, `/v1/completions` (text or
 * token-id prompts) and `/v1/chat/completions` (tools and tool calls through the model's own chat
 * template and tool-call format), with streaming (server-sent events), log-probs, token ids
 * (`return_token_ids`, `return_tokens_as_token_ids`, as vLLM), `n` choices forked from one prefill,
 * teacher-forced prompt scoring (`/v1/completions` with `echo: true, max_tokens: 0`), vLLM's
 * weight-update routes when given a `reload` loader (weight-routes.ts), the OpenAI error shape, an
 * optional API key and limits on body size and tokens.
 *
 * Requests from concurrent clients are decoded together through the batch decoder. Hostile input is
 * answered with a 4xx that says what was wrong: text from messages never becomes a special token (the
 * chat template escapes it), malformed tool calls, tools and template variables are refused, a prompt
 * is checked against the context by a cheap bound before it is tokenized, and a client that goes away
 * stops its generation. Without an API key it only listens on loopback unless told `insecure`.
 *
 * This file speaks HTTP and JSON; loading a checkpoint is the CLI's job (src/cli/commands/serve.ts).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { isIP, type AddressInfo } from "node:net";
import type { ToolCall } from "../gym/index.js";
import type { Engine, EngineSession, SampleParams } from "../engine/index.js";
import type { ChatTemplate } from "../model/index.js";
import type { TokenCodec } from "../model/index.js";
import { BatchDecoder, type PolicySampler as Sampler } from "../rollout/index.js";
import { toolParserFor, type ToolCallParser } from "../rollout/index.js";
import {
  ApiError, bearerAuthorized, ClientGone, endStream, maxBytesPerToken, now, num, readBody, sendError, sendJson, startStream, templateKwargs,
  toChatMessages, toToolSpecs, usage, writeEvent, type Json,
} from "./openai-shapes.js";
import { WeightRoutes, type WeightLoader } from "./weight-routes.js";

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
  /**
   * The tool-call format replies are read in ("hermes", "llama3-json", "phi3-hermes"), as the rollout's
   * `rollout.toolFormat`. Default: the template's (its own text's, else the checkpoint family's).
   */
  toolFormat?: string;
  /** A parser of your own; overrides toolFormat. */
  parser?: ToolCallParser;
  templateVars?: Record<string, unknown>;
  /**
   * Teacher-forced log-probs of whole sequences (the engine's `logprobs`): `/v1/completions` with
   * `echo: true, max_tokens: 0` scores a prompt with it. Absent: such requests are refused.
   */
  scorer?: Pick<Engine, "logprobs">;
  /**
   * Loads new weights into what `sampler` samples from (the embedded engine): with it the server answers
   * vLLM's weight-update routes (weight-routes.ts). Absent: those routes are refused.
   */
  reload?: WeightLoader;
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


/**
 * The ids that end a reply: the template's end-of-turn token (the tool format's, e.g. Phi-3's `<|end|>`,
 * as the rollout stops at) and the tokenizer's eos_token where it is another token (Phi-3's
 * `<|endoftext|>` also ends a reply); none when neither is set.
 */
export function endTokens(codec: TokenCodec, template: ChatTemplate): number[] {
  const names = [template.endOfTurn, codec.tokenizer.eosToken].filter((t): t is string => t !== undefined && t !== "");
  return [...new Set(names.map((t) => codec.tokenId(t)))];
}

/**
 * Where a tool call starts in a streamed reply of the llama3-json format, whose call is the whole reply
 * (one JSON object, maybe after `<|python_tag|>`): 0 while the reply so far may be one, else -1.
 */
function wholeReplyCallAt(text: string): number {
  const t = text.trimStart();
  if (t === "" || t.startsWith("{") || t.startsWith("<|python_tag|>") || "<|python_tag|>".startsWith(t)) return 0;
  return -1;
}

export class OpenAIServer {
  private server: Server | undefined;
  private readonly decoder: BatchDecoder;
  private readonly parser: ToolCallParser;
  /** The ids that end a reply unless `ignore_eos`: the template's end-of-turn token and the eos_token. */
  private readonly endTokens: number[];
  private readonly created = Math.floor(Date.now() / 1000);
  private counter = 0;
  private active = 0;
  private bytesPerToken: number | undefined;
  private readonly weights: WeightRoutes;

  constructor(readonly options: ServeOptions) {
    if (!Number.isInteger(options.maxContextTokens) || options.maxContextTokens < 1) {
      throw new RangeError(`maxContextTokens must be a positive integer (at most the model's positions), got ${options.maxContextTokens}`);
    }
    this.decoder = new BatchDecoder(options.sampler);
    this.parser = options.parser ?? toolParserFor(options.template, options.toolFormat);
    this.endTokens = endTokens(options.codec, options.template);
    this.weights = new WeightRoutes(options.reload, this.decoder);
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
    return bearerAuthorized(req, this.options.apiKey);
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
        const adapter = this.weights.adapter;
        const base = { id: o.modelName, object: "model", created: this.created, owned_by: "sinkflex" };
        sendJson(res, 200, { object: "list", data: [base, ...(adapter ? [{ id: adapter, object: "model", created: this.created, owned_by: "sinkflex", root: adapter, parent: o.modelName }] : [])] });
        return;
      }
      if (WeightRoutes.handles(req.method ?? "", path)) {
        const body = req.method === "POST" ? await readBody(req, 64 * 1024) : {};
        await this.weights.handle(req.method!, path, body, res);
        return;
      }
      if (req.method === "POST" && (path === "/v1/completions" || path === "/v1/chat/completions")) {
        const body = await readBody(req, o.maxBodyBytes ?? defaultMaxBodyBytes(o.maxContextTokens));
        this.weights.checkModel(body.model, o.modelName);
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
    const stopTokens = [...new Set([...(body.ignore_eos ? [] : this.endTokens), ...((stopIds as number[] | undefined) ?? [])])];
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
    if (body.echo === true) {
      await this.scorePrompt(body, promptIds, res);
      return;
    }
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

  /**
   * `echo: true, max_tokens: 0`: the prompt scored teacher-forced, as vLLM answers it. `logprobs.tokens` are
   * the prompt's tokens and `token_logprobs[i]` is log p(token i | tokens before it), null for the first
   * (nothing predicts it); `top_logprobs` is null (alternatives are not computed). Generation after an echoed
   * prompt is not supported.
   */
  private async scorePrompt(body: Json, promptIds: number[], res: ServerResponse): Promise<void> {
    const o = this.options;
    const bad = (msg: string, param: string) => new ApiError(400, msg, "invalid_request_error", param);
    if (body.max_tokens !== 0 && body.max_tokens !== undefined) throw bad(`echo is supported with max_tokens: 0 only (scoring the prompt; got max_tokens ${JSON.stringify(body.max_tokens)}); send max_tokens: 0, or leave echo out to generate`, "max_tokens");
    if (body.max_tokens === undefined) throw bad("echo needs max_tokens: 0 (scoring the prompt); generation after an echoed prompt is not supported", "max_tokens");
    if (body.stream === true) throw bad("echo with stream is not supported; send stream: false", "stream");
    if (body.n !== undefined && body.n !== 1) throw bad(`echo scores one prompt: n must be 1 (got ${JSON.stringify(body.n)})`, "n");
    if (promptIds.length > o.maxContextTokens) {
      throw new ApiError(400, `the prompt has ${promptIds.length} tokens, more than this server's context limit of ${o.maxContextTokens}; shorten the prompt`, "invalid_request_error", "prompt", "context_length_exceeded");
    }
    if (!o.scorer) throw new ApiError(400, "this server cannot score prompts (no scorer); run `sinkflex serve` on a checkpoint", "invalid_request_error", "echo");
    const wantLogprobs = body.logprobs !== undefined && body.logprobs !== null && body.logprobs !== false;
    const [lps] = await o.scorer.logprobs([promptIds]);
    const asIds = body.return_tokens_as_token_ids === true;
    const tokens = this.tokenStrings(promptIds, asIds);
    const textOffset: number[] = [];
    let at = 0;
    for (const t of tokens) {
      textOffset.push(at);
      at += t.length;
    }
    sendJson(res, 200, {
      id: `cmpl-${++this.counter}`,
      object: "text_completion",
      created: now(),
      model: o.modelName,
      choices: [{
        index: 0,
        text: o.codec.decode(promptIds),
        logprobs: wantLogprobs
          ? { tokens, token_logprobs: [null, ...Array.from(lps!)], top_logprobs: null, text_offset: textOffset }
          : null,
        finish_reason: "length",
        ...(body.return_token_ids === true ? { token_ids: [], prompt_token_ids: promptIds } : {}),
      }],
      usage: usage(promptIds.length, [{ tokens: [] }]),
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
    // The text of a reply without its end token (the tokenizer refuses to decode no ids: a lone end token is "").
    const visibleText = (tokens: number[]) => {
      const ids = visible(tokens);
      return ids.length ? o.codec.decode(ids) : "";
    };
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
        h.text += visibleText(tokens);
        // Stream plain text; hold back anything that may be the start of a tool call.
        const callAt = this.parser.name === "llama3" ? wholeReplyCallAt(h.text) : h.text.indexOf("<tool_call>");
        h.inCall = callAt >= 0;
        let safe = callAt >= 0 ? callAt : h.text.length;
        for (let k = Math.min("<tool_call>".length - 1, safe); k > 0 && this.parser.name !== "llama3"; k--) {
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
        // Held-back text that did not parse as a call is sent as text.
        const rest = h.inCall && parsed.toolCalls.length > 0 ? "" : h.text.slice(h.sent);
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
        const parsed = this.parser.parse(visibleText(r.tokens), `call_${this.counter}_${i}_`);
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
