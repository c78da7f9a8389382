/**
 * The run's remote sampler (config `sampler`): GRPO's rollouts sampled by a pool of OpenAI-compatible
 * policy servers (vLLM replicas, `sinkflex serve --allow-reload`) while the engine trains, and the sync
 * that keeps them serving the trainer's weights.
 *
 * `open` syncs once before the first rollout (the servers may have started on any checkpoint of the
 * model's shape: from then on they serve exactly the policy entering RL), and `sync` runs after every
 * update, inside the rollout's `swapWeights` so that nothing samples in between: it saves the policy
 * (full weights, or the LoRA adapter the engine trains) to `<weightsDir>/v<version>`, has every replica
 * load it (src/rollout/remote-sampler.ts) and waits for each to confirm the version; the folders before
 * it are removed. This file trains nothing and speaks no HTTP itself.
 */
import { existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { ReplicaPool, type SyncReport } from "../rollout/index.js";
import type { SamplerConfig } from "./config.js";
import { savePolicy, type Policy } from "./policy.js";

/** What a step's metrics record of the remote sampler. */
export interface RemoteSamplerMetrics {
  /** Replicas in the pool, and the milliseconds the last sync took (saving the weights and every replica's load). */
  replicas: number;
  syncMs: number;
  /** Requests each replica served during the step, by URL. */
  requests: Record<string, number>;
  /** Replicas that left the pool during the step, with why. */
  dropped?: { url: string; reason: string }[];
}

export class RemoteSampler {
  private lastSync: (SyncReport & { saveMs: number }) | undefined;
  private lastRequests = new Map<string, number>();
  private dropped: { url: string; reason: string }[] = [];

  private constructor(
    readonly pool: ReplicaPool,
    readonly weightsDir: string,
  ) {}

  /**
   * The pool of `cfg`'s servers, already serving `policy`'s weights as its current version. `runDir` holds
   * the default weights folder; `log` is told when a replica leaves the pool.
   */
  static async open(cfg: SamplerConfig, policy: Policy, runDir: string, log: (msg: string) => void): Promise<RemoteSampler> {
    let apiKey: string | undefined;
    if (cfg.apiKeyEnv) {
      apiKey = process.env[cfg.apiKeyEnv];
      if (!apiKey) throw new Error(`sampler.apiKeyEnv names ${cfg.apiKeyEnv}, which is not set: export the servers' API key in it, or drop apiKeyEnv`);
    }
    const weightsDir = resolve(cfg.weightsDir ?? join(runDir, "sampler-weights"));
    mkdirSync(weightsDir, { recursive: true });
    const pool = new ReplicaPool({
      urls: cfg.urls,
      model: cfg.model,
      sync: cfg.sync,
      apiKey,
      timeoutMs: cfg.timeoutMs,
      syncTimeoutMs: cfg.syncTimeoutMs,
      maxConcurrency: cfg.maxConcurrency,
      log,
    });
    const remote = new RemoteSampler(pool, weightsDir);
    await remote.sync(policy);
    return remote;
  }

  /** Saves `policy` for the servers and waits until every replica serves it as its policy version. */
  async sync(policy: Policy): Promise<SyncReport> {
    const version = policy.engine.policyVersion;
    const name = `v${String(version).padStart(8, "0")}`;
    const dir = join(this.weightsDir, name);
    const t0 = performance.now();
    rmSync(dir, { recursive: true, force: true });
    await savePolicy(policy, dir);
    const saveMs = performance.now() - t0;
    const report = await this.pool.syncWeights(dir, version);
    this.dropped.push(...report.dropped);
    this.lastSync = { ...report, ms: performance.now() - t0, saveMs };
    // Every replica serves this version now: the folders before it are read by none.
    for (const old of existsSync(this.weightsDir) ? readdirSync(this.weightsDir) : []) {
      if (/^v\d{8}$/.test(old) && old !== name) rmSync(join(this.weightsDir, old), { recursive: true, force: true });
    }
    return report;
  }

  /** The step's record: replicas, the last sync's time, requests per replica since the last call, replicas lost. */
  stepMetrics(): RemoteSamplerMetrics {
    const requests: Record<string, number> = {};
    for (const s of this.pool.stats()) {
      requests[s.url] = s.requests - (this.lastRequests.get(s.url) ?? 0);
      this.lastRequests.set(s.url, s.requests);
    }
    const dropped = this.dropped;
    this.dropped = [];
    return { replicas: this.pool.live.length, syncMs: Math.round(this.lastSync?.ms ?? 0), requests, ...(dropped.length ? { dropped } : {}) };
  }
}
