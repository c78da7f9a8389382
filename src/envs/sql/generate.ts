/**
 * Generated SQL tasks with difficulty levels, for a curriculum: templates over the schemas of the
 * SQLite databases in a folder. The gold SQL is built from the template and kept only when it returns
 * rows. Levels: 1 count, 2 filter, 3 join (along a foreign key), 4 group-by / having, 5 nested query.
 *
 * Deterministic: the same folder, seed, level and count give the same tasks. This file reads the
 * databases directly (read-only, its own trusted queries); it does not run agent SQL.
 */
import Database from "better-sqlite3";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { Rng } from "../../core/index.js";
import { requireDbDir, type SqlTask } from "./data.js";

export const LEVELS = [1, 2, 3, 4, 5] as const;
export type Level = (typeof LEVELS)[number];

interface Column {
  name: string;
  type: "number" | "text";
}
interface Table {
  name: string;
  columns: Column[];
  rows: number;
  foreignKeys: { column: string; table: string; to: string }[];
}

function ident(name: string): string {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(name) ? name : `"${name.replace(/"/g, '""')}"`;
}
function literal(v: string | number): string {
  return typeof v === "number" ? String(v) : `'${v.replace(/'/g, "''")}'`;
}
function words(name: string): string {
  return name.replace(/_/g, " ").replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase();
}

function readSchema(db: Database.Database): Table[] {
  const names = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").pluck().all() as string[];
  return names.map((name) => {
    const q = `"${name.replace(/"/g, '""')}"`;
    const info = db.prepare(`PRAGMA table_info(${q})`).all() as { name: string; type: string }[];
    const columns = info.map((c) => {
      const values = db.prepare(`SELECT "${c.name.replace(/"/g, '""')}" FROM ${q} WHERE "${c.name.replace(/"/g, '""')}" IS NOT NULL LIMIT 200`).pluck().all();
      const numeric = values.length > 0 && values.every((v) => typeof v === "number");
      return { name: c.name, type: numeric ? ("number" as const) : ("text" as const) };
    });
    const fks = (db.prepare(`PRAGMA foreign_key_list(${q})`).all() as { from: string; table: string; to: string | null }[])
      .filter((f) => f.to)
      .map((f) => ({ column: f.from, table: f.table, to: f.to! }));
    const rows = db.prepare(`SELECT COUNT(*) FROM ${q}`).pluck().get() as number;
    return { name, columns, rows, foreignKeys: fks };
  });
}

type Candidate = { gold: string; question: string; tables: string[] } | null;

function pickValue(db: Database.Database, table: string, column: string, rng: Rng): string | number | undefined {
  const values = db
    .prepare(`SELECT DISTINCT ${ident(column)} FROM ${ident(table)} WHERE ${ident(column)} IS NOT NULL ORDER BY 1 LIMIT 50`)
    .pluck()
    .all() as (string | number)[];
  const usable = values.filter((v) => typeof v === "number" || (typeof v === "string" && v.length > 0 && v.length <= 60));
  return usable.length ? rng.pick(usable) : undefined;
}

