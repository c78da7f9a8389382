/**
 * `EnvPool`: one env id served by several `sinkflex envs serve` servers, used as if it were local.
 *
 * `pool.make()` gives a `PooledEnv` (an ordinary `Env`). Its episode runs in a session on the
 * least-loaded healthy server (open sessions / `sessionsPerServer`); a server at its limit (HTTP 429)
 * means wait for room, never fail. When a server dies, restarts, hangs past the step timeout or drops
 * the session's WebSocket mid-episode, the episode moves to another server: a new session is reset
 * with the same seed and options, the episode's earlier actions are sent again and each answer is
 * checked equal to the first one (envs are deterministic for a seed and actions), and then the failed
 * call is made. The caller sees the same episode as on a local env. After `maxRetries` moves, an
 * episode past `episodeTimeoutMs` of env time, or a replay that differs, the call throws
 * `EnvInfrastructureError` (its message starts with `INFRA_FAILURE_PREFIX`): an infrastructure
 * failure, to be counted and left out of training, never scored as the policy's.
 *
 * A health check (GET /health every `healthIntervalMs`) takes a server out of the rotation when it
 * has not answered `healthFailures` checks in a row (a loaded machine can miss one; a server that dies
 * is taken out at once by its sessions' failures) and brings it back when it answers again. `stats()` counts episodes, retries, failures
 * and the peak of sessions held. This file is the client-side pool only; servers are server.ts's.
 */
import { EnvContractError, type Env, type EnvMetadata, type ResetArgs, type ResetResult, type StepResult } from "../env.js";
import { spaceFromJSON, type Space } from "../spaces.js";
import { RemoteEnv, RemoteEnvError } from "./client.js";
import type { SessionInfo } from "./protocol.js";

/** Every infrastructure failure's message starts with this. */
export const INFRA_FAILURE_PREFIX = "env infrastructure failure:";

/** An episode the pool could not finish on any server: not the policy's failure. */
export class EnvInfrastructureError extends Error {
  constructor(message: string) {
    super(`${INFRA_FAILURE_PREFIX} ${message}`);
    this.name = "EnvInfrastructureError";
  }
}

/** True for the error message of an episode lost to the env servers (`EnvInfrastructureError`). */
export function isInfrastructureFailure(error: string | undefined): boolean {
  return error !== undefined && error.startsWith(INFRA_FAILURE_PREFIX);
}

export interface EnvPoolOptions {
  /** The servers, http://host:port each (all serving the same env with the same options). */
  urls: string[];
  /** The servers' API key (`envs serve --api-key`). */
  apiKey?: string;
  /** Sessions the pool opens on one server at most; keep it at or below the server's --max-sessions. Default 16. */
  sessionsPerServer?: number;
  /** The env id to ask for (checked by the server); the server's own when absent. */
  envId?: string;
  /** Session options (the server's client allow-list applies). */
  options?: Record<string, unknown>;
  /** "ws" (default: a session lives on its connection, which also works with `--workers`) or "http". */
  transport?: "ws" | "http";
  /** One reset or step (or opening a session) that takes longer is a hung server. Default 60,000 ms. */
  stepTimeoutMs?: number;
  /** An episode whose env calls (retries included) take longer in all is an infrastructure failure. Default 600,000 ms. */
  episodeTimeoutMs?: number;
  /** Moves of one episode to another server before it is an infrastructure failure. Default 3. */
  maxRetries?: number;
  /** Waiting for a free session slot longer than this is an infrastructure failure. Default 120,000 ms. */
  acquireTimeoutMs?: number;
  /** Health check period. Default 1,000 ms. */
  healthIntervalMs?: number;
  /** Health checks missed in a row that take a server out. Default 3. */
  healthFailures?: number;
  /** Hears of servers going down or up, episodes moved and episodes lost (for a run's log). */
  onEvent?: (event: PoolEvent) => void;
}

