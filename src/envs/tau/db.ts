/**
 * The tau-bench databases: loading the JSON collections once, and a per-episode copy-on-write view.
 *
 * A `TauDb` reads through to the shared, never-mutated base collections and copies a record into its
 * own overlay the first time a tool fetches it for writing (`get`), so a fresh episode costs nothing
 * and two episodes never see each other's changes. `changedRecords()` is the set of records that differ
 * from the base: exactly the shape of `changed_records` in the expected files. This file does not know
 * the tools or the tasks.
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pyClone, pyEqual, pyParse, type PyRecord } from "./pyjson.js";
import { benchmarkDataDir } from "../data-dir.js";

export type Domain = "retail" | "airline";
export type Collections = Record<string, Record<string, PyRecord>>;

export const DOMAIN_COLLECTIONS: Record<Domain, string[]> = {
  retail: ["users", "orders", "products"],
  airline: ["users", "flights", "reservations"],
};

/**
 * The folder holding `tau-bench/` data: `$SINKFLEX_DATA_DIR` when set, else `../shared/data` next to
 * the repository (found from this file's location, not the working directory).
 */
export function dataRoot(): string {
  return benchmarkDataDir();
}

/** The folder of one domain's data, e.g. `<data>/tau-bench/retail`. */
export function domainDir(domain: Domain): string {
  return join(dataRoot(), "tau-bench", domain);
}

/** Reads a JSON file keeping Python's float/int distinction, with an error that says what to do. */
export function readPyJson(path: string): any {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new Error(`cannot read ${path} (${(err as Error).message}); check the path, or set SINKFLEX_DATA_DIR to the data folder`);
  }
  try {
    return pyParse(text);
  } catch (err) {
    throw new Error(`${path} is not valid JSON: ${(err as Error).message}`);
  }
}

const baseCache = new Map<string, Collections>();

/** The base collections of a domain, loaded once per folder and shared read-only by every episode. */
export function loadBase(domain: Domain, dbDir?: string): Collections {
  const dir = resolve(dbDir ?? join(domainDir(domain), "db"));
  const key = `${domain}:${dir}`;
  let base = baseCache.get(key);
  if (!base) {
    base = {};
    for (const name of DOMAIN_COLLECTIONS[domain]) base[name] = readPyJson(join(dir, `${name}.json`));
    baseCache.set(key, base);
  }
  return base;
}

/** A per-episode, copy-on-write view of the collections. */
export class TauDb {
  private readonly overlay = new Map<string, Map<string, PyRecord>>();

  constructor(
    readonly domain: Domain,
    private readonly base: Collections,
  ) {
    for (const name of Object.keys(base)) this.overlay.set(name, new Map());
  }

  private layer(collection: string): Map<string, PyRecord> {
    const layer = this.overlay.get(collection);
    if (!layer) throw new Error(`unknown collection "${collection}" (known: ${[...this.overlay.keys()].join(", ")})`);
    return layer;
  }

  has(collection: string, id: string): boolean {
    return this.layer(collection).has(id) || Object.prototype.hasOwnProperty.call(this.base[collection]!, id);
  }

  /** The record, copied into this episode's overlay so that it may be changed; undefined when absent. */
  get(collection: string, id: string): PyRecord | undefined {
    const layer = this.layer(collection);
    const own = layer.get(id);
    if (own) return own;
    if (!Object.prototype.hasOwnProperty.call(this.base[collection]!, id)) return undefined;
    const copy = pyClone(this.base[collection]![id]!);
    layer.set(id, copy);
    return copy;
  }

  /** The record for reading only (never mutate it). */
  peek(collection: string, id: string): PyRecord | undefined {
    return this.layer(collection).get(id) ?? (Object.prototype.hasOwnProperty.call(this.base[collection]!, id) ? this.base[collection]![id] : undefined);
  }

  /** Adds a new record (ids not in the base come after the base's, in insertion order). */
  put(collection: string, id: string, record: PyRecord): void {
    this.layer(collection).set(id, record);
  }

  /** All [id, record] pairs in Python's dict order, for reading only. */
  *entries(collection: string): Generator<[string, PyRecord]> {
    const layer = this.layer(collection);
    const base = this.base[collection]!;
    for (const id of Object.keys(base)) yield [id, layer.get(id) ?? base[id]!];
    for (const [id, rec] of layer) if (!Object.prototype.hasOwnProperty.call(base, id)) yield [id, rec];
  }

  /** Every record that differs from the base (or is new): `{collection: {id: record}}`, empty collections left out. */
  changedRecords(): Collections {
    const out: Collections = {};
    for (const [name, layer] of this.overlay) {
      for (const [id, rec] of layer) {
        const before = this.base[name]![id];
        if (before !== undefined && pyEqual(before, rec)) continue;
        (out[name] ??= {})[id] = rec;
      }
    }
    return out;
  }
}

/** Compares two episodes' databases (both views over the same base): the ids of records that differ. */
export function diffDbs(a: TauDb, b: TauDb): string[] {
  const ca = a.changedRecords();
  const cb = b.changedRecords();
  const diffs: string[] = [];
  for (const name of new Set([...Object.keys(ca), ...Object.keys(cb)])) {
    for (const id of new Set([...Object.keys(ca[name] ?? {}), ...Object.keys(cb[name] ?? {})])) {
      if (!pyEqual(a.peek(name, id) ?? null, b.peek(name, id) ?? null)) diffs.push(`${name}/${id}`);
    }
  }
  return diffs;
}
