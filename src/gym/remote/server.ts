/**
 * `serveEnv`: serves any env over HTTP and WebSocket, many isolated sessions at once.
 *
 * Each session owns its own env instance (made by the registry's `make`, or by the caller's
 * factory); requests to one session run one at a time, in order. A session limit answers HTTP 429
 * (and refuses WebSocket upgrades with 429); sessions idle for longer than `idleTimeoutMs` are closed.
 * Bad JSON, unknown sessions and unknown routes get clear 4xx JSON errors; an env that throws gets a
 * JSON error, never a crashed server. Besides the session routes, OpenEnv-style session-less routes
 * (POST /reset, POST /step, GET /state) drive one default session. Routes and frames are in
 * docs/remote-protocol.md.
 *
 * What a client may configure is an allow-list: the options of a new session and of a reset are
 * checked against the env's declared rules (options.ts) and anything else answers 400; paths, URLs,
 * credentials and sizes beyond the bounds are fixed by whoever starts the server (`envOptions`).
 * With `apiKey`, every request and upgrade needs `Authorization: Bearer <key>`; serving beyond
 * loopback without one is refused unless `insecure`. This file is the server only; `RemoteEnv`
 * (client.ts) is the client.
 *
 * GET /health reports sessions, steps per second (over the last 10 s), steps and errors; `drain()`
 * stops taking sessions (503 "shutting_down"), lets the steps in flight finish (up to a grace period)
 * and then closes. Serving with several worker processes is the CLI's (`envs serve --workers`); each
 * worker runs one `serveEnv` with a session id prefix and the cluster's totals in its /health.
 */
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { isIPv4 } from "node:net";
import type { Duplex } from "node:stream";
import { WebSocketServer, type WebSocket } from "ws";
import { EnvContractError, type Env } from "../env.js";
import { make, spec } from "../registry.js";
import { checkClientOptions, ClientOptionError, WRAPPER_CLIENT_OPTIONS, type ClientOptionRules, type OptionRules } from "./options.js";
import {
  WS_CLOSE_ENV_ERROR,
  WS_CLOSE_IDLE,
  type ErrorBody,
  type ErrorCode,
  type ResetResponse,
  type SessionInfo,
  type StateResponse,
  type StepResponse,
} from "./protocol.js";

export type RemoteEnvFactory = (options: Record<string, unknown>) => Env<any, any> | Promise<Env<any, any>>;

export interface ServeEnvOptions {
  /** 0 (the default) picks a free port. */
  port?: number;
  /** Default 127.0.0.1 (loopback only). */
  host?: string;
  /** Most sessions open at once (HTTP and WebSocket together). Default 64. */
  maxSessions?: number;
  /** A session with no request for this long is closed. Default 300,000 ms. */
  idleTimeoutMs?: number;
  /** Largest request body or WebSocket frame. Default 16 MiB. */
  maxBodyBytes?: number;
  /** The id reported for a factory-served env. Default "custom". */
  envId?: string;
  /**
   * Options of every session, fixed by whoever starts the server (paths, URLs, credentials, sizes):
   * passed to `make` / the factory under the client's, and closed to clients.
   */
  envOptions?: Record<string, unknown>;
  /**
   * What clients may set. Default: for a registered id, its registration's `clientOptions` plus the
   * wrapper settings (maxEpisodeSteps, tokenBudget); for a factory, nothing.
   */
  clientOptions?: ClientOptionRules;
  /** When set, every request and WebSocket upgrade needs `Authorization: Bearer <apiKey>` (else 401). */
  apiKey?: string;
  /** Serve beyond loopback without an API key (refused otherwise); a warning goes to stderr. */
  insecure?: boolean;
  /** Prefix of every session id (a worker's, e.g. "w2."), so that a session's worker can be told. */
  sessionIdPrefix?: string;
  /** More fields for GET /health (a worker adds the whole cluster's totals). */
  healthExtra?: () => Record<string, unknown>;
}

/** What GET /health reports of one server. */
export interface EnvServerStats {
  sessions: number;
  maxSessions: number;
  /** Steps answered since the start. */
  steps: number;
  /** Steps per second over the last 10 seconds. */
  stepsPerSec: number;
  /** Requests answered with a 5xx error (the env threw, or the server failed). */
  errors: number;
  /** Requests (resets and steps) running now. */
  inFlight: number;
  draining: boolean;
  uptimeS: number;
}

