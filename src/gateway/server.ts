/**
 * The recording gateway's HTTP server: per-session OpenAI-compatible endpoints over any engine, so
 * that an agent written against the OpenAI API runs unchanged while every call it makes is recorded as
 * a token-exact trajectory (the recorder, recorder.ts, does the assembly).
 *
 *   POST   /sessions                             {task?, metadata?} -> {id, baseURL}
 *   POST   /sessions/<id>/v1/chat/completions    the OpenAI chat API (tools, n, stream, logprobs, stop)
 *   GET    /sessions/<id>/v1/models
 *   GET    /sessions/<id>/tools                  the env's tools (OpenAI function tools), when the session owns an env
 *   POST   /sessions/<id>/tools/<name>           the tool's arguments -> {content, isError, reward, terminated, truncated}
 *   POST   /sessions/<id>/reward                 {reward, info?}
 *   GET    /sessions/<id>/trajectory             the recorded calls and the assembled trajectory
 *   DELETE /sessions/<id>
 *
 * Requests are checked with the checkpoint server's validation and answered with the OpenAI error
 * shape (src/serve); limits bound sessions, calls per session, body size and tokens per call. Beyond
 * loopback it needs an API key unless told `insecure`. Sessions opened in code (`open`) may own an
 * environment (env-tools.ts) whose tools the agent calls over HTTP; refused requests are kept per
 * session (`refusals`), so a trainer can tell an episode whose agent was refused. It does not load
 * checkpoints (the CLI does) and does not train.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { mixSeedParts } from "../core/index.js";
import { BatchDecoder, toolParserFor, trajectoryToJSON, type PolicySampler, type ToolCallParser } from "../rollout/index.js";
import type { ChatTemplate } from "../model/index.js";
import type { TokenCodec } from "../model/index.js";
import {
  ApiError, bearerAuthorized, checkExposure, ClientGone, defaultMaxBodyBytes, endStream, isObject, maxBytesPerToken, now, num, readBody, sendError,
  sendJson, startStream, toChatMessages, toToolSpecs, usage, writeEvent, type Json,
} from "../serve/index.js";
import { EnvTools, ToolCallRefused } from "./env-tools.js";
import { SessionRecorder, type CallRecord, type CallRequest } from "./recorder.js";

export interface GatewayOptions {
  sampler: PolicySampler;
  codec: TokenCodec;
  template: ChatTemplate;
  /** The model id `/v1/models` lists; requests may name any model (recorded, not checked). */
  modelName: string;
  /** Prompt plus completion limit in tokens per call. */
  maxContextTokens: number;
  /** When set, every request needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Listen beyond loopback without an API key. */
  insecure?: boolean;
  /** Open sessions at once. Default 256. */
  maxSessions?: number;
  /** Calls recorded per session. Default 512. */
  maxCallsPerSession?: number;
  /** Request body limit in bytes. Default as `sinkflex serve`'s for the context. */
  maxBodyBytes?: number;
  /** Largest `max_tokens`. Default 4096. */
  maxTokens?: number;
  /** Largest `n`. Default 8. */
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
   * The batch decoder to sample through (default: the gateway's own over `sampler`). A trainer passes
   * its rollout's, so that the calls of every session decode together with its other rollouts and a
   * weight update waits for a decoding step to end.
   */
  decoder?: BatchDecoder;
  /** Sampling settings for calls that do not send them (default temperature 1, top_p 1). */
  defaults?: { temperature?: number; topP?: number };
}

/** What `open` takes: the session's task and metadata, the env it owns, and its base seed. */
export interface OpenSessionOptions {
  task?: unknown;
  metadata?: Json;
  /** The env whose tools the session serves at `tools/<name>`. */
  env?: EnvTools;
  /** Calls without a `seed` sample with one derived from this and the call's index (repeatable runs). */
  seed?: number;
}

/** A request the gateway refused on a session (4xx), as kept for the session's owner. */
export interface Refusal {
  route: string;
  status: number;
  message: string;
}

/** A session as its owner in code sees it. */
export interface GatewaySessionView {
  id: string;
  recorder: SessionRecorder;
  env: EnvTools | undefined;
  task: unknown;
  refusals: Refusal[];
}

interface GatewaySession {
  recorder: SessionRecorder;
  task: unknown;
  metadata: Json;
  createdAt: number;
  env: EnvTools | undefined;
  seed: number | undefined;
  refusals: Refusal[];
}