function template(level: Level, db: Database.Database, tables: Table[], rng: Rng): Candidate {
  const withRows = tables.filter((t) => t.rows > 0);
  if (withRows.length === 0) return null;
  const t = rng.pick(withRows);
  const text = t.columns.filter((c) => c.type === "text");
  const nums = t.columns.filter((c) => c.type === "number");
  const T = ident(t.name);
  const tw = words(t.name);
  switch (level) {
    case 1: {
      if (rng.next() < 0.5 || text.length === 0) return { gold: `SELECT COUNT(*) FROM ${T}`, question: `How many ${tw} records are there?`, tables: [t.name] };
      const c = rng.pick(text);
      return { gold: `SELECT COUNT(DISTINCT ${ident(c.name)}) FROM ${T}`, question: `How many different ${words(c.name)} values appear in ${tw}?`, tables: [t.name] };
    }
    case 2: {
      const where = rng.pick(t.columns);
      const show = rng.pick(t.columns.filter((c) => c !== where).length ? t.columns.filter((c) => c !== where) : t.columns);
      const v = pickValue(db, t.name, where.name, rng);
      if (v === undefined) return null;
      if (where.type === "number" && rng.next() < 0.5) {
        return {
          gold: `SELECT ${ident(show.name)} FROM ${T} WHERE ${ident(where.name)} >= ${literal(v)}`,
          question: `List the ${words(show.name)} of every ${tw} record whose ${words(where.name)} is at least ${v}.`,
          tables: [t.name],
        };
      }
      return {
        gold: `SELECT ${ident(show.name)} FROM ${T} WHERE ${ident(where.name)} = ${literal(v)}`,
        question: `What is the ${words(show.name)} of the ${tw} records whose ${words(where.name)} is ${typeof v === "string" ? `"${v}"` : v}?`,
        tables: [t.name],
      };
    }
    case 3: {
      const linked = withRows.filter((x) => x.foreignKeys.some((f) => tables.some((y) => y.name.toLowerCase() === f.table.toLowerCase() && y.rows > 0)));
      if (linked.length === 0) return null;
      const a = rng.pick(linked);
      const fk = rng.pick(a.foreignKeys.filter((f) => tables.some((y) => y.name.toLowerCase() === f.table.toLowerCase())));
      const b = tables.find((y) => y.name.toLowerCase() === fk.table.toLowerCase())!;
      const show = rng.pick(b.columns);
      const whereCols = a.columns.filter((c) => c.name !== fk.column);
      if (whereCols.length === 0) return null;
      const where = rng.pick(whereCols);
      const v = pickValue(db, a.name, where.name, rng);
      if (v === undefined) return null;
      return {
        gold: `SELECT DISTINCT T2.${ident(show.name)} FROM ${ident(a.name)} AS T1 JOIN ${ident(b.name)} AS T2 ON T1.${ident(fk.column)} = T2.${ident(fk.to)} WHERE T1.${ident(where.name)} = ${literal(v)}`,
        question: `Which distinct ${words(show.name)} values of ${words(b.name)} are linked to ${words(a.name)} records whose ${words(where.name)} is ${typeof v === "string" ? `"${v}"` : v}?`,
        tables: [a.name, b.name],
      };
    }
    case 4: {
      if (text.length === 0) return null;
      const g = rng.pick(text);
      const counts = db.prepare(`SELECT COUNT(*) FROM ${T} GROUP BY ${ident(g.name)} ORDER BY 1 DESC`).pluck().all() as number[];
      if (counts.length < 2) return null;
      const k = Math.max(2, counts[Math.min(counts.length - 1, rng.int(Math.min(3, counts.length)))]!);
      if (counts[0]! < k) return null;
      return {
        gold: `SELECT ${ident(g.name)}, COUNT(*) FROM ${T} GROUP BY ${ident(g.name)} HAVING COUNT(*) >= ${k}`,
        question: `For each ${words(g.name)} of ${tw} that appears at least ${k} times, give the ${words(g.name)} and how many ${tw} records have it.`,
        tables: [t.name],
      };
    }
    case 5: {
      if (nums.length === 0) return null;
      const n = rng.pick(nums);
      const show = rng.pick(t.columns);
      const above = rng.next() < 0.5;
      return {
        gold: `SELECT ${ident(show.name)} FROM ${T} WHERE ${ident(n.name)} ${above ? ">" : "<"} (SELECT AVG(${ident(n.name)}) FROM ${T})`,
        question: `List the ${words(show.name)} of ${tw} records whose ${words(n.name)} is ${above ? "above" : "below"} the average ${words(n.name)} of all ${tw} records.`,
        tables: [t.name],
      };
    }
  }
}

export interface GenerateOptions {
  dbDir: string;
  /** Which levels to draw from (all by default). */
  levels?: readonly Level[];
  count: number;
  seed: number;
  /** Only these databases (every `*.sqlite` in dbDir by default). */
  dbs?: string[];
}

/** Generated tasks, each with gold SQL that returns at least one row. */
export function generateTasks(options: GenerateOptions): SqlTask[] {
  const levels = options.levels?.length ? options.levels : LEVELS;
  for (const l of levels) if (!LEVELS.includes(l)) throw new Error(`difficulty level ${l} does not exist; use 1 (count) to 5 (nested)`);
  if (!options.dbs) requireDbDir(options.dbDir);
  const names = (options.dbs ?? readdirSync(options.dbDir).filter((f) => f.endsWith(".sqlite")).map((f) => f.slice(0, -".sqlite".length))).sort();
  if (names.length === 0) throw new Error(`no *.sqlite databases in ${options.dbDir} to generate tasks from`);
  const opened = new Map<string, { db: Database.Database; tables: Table[] }>();
  const rng = new Rng(options.seed);
  const tasks: SqlTask[] = [];
  const seen = new Set<string>();
  try {
    let attempts = 0;
    while (tasks.length < options.count && attempts < options.count * 50) {
      attempts++;
      const name = rng.pick(names);
      let entry = opened.get(name);
      if (!entry) {
        const db = new Database(join(options.dbDir, `${name}.sqlite`), { readonly: true, fileMustExist: true });
        entry = { db, tables: readSchema(db) };
        opened.set(name, entry);
      }
      const level = levels[tasks.length % levels.length]!;
      const c = template(level, entry.db, entry.tables, rng.fork(attempts));
      if (!c || seen.has(`${name}:${c.gold}`)) continue;
      let rows: unknown[];
      try {
        rows = entry.db.prepare(c.gold).all();
      } catch {
        continue;
      }
      if (rows.length === 0 || rows.length > 200) continue;
      seen.add(`${name}:${c.gold}`);
      tasks.push({ id: `gen/${options.seed}/${tasks.length}`, db: name, question: c.question, gold: c.gold, hardness: `level-${level}`, tables: c.tables });
    }
  } finally {
    for (const { db } of opened.values()) db.close();
  }
  if (tasks.length < options.count) {
    throw new RangeError(`could only generate ${tasks.length} of ${options.count} tasks at levels ${levels.join(",")} from the databases; ask for fewer or other levels`);
  }
  return tasks;
}