/** True for 127.0.0.0/8, ::1 and localhost: a host only this machine can reach. */
export function isLoopbackHost(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, "$1");
  if (h === "localhost" || h === "::1" || h === "0:0:0:0:0:0:0:1") return true;
  if (isIPv4(h)) return h.startsWith("127.");
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(h);
  return mapped !== null && mapped[1]!.startsWith("127.");
}

export interface EnvServer {
  /** http://host:port */
  readonly url: string;
  /** ws://host:port/ws */
  readonly wsUrl: string;
  readonly host: string;
  readonly port: number;
  /** Sessions open now. */
  sessionCount(): number;
  /** Sessions, steps per second, errors (what GET /health reports). */
  stats(): EnvServerStats;
  /**
   * Stops taking new sessions (HTTP 503 "shutting_down", WebSocket upgrades refused), waits for the
   * resets and steps in flight to finish (at most `graceMs`), then closes. Safe to call twice.
   */
  drain(graceMs?: number): Promise<void>;
  /** Closes every session and stops listening. Safe to call twice. */
  close(): Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
  }
}

interface Session {
  id: string;
  env: Env<any, any>;
  kind: "http" | "ws";
  lastUsed: number;
  busy: number;
  queue: Promise<unknown>;
  episodeId: number;
  stepCount: number;
  done: boolean;
  socket?: WebSocket;
}

