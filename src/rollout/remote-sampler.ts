/**
 * Several OpenAI-compatible policy servers (vLLM replicas, `sinkflex serve --allow-reload`) as one
 * `Sampler`, and the weight sync that keeps them serving the trainer's policy version.
 *
 * Sampling: a session is token ids on the client (as in openai-policy.ts). Its first sample goes to the
 * least-loaded live replica (fewest requests in flight), and it stays there, so the replica's prefix
 * cache holds its earlier turns; a fork starts on its parent's replica. A replica that cannot be reached
 * (or answers 502/503/504) is taken out of the pool, with the reason kept and logged, and the request
 * goes to another; when none is left the error names every replica and why it left.
 *
 * Weight sync (`syncWeights(path, version)`): the trainer has written the new weights to `path`, a folder
 * every replica can read; each live replica is told to load it through the documented routes of vLLM,
 * which `sinkflex serve` implements with the same paths and bodies:
 *   - "reload" (full weights; vLLM's weight-transfer control plane with its "disk" backend, dev mode):
 *     POST /init_weight_transfer_engine {init_info: {}} once, then per update POST /start_weight_update,
 *     POST /update_weights {update_info: {path}}, POST /finish_weight_update {weight_version},
 *     POST /reset_prefix_cache, and GET /weight_info must answer the new weight_version.
 *   - "lora" (a PEFT adapter; vLLM's runtime LoRA updating): POST /v1/load_lora_adapter {lora_name:
 *     "<name>-v<version>", lora_path}, GET /v1/models must list it; requests then name it as their model,
 *     and the adapter before it is unloaded (POST /v1/unload_lora_adapter).
 * Only when every live replica has confirmed the version does `policyVersion` change, so each sample
 * is recorded with the version that produced it. A replica that fails its update leaves the pool (it
 * would serve old weights); with none left the sync throws. Sampling waits while a sync runs.
 *
 * This file writes no weights and knows no trainer: the pipeline saves the folder and calls the sync.
 */
import type { EngineSession, SampleParams, SampleResult } from "../engine/index.js";
import type { Sampler } from "./batch-decoder.js";
import { ClientSession, OpenAIPolicy, OpenAIPolicyError } from "./openai-policy.js";

export type WeightSyncKind = "reload" | "lora";

export interface ReplicaPoolOptions {
  /** Each replica's base URL up to and including `/v1`, e.g. `http://10.0.0.5:8000/v1`. */
  urls: string[];
  /** The model name the replicas serve (vLLM's --served-model-name; `sinkflex serve`'s --model-name). */
  model: string;
  /** How new weights reach the replicas: a full-weights reload from a folder, or a LoRA adapter. */
  sync: WeightSyncKind;
  apiKey?: string;
  /** Per sample request. Default 120 s. */
  timeoutMs?: number;
  /** Per weight-update request (a replica loading a large checkpoint). Default 600 s. */
  syncTimeoutMs?: number;
  /** Requests in flight per replica at most, per `sampleBatch`. Default 64. */
  maxConcurrency?: number;
  /** The adapter's served name is `<loraName>-v<version>`. Default "policy". */
  loraName?: string;
  /** Told when a replica leaves the pool. */
  log?: (msg: string) => void;
}

/** What a sync did: its time, and the replicas that left the pool during it. */
export interface SyncReport {
  version: number;
  ms: number;
  replicas: number;
  dropped: { url: string; reason: string }[];
}

export class ReplicaPoolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ReplicaPoolError";
  }
}

/** One server of the pool. */
class Replica {
  inFlight = 0;
  requests = 0;
  /** Why it left the pool; undefined while it is live. */
  dead: string | undefined;
  initialized = false;
  /** The adapter it serves now (sync "lora"). */
  adapter: string | undefined;
  constructor(
    readonly url: string,
    readonly policy: OpenAIPolicy,
  ) {}
  /** The server's root, where vLLM puts its weight-transfer routes (the URL without `/v1`). */
  get root(): string {
    return this.url.replace(/\/+$/, "").replace(/\/v1$/, "");
  }
}

/** Whether an error means the replica is gone (unreachable, or a gateway saying so), not that the request was bad. */
function replicaGone(err: unknown): boolean {
  if (!(err instanceof OpenAIPolicyError)) return false;
  return err.status === undefined || err.status === 502 || err.status === 503 || err.status === 504;
}

/** A client-side session whose samples go to one replica of the pool (its `home`, chosen at the first sample). */
type PoolSession = ClientSession<Replica>;

export class ReplicaPool implements Sampler {
  /** The policy version every live replica has confirmed serving; set by `syncWeights`. */
  policyVersion = 0;
  private readonly replicas: Replica[];
  private syncing: Promise<unknown> | undefined;
  private next = 0;

