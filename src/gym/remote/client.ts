/**
 * `RemoteEnv`: an Env whose episodes run in another process, behind `serveEnv` (server.ts), over
 * HTTP (one request per call) or WebSocket (one socket per session).
 *
 * Its spaces are rebuilt from the server's description, so agents and checkers use it like a local
 * env. Contract errors on the server (step before reset, step after the end) are thrown here as
 * `EnvContractError`; other failures as `RemoteEnvError` with the HTTP status and error code.
 * `render()` is synchronous, so it describes the last observation received; `state()` asks the server.
 * This file is the client only.
 */
import WebSocket from "ws";
import { EnvContractError, type Env, type EnvMetadata, type ResetArgs, type ResetResult, type StepResult } from "../env.js";
import { spaceFromJSON, type Space } from "../spaces.js";
import type { ErrorCode, ResetResponse, ServerFrame, SessionInfo, StateResponse, StepResponse } from "./protocol.js";

export interface RemoteEnvOptions {
  /** The env to ask for; the server's own when absent. */
  envId?: string;
  /** Options for the server's `make` / factory. */
  options?: Record<string, unknown>;
  /** "http" (default) or "ws". */
  transport?: "http" | "ws";
  /** Per-request timeout in milliseconds. Default 60,000. */
  timeoutMs?: number;
  /** The server's API key (`envs serve --api-key`), sent as `Authorization: Bearer <key>`. */
  apiKey?: string;
}

export class RemoteEnvError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: ErrorCode | "network" | "closed" | "timeout",
  ) {
    super(message);
    this.name = "RemoteEnvError";
  }
}

interface Transport {
  reset(body: Record<string, unknown>): Promise<ResetResponse>;
  step(body: Record<string, unknown>): Promise<StepResponse>;
  state(): Promise<StateResponse>;
  close(): Promise<void>;
}

export class RemoteEnv<Obs = unknown, Act = unknown> implements Env<Obs, Act> {
  readonly observationSpace: Space<Obs>;
  readonly actionSpace: Space<Act>;
  readonly metadata: EnvMetadata;
  private lastObservation: Obs | undefined;
  private steps = 0;
  private closed = false;

  private constructor(
    readonly url: string,
    readonly session: SessionInfo,
    private readonly transport: Transport,
  ) {
    this.observationSpace = spaceFromJSON(session.observationSpace);
    this.actionSpace = spaceFromJSON(session.actionSpace);
    this.metadata = { ...session.metadata, id: session.envId, remote: url, sessionId: session.sessionId };
  }

  /** Opens a session on the server at `url` (http://host:port; for "ws" the /ws path is added). */
  static async connect<Obs = unknown, Act = unknown>(url: string, options: RemoteEnvOptions = {}): Promise<RemoteEnv<Obs, Act>> {
    const base = url.replace(/\/+$/, "").replace(/^ws(s?):/, "http$1:").replace(/\/ws$/, "");
    const timeoutMs = options.timeoutMs ?? 60_000;
    if ((options.transport ?? "http") === "ws") {
      const { session, transport } = await openWebSocket(base, options, timeoutMs);
      return new RemoteEnv<Obs, Act>(base, session, transport);
    }
    const auth = authHeaders(options.apiKey);
    const session = await httpJson<SessionInfo>("POST", `${base}/sessions`, { envId: options.envId, options: options.options ?? {} }, timeoutMs, auth);
    return new RemoteEnv<Obs, Act>(base, session, httpTransport(base, session.sessionId, timeoutMs, auth));
  }

  async reset(args: ResetArgs = {}): Promise<ResetResult<Obs>> {
    this.assertOpen("reset");
    const r = await this.transport.reset({ ...(args.seed !== undefined ? { seed: args.seed } : {}), ...(args.options ? { options: args.options } : {}) });
    this.lastObservation = r.observation as Obs;
    this.steps = 0;
    return [r.observation as Obs, r.info];
  }

  async step(action: Act): Promise<StepResult<Obs>> {
    this.assertOpen("step");
    const r = await this.transport.step({ action });
    this.lastObservation = r.observation as Obs;
    this.steps++;
    return [r.observation as Obs, r.reward, r.terminated, r.truncated, r.info];
  }

  /** The server's view of the session: episode and step counters, and the env's own render text. */
  async state(): Promise<StateResponse> {
    this.assertOpen("state");
    return this.transport.state();
  }

  render(): string {
    if (this.lastObservation === undefined) return `${this}: not started`;
    const obs = typeof this.lastObservation === "string" ? this.lastObservation : JSON.stringify(this.lastObservation, null, 1);
    return `${this} step ${this.steps}:\n${obs}`;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.transport.close();
  }

  toString(): string {
    return `RemoteEnv<${this.session.env} @ ${this.url}>`;
  }

  private assertOpen(what: string): void {
    if (this.closed) throw new EnvContractError(`${this}: ${what} after close; connect a new RemoteEnv`);
  }
}

function toError(status: number, body: unknown, fallback: string): Error {
  const err = (body as { error?: { code?: ErrorCode; message?: string } } | undefined)?.error;
  const message = err?.message ?? fallback;
  if (err?.code === "contract") return new EnvContractError(message);
  return new RemoteEnvError(message, status, err?.code ?? "env_error");
}