/** Serves the registered env `id` (each session made by `make(id, options)`) or a factory's envs. */
export async function serveEnv(target: string | RemoteEnvFactory, options: ServeEnvOptions = {}): Promise<EnvServer> {
  const host = options.host ?? "127.0.0.1";
  const maxSessions = options.maxSessions ?? 64;
  const idleTimeoutMs = options.idleTimeoutMs ?? 300_000;
  const maxBodyBytes = options.maxBodyBytes ?? 16 * 1024 * 1024;
  if (!Number.isInteger(maxSessions) || maxSessions < 1) throw new RangeError(`serveEnv: maxSessions must be a positive integer, got ${maxSessions}`);
  if (!(idleTimeoutMs > 0)) throw new RangeError(`serveEnv: idleTimeoutMs must be positive, got ${idleTimeoutMs}`);
  const apiKey = options.apiKey;
  if (apiKey !== undefined && apiKey.length === 0) throw new RangeError("serveEnv: apiKey must not be empty; omit it to serve without a key");
  if (!isLoopbackHost(host) && apiKey === undefined) {
    if (!options.insecure) {
      throw new Error(
        `serveEnv: refusing to serve on ${host} (beyond loopback) without an API key; set one (--api-key or $SINKFLEX_API_KEY), ` +
          `bind 127.0.0.1, or pass --insecure (insecure: true) to serve anyone who can reach the port`,
      );
    }
    console.error(`warning: serving on ${host} without an API key (--insecure): anyone who can reach this port can open sessions`);
  }
  const envId = typeof target === "string" ? target : (options.envId ?? "custom");
  const fixedOptions = { ...options.envOptions };
  const fixedKeys = new Set(Object.keys(fixedOptions));
  const declared = options.clientOptions ?? (typeof target === "string" ? spec(target).defaults.clientOptions : undefined) ?? {};
  const sessionRules: OptionRules = { ...(typeof target === "string" ? WRAPPER_CLIENT_OPTIONS : {}), ...declared.session };
  const resetRules: OptionRules = { ...declared.reset };
  const build = (clientOptions: Record<string, unknown>) => ({ ...fixedOptions, ...clientOptions });
  const factory: RemoteEnvFactory = typeof target === "string" ? (opts) => make(target, build(opts)) : (opts) => target(build(opts));
  if (typeof target === "string") {
    // Fail now, not at the first session, when the id is unknown or the fixed options are wrong.
    const probe = await factory({});
    await probe.close();
  }

  const sessions = new Map<string, Session>();
  const expired = new Set<string>();
  let reserved = 0; // sessions being created (counted against the limit)
  let closed = false;
  let draining = false;
  const startedAt = Date.now();
  // Steps per second: the last 10 one-second buckets.
  const buckets = new Array<number>(10).fill(0);
  let bucketSecond = Math.floor(Date.now() / 1000);
  let totalSteps = 0;
  let totalErrors = 0;
  let inFlight = 0;
  const advanceBuckets = () => {
    const now = Math.floor(Date.now() / 1000);
    for (let sec = bucketSecond + 1; sec <= Math.min(now, bucketSecond + 10); sec++) buckets[sec % 10] = 0;
    bucketSecond = Math.max(bucketSecond, now);
  };
  const countStep = () => {
    advanceBuckets();
    buckets[bucketSecond % 10]!++;
    totalSteps++;
  };
  const stats = (): EnvServerStats => {
    advanceBuckets();
    const elapsed = Math.min(10, Math.max(1, (Date.now() - startedAt) / 1000));
    // The current second is partly over: count the buckets of the window the server has lived through.
    const stepsPerSec = buckets.reduce((a, b) => a + b, 0) / elapsed;
    return { sessions: openCount(), maxSessions, steps: totalSteps, stepsPerSec: Math.round(stepsPerSec * 10) / 10, errors: totalErrors, inFlight, draining, uptimeS: Math.round((Date.now() - startedAt) / 1000) };
  };

  const openCount = () => sessions.size + reserved;

  const expectedKey = apiKey === undefined ? undefined : createHash("sha256").update(apiKey).digest();
  /** Throws 401 unless the request carries the server's API key (when it has one). */
  const checkAuthorization = (req: IncomingMessage) => {
    if (!expectedKey) return;
    const header = req.headers.authorization ?? "";
    const given = createHash("sha256").update(header.startsWith("Bearer ") ? header.slice(7) : "\0").digest();
    if (!header.startsWith("Bearer ") || !timingSafeEqual(given, expectedKey)) {
      throw new HttpError(401, "unauthorized", "invalid or missing API key; send Authorization: Bearer <key> (the key the server was started with)");
    }
  };

  const checkEnvId = (requested: unknown) => {
    if (requested !== undefined && requested !== null && requested !== envId) {
      throw new HttpError(404, "not_found", `this server serves "${envId}", not ${JSON.stringify(requested)}; omit envId or start a server for that env`);
    }
  };

  const checkSessionOptions = (envOptions: unknown) => {
    try {
      checkClientOptions("session", (envOptions as Record<string, unknown> | undefined) ?? {}, sessionRules, fixedKeys);
    } catch (err) {
      throw envError(err, "making the env");
    }
  };

  const createSession = async (kind: Session["kind"], envOptions: unknown): Promise<Session> => {
    if (envOptions !== undefined && (typeof envOptions !== "object" || envOptions === null || Array.isArray(envOptions))) {
      throw new HttpError(400, "bad_request", `"options" must be a JSON object, got ${JSON.stringify(envOptions)}`);
    }
    checkSessionOptions(envOptions);
    let env: Env<any, any>;
    try {
      env = await factory((envOptions as Record<string, unknown>) ?? {});
    } catch (err) {
      throw envError(err, "making the env");
    }
    const session: Session = { id: `${options.sessionIdPrefix ?? ""}${randomUUID()}`, env, kind, lastUsed: Date.now(), busy: 0, queue: Promise.resolve(), episodeId: 0, stepCount: 0, done: false };
    sessions.set(session.id, session);
    return session;
  };

  const reserve = () => {
    if (draining || closed) throw new HttpError(503, "shutting_down", "the server is shutting down and takes no new sessions; use another server");
    if (openCount() >= maxSessions) {
      throw new HttpError(429, "session_limit", `the server is at its session limit (${maxSessions}); close a session (DELETE /sessions/:id) or retry later`);
    }
    reserved++;
  };

  const sessionInfo = (s: Session): SessionInfo => ({
    sessionId: s.id,
    envId,
    env: s.env.toString(),
    observationSpace: s.env.observationSpace.toJSON(),
    actionSpace: s.env.actionSpace.toJSON(),
    metadata: s.env.metadata,
  });

  /** Runs `fn` after the session's earlier requests, marking it busy (not idle) meanwhile. */
  const run = <T>(s: Session, fn: () => Promise<T>): Promise<T> => {
    s.busy++;
    inFlight++;
    s.lastUsed = Date.now();
    const result = s.queue.then(fn);
    s.queue = result.catch(() => undefined).finally(() => {
      s.busy--;
      inFlight--;
      s.lastUsed = Date.now();
    });
    return result;
  };

  const doReset = (s: Session, body: Record<string, unknown>) =>
    run(s, async (): Promise<ResetResponse> => {
      const seed = body.seed;
      if (seed !== undefined && seed !== null && !Number.isInteger(seed)) throw new HttpError(400, "bad_request", `"seed" must be an integer, got ${JSON.stringify(seed)}`);
      const opts = body.options;
      if (opts !== undefined && opts !== null && (typeof opts !== "object" || Array.isArray(opts))) {
        throw new HttpError(400, "bad_request", `"options" must be a JSON object, got ${JSON.stringify(opts)}`);
      }
      try {
        if (opts) checkClientOptions("reset", opts as Record<string, unknown>, resetRules);
        const [observation, info] = await s.env.reset({
          ...(seed !== undefined && seed !== null ? { seed: seed as number } : {}),
          ...(opts ? { options: opts as Record<string, unknown> } : {}),
        });
        s.episodeId++;
        s.stepCount = 0;
        s.done = false;
        return { observation, info, done: false };
      } catch (err) {
        throw envError(err, "reset");
      }
    });

  const doStep = (s: Session, body: Record<string, unknown>) =>
    run(s, async (): Promise<StepResponse> => {
      if (!("action" in body)) throw new HttpError(400, "bad_request", `the body must be {"action": ...}; got keys ${JSON.stringify(Object.keys(body))}`);
      try {
        const [observation, reward, terminated, truncated, info] = await s.env.step(body.action);
        s.stepCount++;
        countStep();
        s.done = terminated || truncated;
        return { observation, reward, terminated, truncated, done: s.done, info };
      } catch (err) {
        throw envError(err, "step");
      }
    });

  const doState = (s: Session) =>
    run(s, async (): Promise<StateResponse> => {
      let render: string;
      try {
        render = s.env.render();
      } catch (err) {
        render = `(render failed: ${err instanceof Error ? err.message : String(err)})`;
      }
      return { sessionId: s.id, envId, episodeId: s.episodeId, stepCount: s.stepCount, done: s.done, render };
    });

  const closeSession = async (s: Session, reason: "client" | "idle" | "shutdown") => {
    if (!sessions.delete(s.id)) return;
    if (reason === "idle") {
      expired.add(s.id);
      if (expired.size > 10_000) expired.delete(expired.values().next().value!);
    }
    if (s.socket && s.socket.readyState <= 1) {
      if (reason === "idle") s.socket.close(WS_CLOSE_IDLE, `session closed after ${idleTimeoutMs} ms idle`);
      else if (reason === "shutdown") s.socket.close(1001, "server shutting down");
      else s.socket.close(1000, "session closed");
    }
    try {
      await s.env.close();
    } catch {
      // A failing close must not keep the session (or the server) alive.
    }
  };

  const lookup = (id: string): Session => {
    const s = sessions.get(id);
    if (s && s.kind === "http") return s;
    if (expired.has(id)) throw new HttpError(404, "session_expired", `session ${id} was closed after ${idleTimeoutMs} ms without requests; create a new one with POST /sessions`);
    if (options.sessionIdPrefix && /^w\d+\./.test(id) && !id.startsWith(options.sessionIdPrefix)) {
      throw new HttpError(404, "not_found", `session ${id} belongs to another worker of this server (--workers): HTTP sessions need every request on one worker; use WebSocket sessions (/ws, RemoteEnv transport "ws"), or serve without --workers`);
    }
    throw new HttpError(404, "not_found", `no session ${id}; create one with POST /sessions`);
  };

  // The session of the session-less, OpenEnv-style routes (POST /reset, POST /step, GET /state).
  let defaultSession: Promise<Session> | undefined;
  const getDefaultSession = async (create: boolean): Promise<Session> => {
    const current = defaultSession && (await defaultSession.catch(() => undefined));
    if (current && sessions.has(current.id)) return current;
    if (!create) throw new HttpError(404, "not_found", "there is no default session yet; POST /reset first (or create a session with POST /sessions)");
    reserve();
    defaultSession = createSession("http", undefined).finally(() => reserved--);
    return defaultSession;
  };

  // --- HTTP ---
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    checkAuthorization(req);
    const url = parseTarget(req.url);
    const parts = url.pathname.split("/").filter(Boolean);
    const method = req.method ?? "GET";
    const allow = (...methods: string[]) => {
      if (!methods.includes(method)) throw new HttpError(405, "method_not_allowed", `${method} ${url.pathname} is not allowed; use ${methods.join(" or ")}`);
    };
    if (parts.length === 1 && parts[0] === "health") {
      allow("GET");
      const body = { status: draining ? "draining" : "healthy", envId, ...stats(), ...options.healthExtra?.() };
      return send(res, draining ? 503 : 200, body);
    }
    if (parts.length === 1 && parts[0] === "spec") {
      allow("GET");
      const env = await Promise.resolve(factory({})).catch((err) => {
        throw envError(err, "making the env");
      });
      try {
        return send(res, 200, { ...sessionInfo({ env } as Session), sessionId: undefined });
      } finally {
        await env.close().catch(() => undefined);
      }
    }
    if (parts.length === 1 && (parts[0] === "reset" || parts[0] === "step" || parts[0] === "state")) {
      allow(parts[0] === "state" ? "GET" : "POST");
      if (parts[0] === "state") return send(res, 200, await doState(await getDefaultSession(false)));
      const body = await readJson(req, maxBodyBytes);
      if (parts[0] === "reset") return send(res, 200, await doReset(await getDefaultSession(true), body));
      return send(res, 200, await doStep(await getDefaultSession(false), body));
    }
    if (parts[0] === "sessions" && parts.length === 1) {
      allow("POST");
      const body = await readJson(req, maxBodyBytes);
      checkEnvId(body.envId);
      reserve();
      let session: Session;
      try {
        session = await createSession("http", body.options);
      } finally {
        reserved--;
      }
      return send(res, 201, sessionInfo(session));
    }
    if (parts[0] === "sessions" && parts.length === 2) {
      allow("DELETE", "GET");
      const s = lookup(parts[1]!);
      if (method === "GET") return send(res, 200, await doState(s));
      await closeSession(s, "client");
      return send(res, 200, { closed: true, sessionId: s.id });
    }
    if (parts[0] === "sessions" && parts.length === 3) {
      const s = lookup(parts[1]!);
      switch (parts[2]) {
        case "reset":
          allow("POST");
          return send(res, 200, await doReset(s, await readJson(req, maxBodyBytes)));
        case "step":
          allow("POST");
          return send(res, 200, await doStep(s, await readJson(req, maxBodyBytes)));
        case "state":
          allow("GET");
          return send(res, 200, await doState(s));
      }
    }
    throw new HttpError(
      404,
      "not_found",
      `no route ${method} ${url.pathname}; routes: GET /health, GET /spec, POST /sessions, POST /sessions/:id/reset, POST /sessions/:id/step, GET /sessions/:id/state, DELETE /sessions/:id, POST /reset, POST /step, GET /state, WebSocket /ws`,
    );
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      const e = err instanceof HttpError ? err : new HttpError(500, "env_error", err instanceof Error ? err.message : String(err));
      if (e.status >= 500) totalErrors++;
      if (!res.headersSent) send(res, e.status, { error: { code: e.code, message: redact(e.message) } } satisfies ErrorBody, e.status === 401 ? { "WWW-Authenticate": "Bearer" } : {});
      else res.destroy();
    });
  });

  // --- WebSocket ---
  const wss = new WebSocketServer({ noServer: true, maxPayload: maxBodyBytes });
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on("error", () => socket.destroy());
    const refuse = (status: number, code: ErrorCode, message: string) => {
      const body = JSON.stringify({ error: { code, message: redact(message) } });
      socket.end(
        `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? "Bad Request"}\r\n` +
          (status === 401 ? "WWW-Authenticate: Bearer\r\n" : "") +
          `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    };
    let url: URL;
    try {
      checkAuthorization(req);
      url = parseTarget(req.url);
    } catch (err) {
      const e = err as HttpError;
      return refuse(e.status, e.code, e.message);
    }
    if (url.pathname !== "/ws") return refuse(404, "not_found", `WebSocket sessions are at /ws, not ${url.pathname}`);
    const handshakeProblem = checkHandshake(req);
    if (handshakeProblem) return refuse(400, "bad_request", handshakeProblem);
    let envOptions: unknown;
    try {
      checkEnvId(url.searchParams.get("envId") ?? undefined);
      const raw = url.searchParams.get("options");
      if (raw !== null) {
        try {
          envOptions = JSON.parse(raw);
        } catch (err) {
          throw new HttpError(400, "bad_json", `the "options" query parameter is not valid JSON: ${(err as Error).message}`);
        }
        if (typeof envOptions !== "object" || envOptions === null || Array.isArray(envOptions)) {
          throw new HttpError(400, "bad_request", `the "options" query parameter must be a JSON object`);
        }
      }
      checkSessionOptions(envOptions);
      reserve();
    } catch (err) {
      const e = err instanceof HttpError ? err : new HttpError(500, "env_error", String(err));
      return refuse(e.status, e.code, e.message);
    }
    // The reservation is released exactly once: when the session is made (or fails), or when the
    // handshake is refused or dropped before that (ws then ends the socket without calling back).
    let held = true;
    const release = () => {
      if (held) {
        held = false;
        reserved--;
      }
    };
    socket.once("close", release);
    wss.handleUpgrade(req, socket, head, (ws) => {
      socket.off("close", release);
      if (!held) {
        ws.terminate();
        return;
      }
      createSession("ws", envOptions)
        .finally(release)
        .then((session) => {
          session.socket = ws;
          if (ws.readyState !== 1) return closeSession(session, "client");
          attachSocket(session, ws);
          ws.send(JSON.stringify({ type: "session", data: sessionInfo(session) }));
        })
        .catch((err) => {
          const e = err instanceof HttpError ? err : new HttpError(500, "env_error", String(err));
          const message = redact(e.message);
          if (ws.readyState !== 1) return;
          ws.send(JSON.stringify({ type: "error", error: { code: e.code, message } }));
          ws.close(WS_CLOSE_ENV_ERROR, Buffer.from(message).subarray(0, 100).toString());
        });
    });
  });

  const attachSocket = (s: Session, ws: WebSocket) => {
    ws.on("close", () => void closeSession(s, "client"));
    ws.on("error", () => void closeSession(s, "client"));
    ws.on("message", (raw, isBinary) => {
      let frame: Record<string, unknown>;
      const reply = (msg: Record<string, unknown>) => {
        if (ws.readyState === 1) ws.send(JSON.stringify(msg));
      };
      const fail = (id: unknown, err: unknown) => {
        const e = err instanceof HttpError ? err : new HttpError(500, "env_error", err instanceof Error ? err.message : String(err));
        if (e.status >= 500) totalErrors++;
        reply({ type: "error", id, error: { code: e.code, message: redact(e.message) } });
      };
      try {
        if (isBinary) throw new HttpError(400, "bad_json", "frames must be JSON text, not binary");
        frame = parseJsonObject(raw.toString());
      } catch (err) {
        return fail(undefined, err);
      }
      const { type, id } = frame;
      const data = (frame.data ?? {}) as Record<string, unknown>;
      if (typeof data !== "object" || data === null || Array.isArray(data)) return fail(id, new HttpError(400, "bad_request", `"data" must be a JSON object`));
      let pending: Promise<unknown>;
      switch (type) {
        case "reset":
          pending = doReset(s, data);
          break;
        case "step":
          pending = doStep(s, data);
          break;
        case "state":
          pending = doState(s);
          break;
        case "close":
          reply({ type: "close", id, data: { closed: true } });
          void closeSession(s, "client");
          return;
        default:
          return fail(id, new HttpError(400, "bad_request", `unknown frame type ${JSON.stringify(type)}; send "reset", "step", "state" or "close"`));
      }
      pending.then((result) => reply({ type, id, data: result }), (err) => fail(id, err));
    });
  };

  // --- Idle sessions ---
  const sweepEvery = Math.max(10, Math.min(1000, Math.floor(idleTimeoutMs / 4)));
  const sweeper = setInterval(() => {
    const now = Date.now();
    for (const s of sessions.values()) {
      if (s.busy === 0 && now - s.lastUsed > idleTimeoutMs) void closeSession(s, "idle");
    }
  }, sweepEvery);
  sweeper.unref();

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : (options.port ?? 0);
  const hostForUrl = host.includes(":") ? `[${host}]` : host;

  const api: EnvServer = {
    url: `http://${hostForUrl}:${port}`,
    wsUrl: `ws://${hostForUrl}:${port}/ws`,
    host,
    port,
    sessionCount: openCount,
    stats,
    async drain(graceMs = 10_000) {
      if (closed) return;
      draining = true;
      const until = Date.now() + graceMs;
      while (inFlight > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
      await api.close();
    },
    async close() {
      if (closed) return;
      closed = true;
      clearInterval(sweeper);
      await Promise.all([...sessions.values()].map((s) => closeSession(s, "shutdown")));
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
  return api;
}

const STATUS_TEXT: Record<number, string> = { 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable" };

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text) });
  res.end(text);
}

