/**
 * The environment contract: a Gymnasium-style, asynchronous `Env<Obs, Act>`.
 *
 * `reset` starts an episode, `step` advances it, `close` releases resources. `terminated` (the task
 * ended, in success or failure) is kept apart from `truncated` (a limit cut the episode off). This file
 * holds the types and the small base class; wrappers, the registry, the checker and the vector env are
 * their own files.
 */
import type { Space } from "./spaces.js";

export type Info = Record<string, unknown>;

export interface ResetArgs {
  /** Seeds the episode: the same seed and the same actions give the same trajectory. */
  seed?: number;
  /** Env-specific options, for example `{ taskIndex: 3 }`. */
  options?: Record<string, unknown>;
}

export type ResetResult<Obs> = [obs: Obs, info: Info];
export type StepResult<Obs> = [obs: Obs, reward: number, terminated: boolean, truncated: boolean, info: Info];

export interface EnvMetadata {
  /** The registered id, e.g. `sinkflex/tau-retail-v0`, once made through the registry. */
  id?: string;
  /** Human-readable description. */
  description?: string;
  /** Number of tasks in the env's task set, when it has one. */
  taskCount?: number;
  [key: string]: unknown;
}

export interface Env<Obs = unknown, Act = unknown> {
  readonly observationSpace: Space<Obs>;
  readonly actionSpace: Space<Act>;
  readonly metadata: EnvMetadata;
  reset(args?: ResetArgs): Promise<ResetResult<Obs>>;
  step(action: Act): Promise<StepResult<Obs>>;
  /** The current state as text, for people and logs. */
  render(): string;
  /** Releases resources. Safe to call more than once. */
  close(): Promise<void>;
  /** The class-style name used when printing a wrapper stack, e.g. `RetailEnv<sinkflex/tau-retail-v0>`. */
  toString(): string;
}

/** Thrown when an env is used against its contract (step before reset, step after the end, ...). */
export class EnvContractError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EnvContractError";
  }
}

/** Follows a wrapper stack (each wrapper exposes its inner env as `env`) down to the base env. */
export function unwrap(env: Env<any, any>): Env<any, any> {
  let current: Env<any, any> = env;
  for (let inner = (current as { env?: Env<any, any> }).env; inner; inner = (current as { env?: Env<any, any> }).env) {
    current = inner;
  }
  return current;
}