function authHeaders(apiKey: string | undefined): Record<string, string> {
  return apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` };
}

async function httpJson<T>(method: string, url: string, body: unknown, timeoutMs: number, auth: Record<string, string> = {}): Promise<T> {
  let res: Response;
  try {
    res = await fetch(url, {
      method,
      headers: body === undefined ? auth : { ...auth, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    const timedOut = (err as Error).name === "TimeoutError";
    throw new RemoteEnvError(
      timedOut ? `${method} ${url} did not answer within ${timeoutMs} ms` : `cannot reach ${url}: ${(err as Error).message}; is \`sinkflex envs serve\` running there?`,
      0,
      timedOut ? "timeout" : "network",
    );
  }
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    throw new RemoteEnvError(`${method} ${url} answered ${res.status} with a body that is not JSON: ${text.slice(0, 200)}`, res.status, "bad_json");
  }
  if (!res.ok) throw toError(res.status, parsed, `${method} ${url} failed with HTTP ${res.status}`);
  return parsed as T;
}

function httpTransport(base: string, sessionId: string, timeoutMs: number, auth: Record<string, string>): Transport {
  const at = `${base}/sessions/${encodeURIComponent(sessionId)}`;
  return {
    reset: (body) => httpJson("POST", `${at}/reset`, body, timeoutMs, auth),
    step: (body) => httpJson("POST", `${at}/step`, body, timeoutMs, auth),
    state: () => httpJson("GET", `${at}/state`, undefined, timeoutMs, auth),
    async close() {
      try {
        await httpJson("DELETE", at, undefined, timeoutMs, auth);
      } catch (err) {
        // Already gone (idle timeout, server restart): closing is still done.
        if (!(err instanceof RemoteEnvError && (err.code === "not_found" || err.code === "session_expired" || err.code === "network"))) throw err;
      }
    },
  };
}

function openWebSocket(base: string, options: RemoteEnvOptions, timeoutMs: number): Promise<{ session: SessionInfo; transport: Transport }> {
  const url = new URL(`${base.replace(/^http/, "ws")}/ws`);
  if (options.envId) url.searchParams.set("envId", options.envId);
  if (options.options) url.searchParams.set("options", JSON.stringify(options.options));
  const ws = new WebSocket(url, { headers: authHeaders(options.apiKey) });
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void; timer: NodeJS.Timeout }>();
  let nextId = 1;
  let closedError: Error | undefined;

  const failAll = (err: Error) => {
    closedError ??= err;
    for (const p of pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    pending.clear();
  };

  const request = <T>(type: string, data?: Record<string, unknown>): Promise<T> => {
    if (closedError) return Promise.reject(closedError);
    const id = nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new RemoteEnvError(`"${type}" got no answer within ${timeoutMs} ms`, 0, "timeout"));
      }, timeoutMs);
      pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer });
      ws.send(JSON.stringify({ type, id, ...(data ? { data } : {}) }));
    });
  };

  const transport: Transport = {
    reset: (body) => request("reset", body),
    step: (body) => request("step", body),
    state: () => request("state"),
    async close() {
      if (ws.readyState === WebSocket.OPEN) {
        await request("close").catch(() => undefined);
        ws.close(1000);
      } else if (ws.readyState === WebSocket.CONNECTING) {
        ws.terminate();
      }
    },
  };

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new RemoteEnvError(`no session from ${url.origin} within ${timeoutMs} ms`, 0, "timeout"));
    }, timeoutMs);
    let opened = false;
    ws.on("unexpected-response", (_req, res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        clearTimeout(timer);
        let body: unknown;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        } catch {
          body = undefined;
        }
        reject(toError(res.statusCode ?? 0, body, `the server refused the WebSocket with HTTP ${res.statusCode}`));
      });
    });
    ws.on("error", (err) => {
      clearTimeout(timer);
      failAll(new RemoteEnvError(`WebSocket error: ${err.message}`, 0, "network"));
      if (!opened) reject(new RemoteEnvError(`cannot reach ${url.origin}: ${err.message}; is \`sinkflex envs serve\` running there?`, 0, "network"));
    });
    ws.on("close", (code, reason) => {
      clearTimeout(timer);
      const text = reason.toString() || "no reason given";
      const err = new RemoteEnvError(`the session's WebSocket closed (code ${code}: ${text})`, 0, "closed");
      failAll(err);
      if (!opened) reject(err);
    });
    ws.on("message", (raw) => {
      let frame: ServerFrame;
      try {
        frame = JSON.parse(raw.toString()) as ServerFrame;
      } catch {
        return;
      }
      if (frame.type === "session") {
        opened = true;
        clearTimeout(timer);
        resolve({ session: frame.data, transport });
        return;
      }
      if (!opened && frame.type === "error") {
        clearTimeout(timer);
        reject(toError(0, frame, "the server could not open a session"));
        return;
      }
      const id = (frame as { id?: unknown }).id;
      const p = typeof id === "number" ? pending.get(id) : undefined;
      if (!p) return;
      pending.delete(id as number);
      clearTimeout(p.timer);
      if (frame.type === "error") p.reject(toError(0, frame, "request failed"));
      else p.resolve(frame.data);
    });
  });
}
