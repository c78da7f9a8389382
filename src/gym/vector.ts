/**
 * VectorEnv: N envs stepped concurrently (each `step` runs the N sub-env steps with Promise.all),
 * with batched results (arrays indexed by sub-env) and a declared autoreset mode, as in Gymnasium 1.x:
 *
 *  - "next-step": when sub-env i ends at step t, its result at t is the ending one; at step t+1 its
 *    action is ignored and it is reset instead (reward 0, not terminated, not truncated, info =
 *    the reset info plus `autoreset: true`).
 *  - "same-step": when sub-env i ends, it is reset in the same step: the returned observation is the
 *    new episode's first one, the reward and flags are the ending step's, and the ending step's
 *    observation and info are in `info.finalObservation` / `info.finalInfo`.
 *  - "disabled": nothing resets by itself; stepping an ended sub-env is an error until
 *    `reset({ mask })` resets it.
 *
 * Autoreset seeds are drawn from a generator seeded by the last `reset` seed, so a seeded run is
 * repeatable. This is not an `Env` itself (its results are batches); it owns and closes its sub-envs.
 */
import { EnvContractError, type Env, type Info } from "./env.js";
import { make } from "./registry.js";
import { Rng } from "../core/index.js";
import type { Space } from "./spaces.js";

export type AutoresetMode = "next-step" | "same-step" | "disabled";
export const AUTORESET_MODES: readonly AutoresetMode[] = ["next-step", "same-step", "disabled"];

export interface VectorResetArgs {
  /** One seed (sub-env i gets seed + i) or one per sub-env. */
  seed?: number | number[];
  options?: Record<string, unknown>;
  /** Reset only the sub-envs whose entry is true (the others keep their current episode). */
  mask?: boolean[];
}

export type VectorResetResult<Obs> = [obs: Obs[], infos: Info[]];
export type VectorStepResult<Obs> = [obs: Obs[], rewards: number[], terminated: boolean[], truncated: boolean[], infos: Info[]];

export interface VectorEnvOptions {
  /** Default "next-step". */
  autoresetMode?: AutoresetMode;
}

export class VectorEnv<Obs = unknown, Act = unknown> {
  readonly autoresetMode: AutoresetMode;
  private readonly lastObs: Obs[];
  /** Sub-envs whose episode ended and that are not yet reset. */
  private readonly ended: boolean[];
  private started: boolean[];
  private rng = new Rng(0);
  private closed = false;

  constructor(
    readonly envs: Env<Obs, Act>[],
    options: VectorEnvOptions = {},
  ) {
    if (envs.length === 0) throw new RangeError("VectorEnv: needs at least one env");
    this.autoresetMode = options.autoresetMode ?? "next-step";
    if (!AUTORESET_MODES.includes(this.autoresetMode)) {
      throw new RangeError(`VectorEnv: autoresetMode must be one of ${AUTORESET_MODES.join(", ")}, got ${JSON.stringify(this.autoresetMode)}`);
    }
    this.lastObs = new Array(envs.length);
    this.ended = new Array(envs.length).fill(false);
    this.started = new Array(envs.length).fill(false);
  }

