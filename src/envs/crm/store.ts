/**
 * Where the CRM database lives: a SQLite file (default; built once per dataset fingerprint in a cache
 * folder, then only read) or a PostgreSQL schema (rebuilt when its fingerprint differs). `CrmStore` is
 * the small read interface the HTTP server uses, with `?` placeholders in both dialects.
 *
 * This file writes the generated records and runs the server's own parameterized queries; it does not
 * run agent SQL (the read-only SQL tool does that through tools/sql).
 */
import Database from "better-sqlite3";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import type { CrmData } from "./generate.js";

type ColType = "int" | "real" | "text";
interface TableDef {
  name: string;
  columns: [string, ColType][];
  rows: (d: CrmData) => Record<string, unknown>[];
  /** Foreign keys: column -> "table(column)". */
  refs?: Record<string, string>;
}

export const TABLES: TableDef[] = [
  { name: "agents", columns: [["id", "int"], ["name", "text"], ["email", "text"], ["team", "text"], ["hired_on", "text"]], rows: (d) => d.agents as never },
  { name: "accounts", columns: [["id", "int"], ["name", "text"], ["industry", "text"], ["region", "text"], ["created_at", "text"]], rows: (d) => d.accounts as never },
  {
    name: "contacts",
    columns: [["id", "int"], ["account_id", "int"], ["first_name", "text"], ["last_name", "text"], ["email", "text"], ["phone", "text"], ["title", "text"]],
    rows: (d) => d.contacts as never,
    refs: { account_id: "accounts(id)" },
  },
  { name: "products", columns: [["id", "int"], ["name", "text"], ["category", "text"], ["price", "real"]], rows: (d) => d.products as never },
  {
    name: "orders",
    columns: [["id", "int"], ["account_id", "int"], ["contact_id", "int"], ["product_id", "int"], ["quantity", "int"], ["unit_price", "real"], ["ordered_at", "text"], ["status", "text"]],
    rows: (d) => d.orders as never,
    refs: { account_id: "accounts(id)", contact_id: "contacts(id)", product_id: "products(id)" },
  },
  { name: "issues", columns: [["id", "int"], ["name", "text"], ["description", "text"]], rows: (d) => d.issues as never },
  {
    name: "cases",
    columns: [
      ["id", "int"], ["account_id", "int"], ["contact_id", "int"], ["product_id", "int"], ["issue_id", "int"], ["agent_id", "int"], ["subject", "text"],
      ["status", "text"], ["priority", "text"], ["created_at", "text"], ["closed_at", "text"], ["handle_minutes", "int"],
    ],
    rows: (d) => d.cases as never,
    refs: { account_id: "accounts(id)", contact_id: "contacts(id)", product_id: "products(id)", issue_id: "issues(id)", agent_id: "agents(id)" },
  },
  {
    name: "case_history",
    columns: [["id", "int"], ["case_id", "int"], ["at", "text"], ["event", "text"], ["old_value", "text"], ["new_value", "text"]],
    rows: (d) => d.caseHistory as never,
    refs: { case_id: "cases(id)" },
  },
  {
    name: "case_messages",
    columns: [["id", "int"], ["case_id", "int"], ["seq", "int"], ["at", "text"], ["sender", "text"], ["text", "text"]],
    rows: (d) => d.caseMessages as never,
    refs: { case_id: "cases(id)" },
  },
  {
    name: "knowledge_articles",
    columns: [["id", "int"], ["title", "text"], ["kind", "text"], ["product_id", "int"], ["issue_id", "int"], ["body", "text"]],
    rows: (d) => d.articles as never,
    refs: { product_id: "products(id)", issue_id: "issues(id)" },
  },
];

function ddl(t: TableDef, dialect: "sqlite" | "postgres"): string {
  const type = (c: ColType) => (c === "int" ? (dialect === "sqlite" ? "INTEGER" : "integer") : c === "real" ? (dialect === "sqlite" ? "REAL" : "double precision") : dialect === "sqlite" ? "TEXT" : "text");
  const cols = t.columns.map(([name, c]) => `${name} ${type(c)}${name === "id" ? " PRIMARY KEY" : ""}${t.refs?.[name] ? ` REFERENCES ${t.refs[name]}` : ""}`);
  return `CREATE TABLE ${t.name} (${cols.join(", ")})`;
}

/** A fingerprint of the records (and table layout): a cached database is reused only when it matches. */
export function dataFingerprint(data: CrmData): string {
  const h = createHash("sha256");
  for (const t of TABLES) h.update(JSON.stringify([t.name, t.columns, t.rows(data)]));
  return h.digest("hex").slice(0, 16);
}