  constructor(readonly options: ReplicaPoolOptions) {
    if (options.urls.length === 0) throw new ReplicaPoolError("the pool needs at least one server URL");
    if (new Set(options.urls).size !== options.urls.length) throw new ReplicaPoolError("a server URL is listed twice; list each replica once");
    if (options.sync !== "reload" && options.sync !== "lora") throw new ReplicaPoolError(`sync must be "reload" or "lora", got ${JSON.stringify(options.sync)}`);
    for (const url of options.urls) {
      if (!/^https?:\/\/.+\/v1\/?$/.test(url)) throw new ReplicaPoolError(`a replica URL must be http(s) and end in /v1 (e.g. http://127.0.0.1:8000/v1), got ${JSON.stringify(url)}`);
    }
    this.replicas = options.urls.map(
      (url) => new Replica(url, new OpenAIPolicy({ baseURL: url, model: options.model, apiKey: options.apiKey, timeoutMs: options.timeoutMs })),
    );
  }

  /** The replicas still in the pool. */
  get live(): string[] {
    return this.replicas.filter((r) => !r.dead).map((r) => r.url);
  }

  /** Requests served per replica since the pool opened, and why each one that left did. */
  stats(): { url: string; requests: number; inFlight: number; dead?: string }[] {
    return this.replicas.map((r) => ({ url: r.url, requests: r.requests, inFlight: r.inFlight, ...(r.dead ? { dead: r.dead } : {}) }));
  }

  async session(prefix: number[] = []): Promise<EngineSession> {
    return new ClientSession<Replica>((session, ids, params) => this.complete(session, ids, params), [...prefix]);
  }