export type PoolEvent =
  | { kind: "server_down"; url: string; reason: string }
  | { kind: "server_up"; url: string }
  | { kind: "episode_retried"; from: string; to: string; replayedSteps: number; reason: string }
  | { kind: "episode_failed"; reason: string };

export interface PoolStats {
  /** Episodes started (resets asked for). */
  episodes: number;
  /** Episodes that ended (terminated or truncated by the env). */
  completed: number;
  /** Episodes moved to another server at least once. */
  retried: number;
  /** Moves in all (an episode may move more than once). */
  moves: number;
  /** Steps sent again while replaying moved episodes. */
  replayedSteps: number;
  /** Episodes lost to infrastructure failures. */
  failed: number;
  /** Answers of HTTP 429 (a server at its session limit: waited on, not failed). */
  sessionLimitWaits: number;
  /** Most sessions held at once, over all servers. */
  peakSessions: number;
  /** Sessions held now. */
  sessions: number;
  /** Servers in the rotation now. */
  serversUp: number;
}

interface Server {
  url: string;
  active: number;
  up: boolean;
  /** Not offered new sessions before this time (after a 429). */
  coolUntil: number;
  checking: boolean;
  /** Health checks missed in a row. */
  missed: number;
}

const INFRA_CODES = new Set(["network", "closed", "timeout", "session_expired", "not_found", "shutting_down"]);

/** True when `err` says the server (not the env, not the request) failed: the episode may move. */
function isServerFault(err: unknown): boolean {
  if (!(err instanceof RemoteEnvError)) return false;
  return INFRA_CODES.has(err.code) || err.status === 502 || err.status === 503 || err.status === 504;
}

function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  // fetch's own message ("fetch failed") keeps the reason in its cause (ECONNREFUSED, a reset socket).
  const cause = err.cause instanceof Error ? err.cause.message : undefined;
  return cause ? `${err.message} (${cause})` : err.message;
}

export class EnvPool {
  readonly observationSpace: Space<any>;
  readonly actionSpace: Space<any>;
  private readonly servers: Server[];
  private readonly perServer: number;
  private readonly waiters: (() => void)[] = [];
  private readonly health: NodeJS.Timeout;
  private closed = false;
  private readonly counts = { episodes: 0, completed: 0, retried: 0, moves: 0, replayedSteps: 0, failed: 0, sessionLimitWaits: 0, peakSessions: 0 };
  readonly settings: Required<Omit<EnvPoolOptions, "apiKey" | "envId" | "options" | "onEvent" | "urls">>;

  private constructor(
    readonly options: EnvPoolOptions,
    readonly spec: SessionInfo,
  ) {
    this.servers = options.urls.map((url) => ({ url: url.replace(/\/+$/, ""), active: 0, up: true, coolUntil: 0, checking: false, missed: 0 }));
    this.perServer = options.sessionsPerServer ?? 16;
    this.settings = {
      sessionsPerServer: this.perServer,
      transport: options.transport ?? "ws",
      stepTimeoutMs: options.stepTimeoutMs ?? 60_000,
      episodeTimeoutMs: options.episodeTimeoutMs ?? 600_000,
      maxRetries: options.maxRetries ?? 3,
      acquireTimeoutMs: options.acquireTimeoutMs ?? 120_000,
      healthIntervalMs: options.healthIntervalMs ?? 1_000,
      healthFailures: options.healthFailures ?? 3,
    };
    this.observationSpace = spaceFromJSON(spec.observationSpace);
    this.actionSpace = spaceFromJSON(spec.actionSpace);
    this.health = setInterval(() => void this.checkHealth(), this.settings.healthIntervalMs);
    this.health.unref();
  }