async function readJson(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new HttpError(413, "payload_too_large", `the request body is larger than ${limit} bytes`);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  if (text.trim() === "") return {};
  return parseJsonObject(text);
}

/** The request target as a URL; a target that is not an absolute path (or not a URL at all) is a 400. */
function parseTarget(target: string | undefined): URL {
  const path = target ?? "/";
  if (!path.startsWith("/")) throw new HttpError(400, "bad_request", "the request target must be a path starting with /, e.g. GET /health");
  try {
    return new URL(`http://localhost${path}`);
  } catch {
    throw new HttpError(400, "bad_request", "the request target is not a valid path; see GET /health and docs/remote-protocol.md for the routes");
  }
}

/** Why a WebSocket upgrade request is malformed (RFC 6455 section 4.2.1), or undefined when it is fine. */
function checkHandshake(req: IncomingMessage): string | undefined {
  if (req.method !== "GET") return `a WebSocket upgrade must be a GET, not ${req.method}`;
  if ((req.headers.upgrade ?? "").toLowerCase() !== "websocket") return `the Upgrade header must be "websocket"`;
  const key = req.headers["sec-websocket-key"];
  if (typeof key !== "string" || !/^[+/0-9A-Za-z]{22}==$/.test(key)) return "Sec-WebSocket-Key is missing or not 16 bytes of base64; use a WebSocket client";
  const version = req.headers["sec-websocket-version"];
  if (version !== "13" && version !== "8") return "Sec-WebSocket-Version must be 13 (or 8)";
  return undefined;
}

