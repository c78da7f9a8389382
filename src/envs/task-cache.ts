/**
 * Generated task sets shared by the envs of one configuration. A training run opens an env per
 * trajectory (hundreds a step), each with the same options: the suite's tasks are generated once and
 * every env reads the same copy. The copy is deep-frozen, so an env that tried to change a task would
 * throw rather than leak the change into the next episode.
 */
const MAX_ENTRIES = 32;
const cache = new Map<string, readonly unknown[]>();

function deepFreeze<T>(value: T): T {
  if (value && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value as object)) deepFreeze(v);
  }
  return value;
}

/**
 * The task list `generate` makes for `key` (a suite name and its generation options, as JSON), from
 * the cache when an env of the same options made it before. The least recently used lists are dropped
 * beyond 32 entries.
 */
export function cachedTasks<T>(suite: string, key: unknown, generate: () => T[]): readonly T[] {
  const k = `${suite}:${JSON.stringify(key)}`;
  const hit = cache.get(k);
  if (hit) {
    cache.delete(k);
    cache.set(k, hit);
    return hit as readonly T[];
  }
  const tasks = deepFreeze(generate());
  cache.set(k, tasks);
  if (cache.size > MAX_ENTRIES) cache.delete(cache.keys().next().value!);
  return tasks;
}