  /**
   * Checks the options, asks the servers for the env's description (GET /spec, from the first that
   * answers) and starts the health checks. Fails, saying which servers could not be reached, when
   * none answers.
   */
  static async open(options: EnvPoolOptions): Promise<EnvPool> {
    if (!Array.isArray(options.urls) || options.urls.length === 0) throw new RangeError("EnvPool: urls must list at least one server (http://host:port of `sinkflex envs serve`)");
    for (const url of options.urls) {
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        throw new RangeError(`EnvPool: ${JSON.stringify(url)} is not a URL; give http://host:port of a \`sinkflex envs serve\``);
      }
      if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new RangeError(`EnvPool: ${url} must be an http:// or https:// URL (the pool adds /ws itself)`);
    }
    if (new Set(options.urls).size !== options.urls.length) throw new RangeError(`EnvPool: urls lists a server twice: ${options.urls.join(", ")}`);
    for (const [k, min] of [["sessionsPerServer", 1], ["stepTimeoutMs", 1], ["episodeTimeoutMs", 1], ["maxRetries", 0], ["acquireTimeoutMs", 1], ["healthIntervalMs", 10], ["healthFailures", 1]] as const) {
      const v = options[k];
      if (v !== undefined && (!Number.isInteger(v) || v < min)) throw new RangeError(`EnvPool: ${k} must be an integer >= ${min}, got ${v}`);
    }
    const problems: string[] = [];
    for (const url of options.urls) {
      try {
        const res = await fetch(`${url.replace(/\/+$/, "")}/spec`, {
          headers: options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {},
          signal: AbortSignal.timeout(options.stepTimeoutMs ?? 60_000),
        });
        const body = (await res.json()) as SessionInfo & { error?: { message: string } };
        if (!res.ok) {
          // A wrong key or env id is the configuration's fault: say so at once.
          if (res.status === 401 || res.status === 404) throw new Error(`EnvPool: ${url} answered ${res.status}: ${body.error?.message ?? "no message"}`);
          problems.push(`${url}: HTTP ${res.status} ${body.error?.message ?? ""}`);
          continue;
        }
        if (options.envId !== undefined && body.envId !== options.envId) throw new Error(`EnvPool: ${url} serves "${body.envId}", not "${options.envId}"; point the pool at servers of that env`);
        // One session with the pool's options: an option the server does not allow fails here, not mid-run.
        const probe = await RemoteEnv.connect(url, {
          transport: options.transport ?? "ws",
          timeoutMs: options.stepTimeoutMs ?? 60_000,
          ...(options.apiKey !== undefined ? { apiKey: options.apiKey } : {}),
          ...(options.options ? { options: options.options } : {}),
        }).catch((err: unknown) => {
          if (isServerFault(err) || (err instanceof RemoteEnvError && err.code === "session_limit")) return undefined;
          throw new Error(`EnvPool: ${url} refused a session with options ${JSON.stringify(options.options ?? {})}: ${describe(err)}`);
        });
        await probe?.close().catch(() => undefined);
        return new EnvPool(options, body);
      } catch (err) {
        if ((err as Error).message.startsWith("EnvPool:")) throw err;
        problems.push(`${url}: ${describe(err)}`);
      }
    }
    throw new Error(`EnvPool: no server answered GET /spec (${problems.join("; ")}); start them with \`sinkflex envs serve <id> --port <port>\``);
  }

  /** Session slots in all (servers x sessionsPerServer). */
  get capacity(): number {
    return this.servers.length * this.perServer;
  }

  /** A new env whose episodes run on the pool's servers. */
  make<Obs = unknown, Act = unknown>(): PooledEnv<Obs, Act> {
    if (this.closed) throw new Error("EnvPool: make after close; open a new pool");
    return new PooledEnv<Obs, Act>(this);
  }

  stats(): PoolStats {
    const sessions = this.servers.reduce((a, s) => a + s.active, 0);
    return { ...this.counts, sessions, serversUp: this.servers.filter((s) => s.up).length };
  }

  /** The servers and what the pool knows of them. */
  serverStates(): { url: string; up: boolean; sessions: number }[] {
    return this.servers.map((s) => ({ url: s.url, up: s.up, sessions: s.active }));
  }

  /** Stops the health checks; envs still open keep their sessions until they close. */
  close(): void {
    this.closed = true;
    clearInterval(this.health);
    this.wake();
  }

  // --- used by PooledEnv ---

  /** @internal */
  count(key: "episodes" | "completed" | "retried" | "moves" | "failed", by = 1): void {
    this.counts[key] += by;
  }

  /** @internal */
  countReplayed(steps: number): void {
    this.counts.replayedSteps += steps;
  }

  /** @internal */
  emit(event: PoolEvent): void {
    try {
      this.options.onEvent?.(event);
    } catch {
      // A listener's error must not break an episode.
    }
  }

  /**
   * Opens a session on the least-loaded healthy server with room (preferring servers not in `avoid`),
   * waiting for room while every server is full or down. Throws EnvInfrastructureError past
   * `deadline`, RemoteEnvError for a configuration error (401, 400).
   */
  /** @internal */
  async openSession(avoid: ReadonlySet<string>, deadline: number): Promise<{ server: Server; env: RemoteEnv<any, any> }> {
    for (;;) {
      if (this.closed) throw new EnvInfrastructureError("the env pool was closed");
      const now = Date.now();
      const open = this.servers.filter((s) => s.up && s.active < this.perServer && s.coolUntil <= now);
      const fresh = open.filter((s) => !avoid.has(s.url));
      const choices = fresh.length > 0 ? fresh : open;
      if (choices.length === 0) {
        const left = deadline - now;
        if (left <= 0) {
          const states = this.servers.map((s) => `${s.url} ${s.up ? `${s.active}/${this.perServer} sessions` : "down"}`).join(", ");
          throw new EnvInfrastructureError(`no env server had a free session in time (${states})`);
        }
        const cooling = this.servers.filter((s) => s.up && s.coolUntil > now).map((s) => s.coolUntil - now);
        await this.waitForRoom(Math.min(left, cooling.length ? Math.max(5, Math.min(...cooling)) : left, 250));
        continue;
      }
      const server = choices.reduce((best, s) => (s.active < best.active ? s : best));
      server.active++;
      const held = this.servers.reduce((a, s) => a + s.active, 0);
      if (held > this.counts.peakSessions) this.counts.peakSessions = held;
      try {
        const env = await RemoteEnv.connect(server.url, {
          transport: this.settings.transport,
          timeoutMs: this.settings.stepTimeoutMs,
          ...(this.options.apiKey !== undefined ? { apiKey: this.options.apiKey } : {}),
          ...(this.options.envId !== undefined ? { envId: this.options.envId } : {}),
          ...(this.options.options ? { options: this.options.options } : {}),
        });
        return { server, env };
      } catch (err) {
        this.release(server);
        if (err instanceof RemoteEnvError && err.code === "session_limit") {
          // The server is full (other clients, or a lower --max-sessions): wait, never fail.
          this.counts.sessionLimitWaits++;
          server.coolUntil = Date.now() + 100;
          continue;
        }
        if (isServerFault(err)) {
          this.markDown(server, describe(err));
          throw err;
        }
        throw err;
      }
    }
  }

  /** @internal */
  release(server: Server): void {
    server.active = Math.max(0, server.active - 1);
    this.wake();
  }

  /** @internal */
  markDown(server: Server, reason: string): void {
    if (!server.up) return;
    server.up = false;
    this.emit({ kind: "server_down", url: server.url, reason });
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  private waitForRoom(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.waiters.push(done);
    });
  }

  private missedHealth(s: Server, reason: string): void {
    s.missed++;
    if (s.missed >= this.settings.healthFailures) this.markDown(s, `${reason} (${s.missed} checks in a row)`);
  }

  private async checkHealth(): Promise<void> {
    await Promise.all(
      this.servers.map(async (s) => {
        if (s.checking) return;
        s.checking = true;
        try {
          const res = await fetch(`${s.url}/health`, {
            headers: this.options.apiKey ? { authorization: `Bearer ${this.options.apiKey}` } : {},
            signal: AbortSignal.timeout(Math.max(200, Math.min(5_000, this.settings.healthIntervalMs * 2))),
          });
          const body = (await res.json().catch(() => ({}))) as { status?: string };
          if (res.ok && body.status === "healthy") {
            s.missed = 0;
            if (!s.up) {
              s.up = true;
              this.emit({ kind: "server_up", url: s.url });
              this.wake();
            }
          } else this.missedHealth(s, `GET /health answered ${res.status} ${body.status ?? ""}`.trim());
        } catch (err) {
          this.missedHealth(s, `GET /health failed: ${describe(err)}`);
        } finally {
          s.checking = false;
        }
      }),
    );
  }
}

