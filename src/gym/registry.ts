/**
 * The env registry: `register(id, factory, defaults)` and `make(id, options)`.
 *
 * Ids are versioned: `sinkflex/<name>-v<N>`. `make` builds the env and wraps it in a fixed, printable
 * wrapper stack (see `wrapStandard`), from the inside out:
 *
 *   base env -> TokenBudget (only when a budget is set) -> TimeLimit -> OrderEnforcing -> RecordEpisodeStatistics
 *
 * printed as `RecordEpisodeStatistics<OrderEnforcing<TimeLimit<ArithEnv<sinkflex/arith-v0>>>>`.
 * The limits sit inside OrderEnforcing so that an episode they cut off is also refused further steps,
 * and the statistics sit outside everything so that every end (terminated, time limit, token budget)
 * is counted. The registry holds factories only; it never imports a suite.
 */
import type { Env } from "./env.js";
import type { ClientOptionRules } from "./remote/options.js";
import { OrderEnforcing } from "./wrappers/order-enforcing.js";
import { RecordEpisodeStatistics } from "./wrappers/record-episode-statistics.js";
import { TimeLimit } from "./wrappers/time-limit.js";
import { TokenBudget, type TokenCounter } from "./wrappers/token-budget.js";

export interface EnvDefaults {
  /** Suite name, e.g. "retail", "sql". */
  suite: string;
  description: string;
  /** Number of tasks in the default task set (shown by `envs list`). */
  taskCount?: number;
  /** TimeLimit: the maximum number of steps of an episode. */
  maxEpisodeSteps?: number;
  /** TokenBudget: the maximum number of characters/tokens of observations an episode may produce. */
  tokenBudget?: number;
  /** Default options passed to the factory; `make`'s options override them. */
  options?: Record<string, unknown>;
  /**
   * The options a remote client of `serveEnv` may set, with their types and bounds (see
   * remote/options.ts); the wrapper settings are added for every env. None besides those when absent.
   */
  clientOptions?: ClientOptionRules;
}

export type EnvFactory = (options: Record<string, unknown>) => Env<any, any> | Promise<Env<any, any>>;

export interface EnvSpec {
  id: string;
  factory: EnvFactory;
  defaults: EnvDefaults;
}

const ID_PATTERN = /^[a-z0-9][a-z0-9_.-]*\/[a-z0-9][a-z0-9_.-]*-v\d+$/;
const registry = new Map<string, EnvSpec>();

export function register(id: string, factory: EnvFactory, defaults: EnvDefaults): void {
  if (!ID_PATTERN.test(id)) {
    throw new Error(`register: invalid env id "${id}"; ids look like "namespace/name-v0" (lowercase, versioned)`);
  }
  if (registry.has(id)) throw new Error(`register: env id "${id}" is already registered`);
  registry.set(id, { id, factory, defaults });
}

export function spec(id: string): EnvSpec {
  const found = registry.get(id);
  if (!found) {
    const known = [...registry.keys()].sort();
    throw new Error(`unknown env id "${id}". Registered ids: ${known.join(", ") || "(none)"}. Run \`sinkflex envs list\`.`);
  }
  return found;
}

export function registeredIds(): string[] {
  return [...registry.keys()].sort();
}

export function specs(): EnvSpec[] {
  return registeredIds().map((id) => registry.get(id)!);
}

/** For tests only: remove an id. */
export function unregister(id: string): void {
  registry.delete(id);
}

/** TimeLimit's default when neither the registration nor `make` says how long an episode may be. */
export const DEFAULT_MAX_EPISODE_STEPS = 100;

/**
 * The keys of `make`'s options that configure the wrapper stack instead of the env; they are removed
 * before the options reach the factory.
 */
export interface WrapperSettings {
  /** TimeLimit: steps per episode (defaults.maxEpisodeSteps, else DEFAULT_MAX_EPISODE_STEPS; Infinity for none). */
  maxEpisodeSteps?: number;
  /** TokenBudget: observation tokens per episode; no TokenBudget wrapper when neither this nor defaults.tokenBudget is set. */
  tokenBudget?: number;
  /** TokenBudget: counts an observation's tokens; characters of its text by default. */
  tokenCounter?: TokenCounter;
}