/** The cache folder for generated databases (`SINKFLEX_CACHE_DIR`, or the system temp folder). */
export function crmCacheDir(): string {
  return join(process.env.SINKFLEX_CACHE_DIR ?? tmpdir(), "sinkflex-crm");
}

/** Builds (once) the SQLite file of `data` and returns its path. Concurrent builders are safe (atomic rename). */
export function ensureSqliteFile(data: CrmData, dir = crmCacheDir()): string {
  const file = join(dir, `crm-seed${data.seed}-${dataFingerprint(data)}.sqlite`);
  if (existsSync(file)) return file;
  mkdirSync(dir, { recursive: true });
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
  const db = new Database(tmp);
  try {
    db.pragma("journal_mode = DELETE");
    db.transaction(() => {
      for (const t of TABLES) {
        db.exec(ddl(t, "sqlite"));
        const names = t.columns.map(([n]) => n);
        const insert = db.prepare(`INSERT INTO ${t.name} (${names.join(", ")}) VALUES (${names.map((n) => `@${n}`).join(", ")})`);
        for (const row of t.rows(data)) insert.run(Object.fromEntries(names.map((n) => [n, row[n] ?? null])));
      }
    })();
  } catch (err) {
    db.close();
    rmSync(tmp, { force: true });
    throw err;
  }
  db.close();
  renameSync(tmp, file);
  return file;
}

/** Builds (once) the PostgreSQL schema of `data`; a `crm_meta` table records the data's fingerprint. */
export async function ensurePostgresSchema(data: CrmData, url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const q = `"${schema.replace(/"/g, '""')}"`;
  const fingerprint = dataFingerprint(data);
  try {
    const found = await client.query(
      "SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'crm_meta'",
      [schema],
    );
    if (found.rowCount) {
      const meta = await client.query(`SELECT fingerprint FROM ${q}.crm_meta`);
      if (meta.rows[0]?.fingerprint === fingerprint) return;
    }
    await client.query("BEGIN");
    await client.query(`DROP SCHEMA IF EXISTS ${q} CASCADE`);
    await client.query(`CREATE SCHEMA ${q}`);
    await client.query(`SET LOCAL search_path TO ${q}`);
    for (const t of TABLES) {
      await client.query(ddl(t, "postgres"));
      const names = t.columns.map(([n]) => n);
      const rows = t.rows(data);
      for (let start = 0; start < rows.length; start += 400) {
        const params: unknown[] = [];
        const tuples = rows.slice(start, start + 400).map((r) => `(${names.map((n) => (params.push(r[n] ?? null), `$${params.length}`)).join(", ")})`);
        await client.query(`INSERT INTO ${t.name} (${names.join(", ")}) VALUES ${tuples.join(", ")}`, params);
      }
    }
    await client.query("CREATE TABLE crm_meta (fingerprint text, seed integer)");
    await client.query("INSERT INTO crm_meta VALUES ($1, $2)", [fingerprint, data.seed]);
    await client.query("COMMIT");
  } catch (err) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw err;
  } finally {
    await client.end();
  }
}

export type Row = Record<string, unknown>;

/** The server's read access: parameterized SELECTs with `?` placeholders. */
export interface CrmStore {
  readonly dialect: "sqlite" | "postgres";
  all(sql: string, params?: unknown[]): Promise<Row[]>;
  close(): Promise<void>;
}

export class SqliteCrmStore implements CrmStore {
  readonly dialect = "sqlite" as const;
  private readonly db: Database.Database;
  constructor(file: string) {
    this.db = new Database(file, { readonly: true, fileMustExist: true });
  }
  async all(sql: string, params: unknown[] = []): Promise<Row[]> {
    return this.db.prepare(sql).all(...params) as Row[];
  }
  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

const numberTypes = {
  getTypeParser(oid: number, format?: "text" | "binary") {
    if (oid === 20 || oid === 1700) return (v: string) => Number(v);
    return pg.types.getTypeParser(oid, format as "text");
  },
};

export class PostgresCrmStore implements CrmStore {
  readonly dialect = "postgres" as const;
  private readonly pool: pg.Pool;
  constructor(url: string, schema: string) {
    this.pool = new pg.Pool({ connectionString: url, max: 2, types: numberTypes, options: `-c search_path="${schema.replace(/"/g, '""')}" -c default_transaction_read_only=on` });
    this.pool.on("error", () => undefined);
  }
  async all(sql: string, params: unknown[] = []): Promise<Row[]> {
    let n = 0;
    const text = sql.replace(/\?/g, () => `$${++n}`);
    return (await this.pool.query(text, params)).rows as Row[];
  }
  async close(): Promise<void> {
    await this.pool.end().catch(() => undefined);
  }
}