/**
 * An env of an `EnvPool`: each episode in a session on one of its servers, moved to another server
 * (reset with the same seed, earlier actions replayed and checked) when that server fails.
 */
export class PooledEnv<Obs = unknown, Act = unknown> implements Env<Obs, Act> {
  readonly observationSpace: Space<Obs>;
  readonly actionSpace: Space<Act>;
  readonly metadata: EnvMetadata;
  private current: { server: Server; env: RemoteEnv<Obs, Act> } | undefined;
  private resetArgs: ResetArgs | undefined;
  /** The episode's actions so far and a digest of each answer, for a replay on another server. */
  private actions: Act[] = [];
  private answers: string[] = [];
  private firstAnswer = "";
  private done = false;
  private closed = false;
  private moves = 0;
  private envMs = 0;
  private lastObservation: Obs | undefined;

  constructor(private readonly pool: EnvPool) {
    this.observationSpace = pool.observationSpace;
    this.actionSpace = pool.actionSpace;
    this.metadata = { ...pool.spec.metadata, id: pool.spec.envId, pooled: pool.options.urls.length };
  }

  async reset(args: ResetArgs = {}): Promise<ResetResult<Obs>> {
    this.assertOpen("reset");
    this.resetArgs = { ...(args.seed !== undefined ? { seed: args.seed } : {}), ...(args.options ? { options: args.options } : {}) };
    this.actions = [];
    this.answers = [];
    this.firstAnswer = "";
    this.done = false;
    this.moves = 0;
    this.envMs = 0;
    this.pool.count("episodes");
    // The answer is recorded here, once the call has returned, never by the call itself: a reset that
    // is still running on an abandoned session (an episode timed out, then reset again) must not
    // overwrite the answer of the episode that follows it.
    const resetArgs = this.resetArgs;
    const result = await this.call((env) => env.reset(resetArgs));
    this.firstAnswer = JSON.stringify(result);
    this.lastObservation = result[0];
    return result;
  }