/**
 * Hides document text that an error message may quote: V8's JSON.parse errors show the start of the
 * text they failed on (`Unexpected token 'r', "root:x:0:0:"... is not valid JSON`), which may be a
 * file's content; that part is withheld, the rest of the message kept.
 */
export function redact(message: string): string {
  return message
    .replace(/Unexpected token [\s\S]* is not valid JSON/g, "the text is not valid JSON (its content is withheld)")
    .replace(/Unexpected token [\s\S]*? in JSON at position/g, "Unexpected token in JSON at position");
}

function parseJsonObject(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, "bad_json", `the body is not valid JSON (${(err as Error).message}); send a JSON object`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new HttpError(400, "bad_json", `the body must be a JSON object, got ${Array.isArray(value) ? "an array" : value === null ? "null" : typeof value}`);
  }
  return value as Record<string, unknown>;
}

/** Maps an error thrown by the env to an HTTP error: contract misuse 409, bad input 400, anything else 500. */
function envError(err: unknown, during: string): HttpError {
  if (err instanceof HttpError) return err;
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof EnvContractError) return new HttpError(409, "contract", message);
  if (err instanceof ClientOptionError) return new HttpError(400, "bad_option", message);
  if (err instanceof RangeError || err instanceof TypeError || err instanceof SyntaxError) {
    return new HttpError(400, "bad_request", `${during} failed: ${message}`);
  }
  return new HttpError(500, "env_error", `${during} failed: ${message}`);
}