  /** `n` copies of the registered env `id`, each built by `make` with the same options. */
  static async make<Obs = any, Act = any>(
    id: string,
    n: number,
    options: Record<string, unknown> = {},
    vectorOptions: VectorEnvOptions = {},
  ): Promise<VectorEnv<Obs, Act>> {
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`VectorEnv.make: n must be a positive integer, got ${n}`);
    const envs = await Promise.all(Array.from({ length: n }, () => make<Obs, Act>(id, options)));
    return new VectorEnv(envs, vectorOptions);
  }

  get numEnvs(): number {
    return this.envs.length;
  }

  get singleObservationSpace(): Space<Obs> {
    return this.envs[0]!.observationSpace;
  }

  get singleActionSpace(): Space<Act> {
    return this.envs[0]!.actionSpace;
  }

  async reset(args: VectorResetArgs = {}): Promise<VectorResetResult<Obs>> {
    this.assertOpen();
    const n = this.numEnvs;
    const { seed, mask } = args;
    if (Array.isArray(seed) && seed.length !== n) throw new RangeError(`VectorEnv.reset: ${seed.length} seeds for ${n} envs`);
    if (mask && mask.length !== n) throw new RangeError(`VectorEnv.reset: a mask of ${mask.length} entries for ${n} envs`);
    const base = Array.isArray(seed) ? seed[0] : seed;
    this.rng = new Rng(base ?? Math.floor(Math.random() * 2 ** 31));
    const seeds = Array.from({ length: n }, (_, i) => (Array.isArray(seed) ? seed[i] : seed === undefined ? undefined : seed + i));
    const infos: Info[] = new Array(n).fill(undefined).map(() => ({}));
    await this.all(async (env, i) => {
      if (mask && !mask[i]) return;
      const [obs, info] = await env.reset({ seed: seeds[i], ...(args.options ? { options: args.options } : {}) });
      this.lastObs[i] = obs;
      infos[i] = info;
      this.ended[i] = false;
      this.started[i] = true;
    });
    return [[...this.lastObs], infos];
  }

  async step(actions: Act[]): Promise<VectorStepResult<Obs>> {
    this.assertOpen();
    const n = this.numEnvs;
    if (!Array.isArray(actions) || actions.length !== n) {
      throw new RangeError(`VectorEnv.step: expected ${n} actions, got ${Array.isArray(actions) ? actions.length : typeof actions}`);
    }
    const notStarted = this.started.findIndex((s) => !s);
    if (notStarted >= 0) throw new EnvContractError(`VectorEnv: sub-env ${notStarted} was never reset; call reset() first`);
    if (this.autoresetMode === "disabled") {
      const i = this.ended.findIndex((e) => e);
      if (i >= 0) throw new EnvContractError(`VectorEnv (autoreset disabled): sub-env ${i} has ended; call reset({ mask }) for it first`);
    }
    // Seeds for this step's resets are drawn up front, in sub-env order, so concurrency cannot reorder them.
    const resetSeeds = Array.from({ length: n }, () => this.rng.int(2 ** 31));
    const obs: Obs[] = new Array(n);
    const rewards: number[] = new Array(n).fill(0);
    const terminated: boolean[] = new Array(n).fill(false);
    const truncated: boolean[] = new Array(n).fill(false);
    const infos: Info[] = new Array(n);

    await this.all(async (env, i) => {
      if (this.autoresetMode === "next-step" && this.ended[i]) {
        const [o, info] = await env.reset({ seed: resetSeeds[i] });
        this.ended[i] = false;
        obs[i] = o;
        infos[i] = { ...info, autoreset: true };
        return;
      }
      const [o, r, term, trunc, info] = await env.step(actions[i]!);
      rewards[i] = r;
      terminated[i] = term;
      truncated[i] = trunc;
      obs[i] = o;
      infos[i] = info;
      if (!term && !trunc) return;
      if (this.autoresetMode === "same-step") {
        const [first, resetInfo] = await env.reset({ seed: resetSeeds[i] });
        obs[i] = first;
        infos[i] = { ...resetInfo, finalObservation: o, finalInfo: info };
      } else {
        this.ended[i] = true;
      }
    });
    for (let i = 0; i < n; i++) this.lastObs[i] = obs[i]!;
    return [obs, rewards, terminated, truncated, infos];
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all(this.envs.map((e) => e.close()));
  }

  toString(): string {
    return `VectorEnv<${this.numEnvs}x ${this.envs[0]!.toString()}, autoreset=${this.autoresetMode}>`;
  }

  private assertOpen(): void {
    if (this.closed) throw new EnvContractError("VectorEnv: used after close; make a new one");
  }

  /** Runs `fn` on every sub-env concurrently; an error names the sub-env it came from. */
  private async all(fn: (env: Env<Obs, Act>, i: number) => Promise<void>): Promise<void> {
    await Promise.all(
      this.envs.map((env, i) =>
        fn(env, i).catch((err: unknown) => {
          const message = err instanceof Error ? err.message : String(err);
          const wrapped = err instanceof EnvContractError ? new EnvContractError(`sub-env ${i}: ${message}`) : new Error(`sub-env ${i}: ${message}`, { cause: err });
          throw wrapped;
        }),
      ),
    );
  }
}