  async step(action: Act): Promise<StepResult<Obs>> {
    this.assertOpen("step");
    if (this.resetArgs === undefined) throw new EnvContractError(`${this}: step before reset; call reset() first`);
    if (this.done) throw new EnvContractError(`${this}: step after the episode ended; call reset() to start another`);
    const result = await this.call((env) => env.step(action));
    this.actions.push(action);
    this.answers.push(JSON.stringify(result));
    this.lastObservation = result[0];
    if (result[2] || result[3]) {
      this.done = true;
      this.pool.count("completed");
      // The session's slot goes back to the pool as soon as the episode ends.
      await this.dropSession();
    }
    return result;
  }

  render(): string {
    if (this.lastObservation === undefined) return `${this}: not started`;
    const obs = typeof this.lastObservation === "string" ? this.lastObservation : JSON.stringify(this.lastObservation, null, 1);
    return `${this} step ${this.actions.length}:\n${obs}`;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.dropSession();
  }

  toString(): string {
    return `PooledEnv<${this.pool.spec.env} @ ${this.pool.options.urls.length} servers>`;
  }

  /**
   * Runs `fn` on the episode's session (opening one first when there is none); on a server fault the
   * episode moves to another server (replayed up to where it was) and `fn` runs there.
   */
  private async call<T>(fn: (env: RemoteEnv<Obs, Act>) => Promise<T>): Promise<T> {
    const settings = this.pool.settings;
    const t0 = Date.now();
    const deadline = t0 + Math.max(0, settings.episodeTimeoutMs - this.envMs);
    const avoid = new Set<string>();
    try {
      for (;;) {
        let from = this.current?.server.url;
        try {
          if (!this.current) {
            this.current = (await this.pool.openSession(avoid, Math.min(deadline, Date.now() + settings.acquireTimeoutMs))) as { server: Server; env: RemoteEnv<Obs, Act> };
            // An episode whose reset was answered is replayed up to where it was; a failed reset just runs again.
            if (this.firstAnswer !== "") await this.replay();
          }
          return await this.race(fn(this.current.env), deadline);
        } catch (err) {
          if (err instanceof EnvInfrastructureError || !isServerFault(err)) throw err;
          from ??= this.current?.server.url ?? "a server";
          const server = this.current?.server;
          if (server) {
            avoid.add(server.url);
            this.pool.markDown(server, describe(err));
            await this.dropSession();
          }
          if (this.resetArgs === undefined) throw err; // not in an episode: nothing to move
          if (this.moves >= settings.maxRetries) {
            throw new EnvInfrastructureError(`the episode (seed ${this.resetArgs.seed ?? "none"}) failed on ${this.moves + 1} servers; last: ${describe(err)}`);
          }
          if (Date.now() >= deadline) throw new EnvInfrastructureError(`the episode's env calls took more than episodeTimeoutMs (${settings.episodeTimeoutMs} ms); last: ${describe(err)}`);
          if (this.moves === 0) this.pool.count("retried");
          this.moves++;
          this.pool.count("moves");
          this.pool.emit({ kind: "episode_retried", from, to: "(next free server)", replayedSteps: this.actions.length, reason: describe(err) });
        }
      }
    } catch (err) {
      if (err instanceof EnvInfrastructureError) {
        this.pool.count("failed");
        this.pool.emit({ kind: "episode_failed", reason: err.message });
        await this.dropSession();
        this.done = true;
      }
      throw err;
    } finally {
      this.envMs += Date.now() - t0;
    }
  }