/**
 * How long a kept-alive connection may sit idle. Node's default (5 s) reset agents' connections: a
 * trainer's event loop busy past it (a weight update, a long decoding step on a loaded machine) wakes
 * to the idle timer before it reads the request an agent has sent on the kept connection, and closes
 * the socket under it (ECONNRESET, the `openai` client's "Connection error."). Ten minutes is undici's
 * longest keep-alive, so the agent's client gives the connection up first.
 */
const KEEP_ALIVE_MS = 600_000;

/** A tool name from its URL-encoded path segment. */
function toolName(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new ApiError(400, `the tool name in the path is not valid URL encoding: ${segment.slice(0, 80)}; encode it with encodeURIComponent`, "invalid_request_error", null, "invalid_tool_name");
  }
}

const SESSION_ROUTE = /^\/sessions\/([A-Za-z0-9_-]{1,64})(\/.*)?$/;

export class GatewayServer {
  private server: Server | undefined;
  private readonly decoder: BatchDecoder;
  private readonly parser: ToolCallParser;
  /** The id that ends a sampled turn: the template's end-of-turn token (Phi-3's `<|end|>`, else the eos_token), as in the rollout. */
  private readonly endOfTurn: number;
  private readonly sessions = new Map<string, GatewaySession>();
  private readonly created = now();
  private origin = "";
  private counter = 0;
  private bytesPerToken: number | undefined;

  constructor(readonly options: GatewayOptions) {
    if (!Number.isInteger(options.maxContextTokens) || options.maxContextTokens < 1) {
      throw new RangeError(`maxContextTokens must be a positive integer (at most the model's positions), got ${options.maxContextTokens}`);
    }
    this.decoder = options.decoder ?? new BatchDecoder(options.sampler);
    this.parser = options.parser ?? toolParserFor(options.template, options.toolFormat);
    const end = options.template.endOfTurn;
    if (!end) throw new Error(`the tokenizer (${options.codec.tokenizer.source}) has no eos_token and the chat template's tool format names no end-of-turn token; the gateway needs the token that ends an assistant turn`);
    this.endOfTurn = options.codec.tokenId(end);
  }

  /** The gateway's origin, http://HOST:PORT ("" before `listen`). */
  get url(): string {
    return this.origin;
  }

  /** Opens a session in code (as `POST /sessions` does); returns its id and the agent's base URL. */
  open(options: OpenSessionOptions = {}): { id: string; baseURL: string } {
    const max = this.options.maxSessions ?? 256;
    if (this.sessions.size >= max) {
      throw new ApiError(429, `the gateway holds ${max} open sessions, its limit; DELETE finished sessions (after reading their trajectories) or raise --max-sessions`, "rate_limit_error", null, "too_many_sessions");
    }
    const id = `sess_${(++this.counter).toString(36)}_${randomBytes(8).toString("hex")}`;
    const o = this.options;
    const recorder = new SessionRecorder(id, { decoder: this.decoder, sampler: o.sampler, codec: o.codec, template: o.template, parser: this.parser, templateVars: o.templateVars });
    this.sessions.set(id, { recorder, task: options.task ?? null, metadata: options.metadata ?? {}, createdAt: Date.now(), env: options.env, seed: options.seed, refusals: [] });
    return { id, baseURL: `${this.origin}/sessions/${id}/v1` };
  }

  /** An open session's recorder, env, task and refusals, or undefined. */
  session(id: string): GatewaySessionView | undefined {
    const s = this.sessions.get(id);
    return s && { id, recorder: s.recorder, env: s.env, task: s.task, refusals: s.refusals };
  }

  /** Ends a session: later requests to it get 404; its engine sessions are freed (the env is the owner's to close). */
  closeSession(id: string): void {
    this.sessions.get(id)?.recorder.close();
    this.sessions.delete(id);
  }

  /** Sessions open now. */
  get sessionCount(): number {
    return this.sessions.size;
  }

