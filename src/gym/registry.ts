/**
 * The env registry: `register(id, factory, defaults)` and `make(id, options)`.
 *
 * Ids are versioned: `sinkflex/<name>-v<N>`. `make` builds the env and wraps it in a fixed, printable
 * wrapper stack (see `wrapStandard`). The registry holds factories only; it never imports a suite.
 */
import type { Env } from "./env.js";

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
