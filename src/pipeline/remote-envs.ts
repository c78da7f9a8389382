/**
 * Where a GRPO episode's env comes from: the local registry, or, for a suite with `remote`, an env pool
 * over its `sinkflex envs serve` servers (gym's `EnvPool`). Tasks, seeds and group indices are the
 * caller's (stepTasks), the same either way, so a remote suite gives the same trajectories as a local
 * one. This file also reads the pools' counters for a step's metrics and log: episodes moved to another
 * server, and infrastructure failures (left out of the advantages, never scored as the policy's).
 * It is not the pool itself (src/gym/remote/pool.ts) nor the GRPO step.
 */
import { EnvPool, isInfrastructureFailure, type AgentTurn, type ChatObservation, type Env, type PoolStats } from "../gym/index.js";
import type { TrainConfig } from "./config.js";
import { chatEnvKey, makeChatEnv, type SuitePlan } from "./tasks.js";

type RemoteSection = NonNullable<TrainConfig["suites"][number]["remote"]>;

/** A step's env-pool counters, summed over the remote suites (what changed since the last step). */
export interface EnvPoolStepMetrics {
  episodes: number;
  completed: number;
  /** Episodes moved to another server (with the same seed) at least once. */
  retried: number;
  moves: number;
  /** Episodes lost to the servers: excluded from the advantages, counted here. */
  infraFailures: number;
  sessionLimitWaits: number;
  peakSessions: number;
  serversUp: number;
  servers: number;
}

export class SuiteEnvs {
  private last = new Map<string, PoolStats>();

  private constructor(private readonly pools: Map<string, EnvPool>) {}

  /** Opens a pool for every suite with `remote` (failing, with what to do, when its servers cannot be reached). */
  static async open(cfg: TrainConfig, plans: readonly SuitePlan[], log: (line: string) => void): Promise<SuiteEnvs> {
    const pools = new Map<string, EnvPool>();
    try {
      for (const [i, s] of cfg.suites.entries()) {
        if (!s.remote) continue;
        const plan = plans[i]!;
        pools.set(plan.name, await openPool(s.env, s.options, s.remote, `suites.${i}.remote`, cfg.grpo.groupSize, log));
      }
    } catch (err) {
      for (const p of pools.values()) p.close();
      throw err;
    }
    return new SuiteEnvs(pools);
  }

  get remoteSuites(): number {
    return this.pools.size;
  }

  /**
   * The env maker of a plan's episodes. A pooled env is not kept between episodes (no envKey): each
   * episode holds one session, so trajectories in flight never wait on sessions held by idle envs.
   */
  envFor(plan: SuitePlan): { makeEnv: () => Env<ChatObservation, AgentTurn> | Promise<Env<ChatObservation, AgentTurn>>; envKey?: string } {
    const pool = this.pools.get(plan.name);
    if (pool) return { makeEnv: () => pool.make<ChatObservation, AgentTurn>() };
    return { makeEnv: () => makeChatEnv(plan.envId, plan.options), envKey: chatEnvKey(plan.envId, plan.options) };
  }

  /** Trajectories in flight: `concurrency`, at most the smallest pool's session slots (all of a group's resets run at once). */
  maxInFlight(concurrency: number): number {
    let n = concurrency;
    for (const p of this.pools.values()) n = Math.min(n, p.capacity);
    return n;
  }

  /** The counters since the last call, or undefined without remote suites. */
  stepMetrics(): EnvPoolStepMetrics | undefined {
    if (this.pools.size === 0) return undefined;
    const out: EnvPoolStepMetrics = { episodes: 0, completed: 0, retried: 0, moves: 0, infraFailures: 0, sessionLimitWaits: 0, peakSessions: 0, serversUp: 0, servers: 0 };
    for (const [name, pool] of this.pools) {
      const now = pool.stats();
      const before = this.last.get(name);
      const d = (k: keyof PoolStats) => now[k] - (before?.[k] ?? 0);
      out.episodes += d("episodes");
      out.completed += d("completed");
      out.retried += d("retried");
      out.moves += d("moves");
      out.infraFailures += d("failed");
      out.sessionLimitWaits += d("sessionLimitWaits");
      out.peakSessions += now.peakSessions;
      out.serversUp += now.serversUp;
      out.servers += pool.serverStates().length;
      this.last.set(name, now);
    }
    return out;
  }

  /** A log line for a step whose remote episodes were moved or lost; undefined when none were. */
  stepLine(step: number, m: EnvPoolStepMetrics | undefined): string | undefined {
    if (!m || (m.retried === 0 && m.infraFailures === 0)) return undefined;
    return `GRPO step ${step}: remote envs: ${m.retried} of ${m.episodes} episodes retried on another server (${m.moves} moves), ${m.infraFailures} infrastructure failures (left out of the advantages); ${m.serversUp}/${m.servers} servers up`;
  }

  close(): void {
    for (const p of this.pools.values()) p.close();
  }
}

/** True for a trajectory lost to the env servers (not the policy's failure). */
export function isInfrastructureTrajectory(t: { endReason: string; error?: string }): boolean {
  return t.endReason === "error" && isInfrastructureFailure(t.error);
}

async function openPool(envId: string, options: Record<string, unknown>, remote: RemoteSection, field: string, groupSize: number, log: (line: string) => void): Promise<EnvPool> {
  let apiKey: string | undefined;
  if (remote.apiKeyEnv !== undefined) {
    apiKey = process.env[remote.apiKeyEnv];
    if (!apiKey) throw new Error(`${field}.apiKeyEnv names $${remote.apiKeyEnv}, which is not set; export the servers' API key in it, or drop apiKeyEnv for servers without a key`);
  }
  const capacity = remote.urls.length * remote.sessionsPerServer;
  if (capacity < groupSize) {
    throw new Error(`${field}: ${remote.urls.length} servers x sessionsPerServer ${remote.sessionsPerServer} = ${capacity} sessions, fewer than grpo.groupSize (${groupSize}), and a group's episodes reset together; raise sessionsPerServer or add servers`);
  }
  try {
    return await EnvPool.open({
      urls: remote.urls,
      envId,
      options,
      sessionsPerServer: remote.sessionsPerServer,
      transport: remote.transport,
      stepTimeoutMs: remote.stepTimeoutMs,
      episodeTimeoutMs: remote.episodeTimeoutMs,
      maxRetries: remote.maxRetries,
      ...(apiKey !== undefined ? { apiKey } : {}),
      onEvent: (e) => {
        if (e.kind === "server_down") log(`env server ${e.url} is down (${e.reason}); its episodes move to the others`);
        else if (e.kind === "server_up") log(`env server ${e.url} is back`);
        else if (e.kind === "episode_failed") log(`an episode of ${envId} was lost to the env servers: ${e.reason}`);
      },
    });
  } catch (err) {
    throw new Error(`${field}: ${(err as Error).message}`);
  }
}