  /** Listens on `host` (default 127.0.0.1; port 0 picks one); returns the gateway's origin, http://HOST:PORT. */
  async listen(port = 0, host = "127.0.0.1"): Promise<string> {
    checkExposure(host, this.options.apiKey, this.options.insecure);
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.keepAliveTimeout = KEEP_ALIVE_MS;
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(port, host, () => resolve());
    });
    const addr = this.server.address() as AddressInfo;
    this.origin = `http://${host.includes(":") ? `[${host}]` : host}:${addr.port}`;
    return this.origin;
  }

  async close(): Promise<void> {
    for (const s of this.sessions.values()) s.recorder.close();
    this.sessions.clear();
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections?.();
    await new Promise<void>((r) => s.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const gone = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) gone.abort();
    });
    let session: GatewaySession | undefined;
    let route = "";
    try {
      if (!bearerAuthorized(req, this.options.apiKey)) {
        throw new ApiError(401, "invalid or missing API key; send Authorization: Bearer <key> (the gateway's --api-key)", "authentication_error", null, "invalid_api_key");
      }
      const path = (req.url ?? "/").split("?")[0]!.replace(/\/$/, "");
      if (path === "/sessions" && req.method === "POST") return this.openSession(await this.body(req), res);
      const m = SESSION_ROUTE.exec(path);
      if (!m) throw new ApiError(404, `no route ${req.method} ${path}; open a session with POST /sessions and use the baseURL it returns`, "invalid_request_error", null, "not_found");
      const id = m[1]!;
      const rest = m[2] ?? "";
      session = this.sessions.get(id);
      if (!session) throw new ApiError(404, `no session ${JSON.stringify(id)}: it was never opened or was deleted; open one with POST /sessions`, "invalid_request_error", null, "session_not_found");
      route = `${req.method} ${rest}`;
      // Any name the model wrote goes to the env (URL-encoded in the path), which answers an unknown one with an error, as in the agent loop.
      const tool = /^POST \/tools\/([^/]{1,1024})$/.exec(route);
      if (tool) return await this.callTool(session, toolName(tool[1]!), await this.body(req), res);
      switch (route) {
        case "POST /v1/chat/completions":
          return await this.chat(session, await this.body(req), res, gone.signal);
        case "GET /v1/models":
          return sendJson(res, 200, { object: "list", data: [{ id: this.options.modelName, object: "model", created: this.created, owned_by: "sinkflex" }] });
        case "POST /reward":
          return this.setReward(session, await this.body(req), res);
        case "GET /tools":
          return sendJson(res, 200, { tools: (session.env?.tools ?? []).map((t) => ({ type: "function", function: t })) });
        case "GET /trajectory":
          return sendJson(res, 200, this.trajectoryJSON(id, session));
        case "DELETE ":
          session.recorder.close();
          this.sessions.delete(id);
          return sendJson(res, 200, { id, deleted: true });
        default:
          throw new ApiError(
            404,
            `no route ${req.method} /sessions/${id}${rest}; a session has POST v1/chat/completions, GET v1/models, GET tools, POST tools/<name>, POST reward, GET trajectory and DELETE`,
            "invalid_request_error",
            null,
            "not_found",
          );
      }
    } catch (err) {
      if (err instanceof ClientGone || gone.signal.aborted || res.destroyed) {
        res.destroy();
        return;
      }
      if (res.headersSent) {
        res.end();
        return;
      }
      const apiErr = err instanceof ApiError ? err : new ApiError(500, `internal error: ${(err as Error).message}`, "server_error");
      if (session && session.refusals.length < 64) session.refusals.push({ route, status: apiErr.status, message: apiErr.message });
      sendError(res, apiErr);
    }
  }

  private body(req: IncomingMessage): Promise<Json> {
    return readBody(req, this.options.maxBodyBytes ?? defaultMaxBodyBytes(this.options.maxContextTokens));
  }

  private openSession(body: Json, res: ServerResponse): void {
    if (body.metadata !== undefined && body.metadata !== null && !isObject(body.metadata)) {
      throw new ApiError(400, `metadata must be a JSON object, got ${JSON.stringify(body.metadata)}`, "invalid_request_error", "metadata");
    }
    sendJson(res, 201, this.open({ task: body.task ?? null, metadata: (body.metadata as Json | undefined) ?? {} }));
  }

  private async callTool(session: GatewaySession, name: string, body: Json, res: ServerResponse): Promise<void> {
    if (!session.env) throw new ApiError(404, "this session owns no environment: its tools are the agent's own (sessions opened by a trainer for a suite have tools)", "invalid_request_error", null, "no_env");
    try {
      const r = await session.env.call(name, body);
      sendJson(res, 200, { content: r.content, isError: r.isError, messages: r.messages as unknown as Json, reward: r.reward, terminated: r.terminated, truncated: r.truncated });
    } catch (err) {
      if (err instanceof ToolCallRefused) throw new ApiError(err.status, err.message, "invalid_request_error", null, err.status === 409 ? "episode_ended" : "invalid_arguments");
      throw err;
    }
  }

  private setReward(session: GatewaySession, body: Json, res: ServerResponse): void {
    const r = body.reward;
    if (typeof r !== "number" || !Number.isFinite(r)) throw new ApiError(400, `reward must be a finite number, got ${JSON.stringify(r)}`, "invalid_request_error", "reward");
    if (body.info !== undefined && body.info !== null && !isObject(body.info)) throw new ApiError(400, `info must be a JSON object, got ${JSON.stringify(body.info)}`, "invalid_request_error", "info");
    session.recorder.reward = r;
    session.recorder.rewardInfo = (body.info as Json | undefined) ?? {};
    sendJson(res, 200, { reward: r });
  }

  private trajectoryJSON(id: string, s: GatewaySession): Json {
    const { trajectory, tokenPolicyVersions, segmentMessages } = s.recorder.trajectory();
    const t = trajectoryToJSON(trajectory);
    return {
      id,
      task: s.task,
      metadata: s.metadata,
      createdAt: s.createdAt,
      reward: s.recorder.reward ?? null,
      splits: s.recorder.splits.length,
      splitReports: s.recorder.splits,
      calls: s.recorder.calls,
      trajectory: {
        ...t,
        segments: (t.segments as Json[]).map((seg, i) => ({ ...seg, policyVersions: tokenPolicyVersions[i], messages: segmentMessages[i] })),
      },
    };
  }

  /** The call's validated request: messages, tools and sampling settings, bounded by the gateway's limits. */
  private callRequest(body: Json): { req: CallRequest; text: string; wantLogprobs: boolean } {
    const o = this.options;
    if (body.model !== undefined && typeof body.model !== "string") throw new ApiError(400, `model must be a string, got ${JSON.stringify(body.model)}`, "invalid_request_error", "model");
    const messages = toChatMessages(body.messages);
    const specs = toToolSpecs(body.tools);
    const choice = body.tool_choice;
    if (choice !== undefined && choice !== null && choice !== "auto" && choice !== "none") {
      throw new ApiError(
        400,
        `tool_choice ${JSON.stringify(choice)} is not supported: the gateway samples the policy unconstrained, so it cannot force a tool call; send "auto" (or leave it out) or "none"`,
        "invalid_request_error",
        "tool_choice",
      );
    }
    if (body.chat_template_kwargs !== undefined) {
      throw new ApiError(400, "chat_template_kwargs is not accepted by the gateway: the template variables are fixed per gateway so that every call renders alike", "invalid_request_error", "chat_template_kwargs");
    }
    const tools = choice === "none" ? undefined : specs;
    const stopRaw = body.stop;
    const stop = stopRaw === undefined || stopRaw === null ? [] : typeof stopRaw === "string" ? [stopRaw] : stopRaw;
    if (!Array.isArray(stop) || stop.length > 4 || !stop.every((x) => typeof x === "string" && x.length > 0 && x.length <= 256)) {
      throw new ApiError(400, "stop must be a non-empty string or an array of at most 4 non-empty strings (each at most 256 characters)", "invalid_request_error", "stop");
    }
    let text: string;
    try {
      text = o.template.render(messages, { tools, addGenerationPrompt: true, extra: o.templateVars });
    } catch (err) {
      throw new ApiError(400, `the model's chat template refused these messages: ${(err as Error).message}`, "invalid_request_error", "messages");
    }
    this.bytesPerToken ??= maxBytesPerToken(o.codec);
    const context = o.maxContextTokens;
    const bytes = Buffer.byteLength(text);
    if (Math.ceil(bytes / this.bytesPerToken) > context) {
      throw new ApiError(400, `the prompt is ${bytes} bytes, at least ${Math.ceil(bytes / this.bytesPerToken)} tokens, more than the gateway's context limit of ${context}; shorten the conversation`, "invalid_request_error", "messages", "context_length_exceeded");
    }
    const cap = o.maxTokens ?? 4096;
    const key = body.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens";
    const maxTokens = num(body, key, Math.min(cap, 256), 1, cap, true);
    const seed = body.seed === undefined || body.seed === null ? undefined : num(body, "seed", 0, 0, 2 ** 53, true);
    const n = num(body, "n", 1, 1, o.maxChoices ?? 8, true);
    const req: CallRequest = {
      messages,
      tools,
      params: { temperature: num(body, "temperature", o.defaults?.temperature ?? 1, 0, 2), topP: num(body, "top_p", o.defaults?.topP ?? 1, 1e-9, 1), seed, maxTokens, stopTokens: [this.endOfTurn] },
      n,
      stop: stop as string[],
      model: body.model as string | undefined,
    };
    return { req, text, wantLogprobs: body.logprobs === true };
  }

  private async chat(session: GatewaySession, body: Json, res: ServerResponse, signal: AbortSignal): Promise<void> {
    const o = this.options;
    const calls = session.recorder.calls.length;
    const maxCalls = o.maxCallsPerSession ?? 512;
    if (calls >= maxCalls) {
      throw new ApiError(429, `this session has recorded ${calls} calls, the gateway's limit per session; end the episode and open a new session`, "rate_limit_error", null, "too_many_calls");
    }
    const { req, text, wantLogprobs } = this.callRequest(body);
    if (req.params.seed === undefined && session.seed !== undefined) req.params.seed = mixSeedParts(session.seed, calls) >>> 0;
    const promptLength = o.codec.encode(text).length;
    if (promptLength + req.params.maxTokens > o.maxContextTokens) {
      throw new ApiError(
        400,
        `the prompt has ${promptLength} tokens and max_tokens is ${req.params.maxTokens}, more than the gateway's context limit of ${o.maxContextTokens} tokens per call; shorten the conversation or lower max_tokens`,
        "invalid_request_error",
        "max_tokens",
        "context_length_exceeded",
      );
    }
    let record: CallRecord;
    try {
      record = await session.recorder.call(req, text, signal);
    } catch (err) {
      if (signal.aborted) throw new ClientGone("the client went away");
      throw err;
    }
    const id = `chatcmpl-${record.index}-${session.recorder.id}`;
    const model = req.model ?? o.modelName;
    const logprobContent = (tokens: number[], lps: number[]) =>
      tokens.map((t, k) => {
        const s = o.codec.decode([t]);
        return { token: s, logprob: lps[k]!, bytes: [...Buffer.from(s, "utf8")], top_logprobs: [] };
      });
    const wireCalls = (c: CallRecord["choices"][number]) => c.toolCalls.map((t) => ({ id: t.id, type: "function" as const, function: { name: t.name, arguments: t.arguments } }));
    const finish = (c: CallRecord["choices"][number]) => (c.toolCalls.length > 0 ? "tool_calls" : c.finishReason);
    const results = record.choices;
    if (body.stream === true) {
      // The reply is streamed once it is sampled: a role chunk, the content, the tool calls, the finish.
      startStream(res);
      const base = { id, object: "chat.completion.chunk", created: now(), model };
      results.forEach((c, i) => {
        writeEvent(res, { ...base, choices: [{ index: i, delta: { role: "assistant", content: "" }, finish_reason: null }] });
        if (c.content) writeEvent(res, { ...base, choices: [{ index: i, delta: { content: c.content }, logprobs: wantLogprobs ? { content: logprobContent(c.tokens, c.logprobs) } : null, finish_reason: null }] });
        const tc = wireCalls(c);
        if (tc.length) writeEvent(res, { ...base, choices: [{ index: i, delta: { tool_calls: tc.map((t, k) => ({ index: k, ...t })) }, finish_reason: null }] });
        writeEvent(res, { ...base, choices: [{ index: i, delta: {}, finish_reason: finish(c) }] });
      });
      endStream(res);
      return;
    }
    sendJson(res, 200, {
      id,
      object: "chat.completion",
      created: now(),
      model,
      choices: results.map((c, i) => ({
        index: i,
        message: { role: "assistant", content: c.content === "" && c.toolCalls.length > 0 ? null : c.content, ...(c.toolCalls.length ? { tool_calls: wireCalls(c) } : {}) },
        logprobs: wantLogprobs ? { content: logprobContent(c.tokens, c.logprobs) } : null,
        finish_reason: finish(c),
      })),
      usage: usage(record.promptTokens, results),
    });
  }
}