  /** Resets the new session as the episode was and sends its earlier actions again, checking each answer. */
  private async replay(): Promise<void> {
    const env = this.current!.env;
    const first = JSON.stringify(await env.reset(this.resetArgs));
    if (first !== this.firstAnswer) throw new EnvInfrastructureError(`${this.current!.server.url} answered the episode's reset differently (is it serving the same env and options?), so the episode cannot move there`);
    for (let i = 0; i < this.actions.length; i++) {
      const answer = JSON.stringify(await env.step(this.actions[i]!));
      if (answer !== this.answers[i]) throw new EnvInfrastructureError(`replaying step ${i + 1} on ${this.current!.server.url} gave a different answer (the env is not deterministic for a seed and actions), so the episode cannot move`);
    }
    this.pool.countReplayed(this.actions.length);
  }

  /** `p`, or an infrastructure failure at the episode's deadline. */
  private race<T>(p: Promise<T>, deadline: number): Promise<T> {
    const left = deadline - Date.now();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new EnvInfrastructureError(`the episode's env calls took more than episodeTimeoutMs (${this.pool.settings.episodeTimeoutMs} ms)`)), Math.max(0, left));
    });
    return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
  }

  private async dropSession(): Promise<void> {
    const current = this.current;
    if (!current) return;
    this.current = undefined;
    this.pool.release(current.server);
    // Closing a session on a dead server must not hold the episode up.
    await Promise.race([current.env.close().catch(() => undefined), new Promise((r) => setTimeout(r, 1_000).unref())]);
  }

  private assertOpen(what: string): void {
    if (this.closed) throw new EnvContractError(`${this}: ${what} after close; make a new env from the pool`);
  }
}
