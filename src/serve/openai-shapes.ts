/**
 * The OpenAI wire shapes shared by sinkflex's HTTP servers (the checkpoint server and the recording
 * gateway): the error shape and its `ApiError`, JSON bodies read under a size limit, request fields
 * checked with errors that say what was wrong (numbers, messages, tool calls, tools, template
 * variables), the bearer-key check, a cheap bound on tokens per byte, and server-sent events.
 *
 * It validates and converts; it samples nothing and holds no server state.
 */
import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { ChatMessage, ToolCall, ToolSpec } from "../gym/index.js";
import type { TokenCodec } from "../model/index.js";

/** Whether the request carries `Authorization: Bearer <apiKey>` (always true without a key). */
export function bearerAuthorized(req: IncomingMessage, apiKey: string | undefined): boolean {
  if (apiKey === undefined) return true;
  const sent = Buffer.from(req.headers.authorization ?? "");
  const want = Buffer.from(`Bearer ${apiKey}`);
  return sent.length === want.length && timingSafeEqual(sent, want);
}

export class ApiError extends Error {
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
export class ClientGone extends Error {}

export type Json = Record<string, unknown>;

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

export function sendError(res: ServerResponse, err: ApiError): void {
  sendJson(res, err.status, { error: { message: err.message, type: err.type, param: err.param, code: err.code } });
}

export function readBody(req: IncomingMessage, limit: number): Promise<Json> {
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

export function isObject(v: unknown): v is Json {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

export function num(body: Json, key: string, def: number, min: number, max: number, integer = false): number {
  const v = body[key];
  if (v === undefined || v === null) return def;
  if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max || (integer && !Number.isInteger(v))) {
    throw new ApiError(400, `${key} must be ${integer ? "an integer" : "a number"} in [${min}, ${max}], got ${JSON.stringify(v)}`, "invalid_request_error", key);
  }
  return v;
}

export function textContent(content: unknown, where: string): string {
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
export function toToolCall(raw: unknown, where: string, defaultId: string): ToolCall {
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
export function toChatMessages(raw: unknown): ChatMessage[] {
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

export function toToolSpecs(raw: unknown): ToolSpec[] | undefined {
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

export function templateKwargs(raw: unknown): Json {
  if (raw === undefined || raw === null) return {};
  if (!isObject(raw)) throw new ApiError(400, `chat_template_kwargs must be an object of template variables (e.g. {"enable_thinking": false}), got ${JSON.stringify(raw)}`, "invalid_request_error", "chat_template_kwargs");
  for (const key of Object.keys(raw)) {
    const why = RESERVED_TEMPLATE_VARS[key];
    if (why !== undefined) throw new ApiError(400, `chat_template_kwargs.${key} is set by the server (${why}); remove it`, "invalid_request_error", "chat_template_kwargs");
  }
  return raw;
}

/** An upper bound on the bytes of text one token covers: no prompt shorter than bytes / this in tokens. */
export function maxBytesPerToken(codec: TokenCodec): number {
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

export function now(): number {
  return Math.floor(Date.now() / 1000);
}

export function usage(prompt: number, results: { tokens: number[] }[]) {
  const completion = results.reduce((a, r) => a + r.tokens.length, 0);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

export function startStream(res: ServerResponse): void {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
}

export function writeEvent(res: ServerResponse, data: unknown): void {
  if (!res.destroyed && !res.writableEnded) res.write(`data: ${JSON.stringify(data)}\n\n`);
}

export function endStream(res: ServerResponse): void {
  if (res.destroyed || res.writableEnded) return;
  res.write("data: [DONE]\n\n");
  res.end();
}