  async sampleBatch(sessions: EngineSession[], params: SampleParams[]): Promise<SampleResult[]> {
    const live = Math.max(1, this.live.length);
    const limit = (this.options.maxConcurrency ?? 64) * live;
    const out: SampleResult[] = new Array(sessions.length);
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < sessions.length; i = next++) out[i] = await sessions[i]!.sample(params[i]!);
    };
    await Promise.all(Array.from({ length: Math.min(limit, sessions.length) }, worker));
    return out;
  }

  /** The live replica with the fewest requests in flight (ties in turn). */
  private leastLoaded(): Replica {
    const live = this.replicas.filter((r) => !r.dead);
    if (live.length === 0) throw new ReplicaPoolError(`every policy server has left the pool: ${this.deathNotes()}`);
    let best: Replica | undefined;
    for (let k = 0; k < live.length; k++) {
      const r = live[(this.next + k) % live.length]!;
      if (!best || r.inFlight < best.inFlight) best = r;
    }
    this.next++;
    return best!;
  }

  private deathNotes(): string {
    return this.replicas.map((r) => `${r.url} (${r.dead ?? "live"})`).join("; ");
  }

  private drop(r: Replica, reason: string): void {
    if (r.dead) return;
    r.dead = reason;
    const left = this.live.length;
    this.options.log?.(`policy server ${r.url} left the pool: ${reason}; ${left} of ${this.replicas.length} remain`);
  }

  /** One sample for `session` on its replica; a replica that is gone is replaced by another live one. */
  async complete(session: PoolSession, ids: number[], params: SampleParams): Promise<SampleResult> {
    while (this.syncing) await this.syncing.catch(() => undefined);
    for (;;) {
      const r = session.home && !session.home.dead ? session.home : this.leastLoaded();
      session.home = r;
      r.inFlight++;
      try {
        const res = await r.policy.complete(ids, params);
        r.requests++;
        return res;
      } catch (err) {
        if (!replicaGone(err)) throw err;
        this.drop(r, (err as Error).message);
        session.home = undefined;
      } finally {
        r.inFlight--;
      }
    }
  }

  /**
   * Makes every live replica serve the weights in `path` (an absolute folder they can read) as policy
   * version `version`, and returns once each has confirmed it. Replicas that fail leave the pool; with
   * none left this throws, naming each one's failure.
   */
  async syncWeights(path: string, version: number): Promise<SyncReport> {
    if (!path.startsWith("/")) throw new ReplicaPoolError(`the weights folder must be an absolute path the replicas can read, got ${JSON.stringify(path)}`);
    if (!Number.isInteger(version) || version < 0) throw new ReplicaPoolError(`the policy version must be a whole number >= 0, got ${version}`);
    while (this.syncing) await this.syncing.catch(() => undefined);
    const t0 = performance.now();
    const dropped: SyncReport["dropped"] = [];
    const run = (async () => {
      const live = this.replicas.filter((r) => !r.dead);
      if (live.length === 0) throw new ReplicaPoolError(`no policy server is left to take version ${version}: ${this.deathNotes()}`);
      await Promise.all(
        live.map(async (r) => {
          try {
            if (this.options.sync === "reload") await this.reload(r, path, version);
            else await this.loadAdapter(r, path, version);
          } catch (err) {
            const reason = `its update to version ${version} failed: ${(err as Error).message}`;
            dropped.push({ url: r.url, reason });
            this.drop(r, reason);
          }
        }),
      );
      if (this.live.length === 0) {
        throw new ReplicaPoolError(`no policy server took the weights of version ${version} (${path}): ${dropped.map((d) => `${d.url}: ${d.reason}`).join("; ")}`);
      }
      this.policyVersion = version;
    })();
    this.syncing = run;
    try {
      await run;
    } finally {
      this.syncing = undefined;
    }
    return { version, ms: performance.now() - t0, replicas: this.live.length, dropped };
  }

  /** vLLM's weight-transfer control plane with its disk backend: load the folder, commit the version, check it. */
  private async reload(r: Replica, path: string, version: number): Promise<void> {
    const weightVersion = String(version);
    if (!r.initialized) {
      await this.call(r, "POST", `${r.root}/init_weight_transfer_engine`, { init_info: {} });
      r.initialized = true;
    }
    await this.call(r, "POST", `${r.root}/start_weight_update`, {});
    await this.call(r, "POST", `${r.root}/update_weights`, { update_info: { path } });
    await this.call(r, "POST", `${r.root}/finish_weight_update`, { weight_version: weightVersion });
    // Cached prefixes hold keys and values the old weights computed.
    await this.call(r, "POST", `${r.root}/reset_prefix_cache`, undefined);
    const info = (await this.call(r, "GET", `${r.root}/weight_info`)) as { weight_version?: unknown } | string;
    const reported = typeof info === "object" && info !== null ? info.weight_version : undefined;
    if (reported !== weightVersion) {
      throw new ReplicaPoolError(`after the update it reports weight_version ${JSON.stringify(reported)}, not ${JSON.stringify(weightVersion)}`);
    }
  }

  /** vLLM's runtime LoRA updating: load the adapter under a name of its version, check it is served, unload the old one. */
  private async loadAdapter(r: Replica, path: string, version: number): Promise<void> {
    const name = `${this.options.loraName ?? "policy"}-v${version}`;
    if (r.adapter !== name) {
      await this.call(r, "POST", `${r.url.replace(/\/+$/, "")}/load_lora_adapter`, { lora_name: name, lora_path: path });
    }
    const models = (await this.call(r, "GET", `${r.url.replace(/\/+$/, "")}/models`)) as { data?: { id?: unknown }[] } | string;
    const ids = typeof models === "object" && Array.isArray(models.data) ? models.data.map((m) => m.id) : [];
    if (!ids.includes(name)) throw new ReplicaPoolError(`after loading the adapter its /v1/models does not list ${JSON.stringify(name)} (it lists ${JSON.stringify(ids)})`);
    const previous = r.adapter;
    r.adapter = name;
    r.policy.model = name;
    if (previous && previous !== name) {
      // The old adapter is no longer asked for; a server that cannot unload it keeps serving the new one.
      await this.call(r, "POST", `${r.url.replace(/\/+$/, "")}/unload_lora_adapter`, { lora_name: previous }).catch((err: unknown) =>
        this.options.log?.(`policy server ${r.url} could not unload adapter ${previous}: ${(err as Error).message}`),
      );
    }
  }

  /** One control request; JSON answers parsed, plain-text ones (vLLM's LoRA routes) returned as text. */
  private async call(r: Replica, method: "GET" | "POST", url: string, body?: unknown): Promise<unknown> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.options.apiKey) headers.authorization = `Bearer ${this.options.apiKey}`;
    let res: Response;
    try {
      res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(this.options.syncTimeoutMs ?? 600_000) });
    } catch (err) {
      throw new ReplicaPoolError(`cannot reach ${url}: ${(err as Error).message}`);
    }
    const text = await res.text();
    if (!res.ok) {
      let message = text;
      try {
        const j = JSON.parse(text) as { error?: { message?: string } | string; detail?: unknown; message?: string };
        message = typeof j.error === "string" ? j.error : (j.error?.message ?? (typeof j.detail === "string" ? j.detail : undefined) ?? j.message ?? text);
      } catch {}
      const hint =
        res.status === 404
          ? this.options.sync === "reload"
            ? ` (the server has no such route: start vLLM with VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config '{"backend":"disk"}', or sinkflex serve with --allow-reload)`
            : ` (the server has no such route: start vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora, or sinkflex serve with --allow-reload)`
          : "";
      throw new ReplicaPoolError(`${method} ${url} answered ${res.status}: ${message}${hint}`);
    }
    try {
      return JSON.parse(text) as unknown;
    } catch {
      return text;
    }
  }
}