const WRAPPER_KEYS = ["maxEpisodeSteps", "tokenBudget", "tokenCounter"] as const;

/** Splits `make`'s options into the factory's options and the wrapper settings. */
export function splitMakeOptions(options: Record<string, unknown>): { envOptions: Record<string, unknown>; wrappers: WrapperSettings } {
  const envOptions: Record<string, unknown> = {};
  const wrappers: WrapperSettings = {};
  for (const [key, value] of Object.entries(options)) {
    if ((WRAPPER_KEYS as readonly string[]).includes(key)) {
      if (value === undefined || value === null) continue;
      if (key === "tokenCounter") {
        if (typeof value !== "function") throw new TypeError(`make: options.tokenCounter must be a function (observation) => number`);
        wrappers.tokenCounter = value as TokenCounter;
      } else {
        if (typeof value !== "number" || !(value > 0)) {
          throw new TypeError(`make: options.${key} must be a positive number, got ${JSON.stringify(value)}`);
        }
        wrappers[key as "maxEpisodeSteps" | "tokenBudget"] = value;
      }
    } else {
      envOptions[key] = value;
    }
  }
  return { envOptions, wrappers };
}

/**
 * Wraps a base env in the standard stack (see the top of this file). `defaults` supplies the
 * registered limits; `settings` overrides them.
 */
export function wrapStandard<Obs, Act>(
  env: Env<Obs, Act>,
  settings: WrapperSettings = {},
  defaults: Pick<EnvDefaults, "maxEpisodeSteps" | "tokenBudget"> = {},
): RecordEpisodeStatistics<Obs, Act> {
  let wrapped: Env<Obs, Act> = env;
  const budget = settings.tokenBudget ?? defaults.tokenBudget;
  if (budget !== undefined) wrapped = new TokenBudget(wrapped, budget, settings.tokenCounter);
  wrapped = new TimeLimit(wrapped, settings.maxEpisodeSteps ?? defaults.maxEpisodeSteps ?? DEFAULT_MAX_EPISODE_STEPS);
  wrapped = new OrderEnforcing(wrapped);
  return new RecordEpisodeStatistics(wrapped);
}

/**
 * Builds the registered env without wrappers: the factory gets `defaults.options` merged with
 * `options` (wrapper settings removed), and the env's metadata gets the id, description and task count.
 */
export async function makeUnwrapped(id: string, options: Record<string, unknown> = {}): Promise<Env<any, any>> {
  const found = spec(id);
  const { envOptions } = splitMakeOptions(options);
  return build(found, envOptions);
}

/**
 * Builds the registered env `id` in the standard wrapper stack. `options` are merged over the
 * registration's `defaults.options` and passed to the factory, except the wrapper settings
 * (`maxEpisodeSteps`, `tokenBudget`, `tokenCounter`), which configure the stack.
 */
export async function make<Obs = any, Act = any>(id: string, options: Record<string, unknown> = {}): Promise<Env<Obs, Act>> {
  const found = spec(id);
  const { envOptions, wrappers } = splitMakeOptions(options);
  const env = await build(found, envOptions);
  return wrapStandard(env, wrappers, found.defaults) as Env<Obs, Act>;
}

async function build(found: EnvSpec, envOptions: Record<string, unknown>): Promise<Env<any, any>> {
  const env = await found.factory({ ...found.defaults.options, ...envOptions });
  if (!env || typeof env.reset !== "function" || typeof env.step !== "function" || typeof env.metadata !== "object" || env.metadata === null) {
    throw new TypeError(`make: the factory of "${found.id}" did not return an Env (reset, step, close and a metadata object)`);
  }
  env.metadata.id = found.id;
  env.metadata.suite ??= found.defaults.suite;
  env.metadata.description ??= found.defaults.description;
  if (env.metadata.taskCount === undefined && found.defaults.taskCount !== undefined) env.metadata.taskCount = found.defaults.taskCount;
  return env;
}
