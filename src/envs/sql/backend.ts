/**
 * SQL backends for the sql suite: where a database lives and how a query runs against it.
 *
 * `SqlBackend` is the small interface the env's tools and its verifier use: list tables, describe a
 * table, run one read-only query with a timeout and a row limit. Two implementations: SQLite files
 * (queried in a child process that opens them read-only, so a runaway query is stopped by killing it)
 * and PostgreSQL (a schema per database, every query inside a READ ONLY transaction with a statement
 * timeout). Both refuse any statement that is not a single read-only query before running it. This file
 * knows nothing of tasks, questions or rewards.
 */
import { fork, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { checkReadOnly } from "./statement.js";

export type SqlValue = string | number | null;

export interface QueryResult {
  columns: string[];
  rows: SqlValue[][];
  /** True when more rows existed than `maxRows`. */
  truncated: boolean;
}

export interface ColumnInfo {
  name: string;
  type: string;
  notNull: boolean;
  primaryKey: boolean;
}

export interface TableInfo {
  name: string;
  columns: ColumnInfo[];
  foreignKeys: { column: string; references: string }[];
  rowCount: number;
  sample: SqlValue[][];
}

export interface QueryLimits {
  maxRows: number;
  timeoutMs: number;
}

/** A refused or failed query: the message says what was wrong and what to do. */
export class SqlError extends Error {
  constructor(
    message: string,
    readonly kind: "refused" | "timeout" | "error",
  ) {
    super(message);
    this.name = "SqlError";
  }
}

export interface SqlBackend {
  readonly dialect: "sqlite" | "postgres";
  listTables(db: string): Promise<string[]>;
  /** null when the table does not exist. */
  describeTable(db: string, table: string, sampleRows?: number): Promise<TableInfo | null>;
  /** Runs one read-only query; throws `SqlError` when it is refused, fails or times out. */
  query(db: string, sql: string, limits: QueryLimits): Promise<QueryResult>;
  close(): Promise<void>;
}

const RUNNER = fileURLToPath(new URL("./sqlite-runner.mjs", import.meta.url));

interface Pending {
  child: ChildProcess;
  resolve(value: unknown): void;
  reject(err: Error): void;
}

/**
 * Runners of closed backends that are still healthy (no query timed out, none in flight), kept for the
 * next backend: starting one is a Node process start (tens of milliseconds of CPU), and a rollout opens
 * an environment, so a backend, per episode. Each backend still has its runner to itself while it is
 * open, so a runaway query of one episode never stops another's. Idle runners do not keep the process
 * alive, and exit with it.
 */
const idleRunners: ChildProcess[] = [];
const MAX_IDLE_RUNNERS = 32;

function takeIdleRunner(): ChildProcess | undefined {
  while (idleRunners.length > 0) {
    const child = idleRunners.pop()!;
    child.removeAllListeners("exit");
    if (child.exitCode === null && child.signalCode === null && child.connected) {
      child.ref();
      child.channel?.ref();
      return child;
    }
  }
  return undefined;
}

/** Keeps a healthy runner for reuse; returns false when the pool is full (the caller stops it). */
function releaseRunner(child: ChildProcess): boolean {
  if (idleRunners.length >= MAX_IDLE_RUNNERS || child.exitCode !== null || child.signalCode !== null || !child.connected) return false;
  child.removeAllListeners("message");
  child.removeAllListeners("exit");
  child.once("exit", () => {
    const i = idleRunners.indexOf(child);
    if (i >= 0) idleRunners.splice(i, 1);
  });
  child.unref();
  child.channel?.unref();
  idleRunners.push(child);
  return true;
}

/**
 * SQLite files, one child process for all of them (spawned on first use, or an idle runner of a closed
 * backend reused; respawned after a timeout). `db` names a file through `resolve(db)`, e.g.
 * `DIR/<db>.sqlite`.
 */
export class SqliteBackend implements SqlBackend {
  readonly dialect = "sqlite" as const;
  private child: { child: ChildProcess; ready: Promise<void> } | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closed = false;

  constructor(private readonly resolve: (db: string) => string) {}

  async listTables(db: string): Promise<string[]> {
    return (await this.call({ op: "tables", file: this.file(db) }, 10_000)) as string[];
  }

  async describeTable(db: string, table: string, sampleRows = 3): Promise<TableInfo | null> {
    return (await this.call({ op: "describe", file: this.file(db), table, sampleRows }, 10_000)) as TableInfo | null;
  }

  async query(db: string, sql: string, limits: QueryLimits): Promise<QueryResult> {
    const check = checkReadOnly(sql);
    if (!check.ok) throw new SqlError(`query refused: ${check.reason}`, "refused");
    return (await this.call({ op: "query", file: this.file(db), sql: check.sql, maxRows: limits.maxRows }, limits.timeoutMs)) as QueryResult;
  }

  private file(db: string): string {
    const file = this.resolve(db);
    if (!existsSync(file)) throw new SqlError(`database "${db}" not found (no file ${file}); check the db name or the dbDir option`, "error");
    return file;
  }

  private spawn(): { child: ChildProcess; ready: Promise<void> } {
    if (this.closed) throw new SqlError("the SQL backend is closed", "error");
    if (this.child) return this.child;
    const reused = takeIdleRunner();
    const child = reused ?? fork(RUNNER, [], { execArgv: [], stdio: ["ignore", "ignore", "inherit", "ipc"], serialization: "advanced" });
    let onReady!: () => void;
    let onFail!: (err: Error) => void;
    const ready = new Promise<void>((resolve, reject) => {
      onReady = resolve;
      onFail = reject;
    });
    ready.catch(() => undefined); // awaited by every call; never an unhandled rejection
    child.on("message", (msg: { ready?: boolean; id: number; ok: boolean; result?: unknown; error?: string }) => {
      if (msg.ready) return onReady();
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      if (msg.ok) p.resolve(msg.result);
      else p.reject(new SqlError(msg.error ?? "query failed", /readonly|read-only|would change|returns no rows/i.test(msg.error ?? "") ? "refused" : "error"));
    });
    child.on("exit", () => {
      onFail(new SqlError("the SQLite runner stopped before it was ready; run the query again", "error"));
      if (this.child?.child === child) this.child = undefined;
      for (const [id, p] of this.pending) {
        if (p.child !== child) continue;
        this.pending.delete(id);
        p.reject(new SqlError("the SQLite runner stopped; run the query again", "error"));
      }
    });
    if (reused) onReady();
    this.child = { child, ready };
    return this.child;
  }

  private async call(msg: Record<string, unknown>, timeoutMs: number): Promise<unknown> {
    const { child, ready } = this.spawn();
    await ready; // the timeout counts the query, not the process start
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        // A query cannot be interrupted inside SQLite: stop the runner; the next call starts a new one.
        if (this.child?.child === child) this.child = undefined;
        child.kill("SIGKILL");
        reject(new SqlError(`the query did not finish within ${timeoutMs} ms and was stopped; simplify it (add conditions, avoid cross joins)`, "timeout"));
      }, timeoutMs);
      this.pending.set(id, {
        child,
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      child.send({ id, ...msg });
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    const child = this.child?.child;
    this.child = undefined;
    if (child && this.pending.size === 0 && releaseRunner(child)) return;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.kill("SIGKILL");
      await exited;
    }
  }
}

/** Numbers come back as numbers (COUNT is int8, AVG is numeric: both are text in pg by default). */
const pgTypes = {
  getTypeParser(oid: number, format?: "text" | "binary") {
    if (oid === 20 || oid === 21 || oid === 23 || oid === 700 || oid === 701 || oid === 1700) return (v: string) => Number(v);
    return pg.types.getTypeParser(oid, format as "text");
  },
};

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

function pgCell(v: unknown): SqlValue {
  if (v === null || v === undefined) return null;
  if (typeof v === "number" || typeof v === "string") return v;
  if (typeof v === "boolean") return v ? 1 : 0;
  if (typeof v === "bigint") return Number(v);
  if (v instanceof Date) return v.toISOString();
  if (Buffer.isBuffer(v)) return `x'${v.toString("hex")}'`;
  return JSON.stringify(v);
}

/**
 * PostgreSQL: each database `db` is a schema (named by `schemaFor(db)`, the db name by default) in the
 * database at `url`. One connection, opened on first use.
 */
export class PostgresBackend implements SqlBackend {
  readonly dialect = "postgres" as const;
  private client: pg.Client | undefined;
  private connecting: Promise<pg.Client> | undefined;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly url: string,
    private readonly schemaFor: (db: string) => string = (db) => db,
  ) {}

  private async connect(): Promise<pg.Client> {
    if (this.client) return this.client;
    this.connecting ??= (async () => {
      const client = new pg.Client({ connectionString: this.url, types: pgTypes });
      client.on("error", () => {
        if (this.client === client) this.client = undefined;
      });
      try {
        await client.connect();
      } catch (err) {
        const where = this.url.replace(/\/\/([^:@/]+):[^@/]*@/, "//$1:***@");
        throw new SqlError(`cannot connect to PostgreSQL at ${where}: ${(err as Error).message}; check that the server runs and the pgUrl option is right`, "error");
      }
      this.client = client;
      return client;
    })().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  /** Runs `fn` inside a READ ONLY transaction whose search_path is the db's schema; one at a time. */
  private inSchema<T>(db: string, timeoutMs: number, fn: (c: pg.Client) => Promise<T>): Promise<T> {
    const run = async () => {
      const client = await this.connect();
      await client.query("BEGIN READ ONLY");
      try {
        await client.query(`SET LOCAL search_path TO ${quoteIdent(this.schemaFor(db))}`);
        await client.query(`SET LOCAL statement_timeout = ${Math.max(1, Math.floor(timeoutMs))}`);
        return await fn(client);
      } finally {
        await client.query("ROLLBACK").catch(() => undefined);
      }
    };
    const result = this.queue.then(run, run);
    this.queue = result.catch(() => undefined);
    return result;
  }

  async listTables(db: string): Promise<string[]> {
    return this.inSchema(db, 10_000, async (c) => {
      const r = await c.query("SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name", [this.schemaFor(db)]);
      return r.rows.map((row) => row.table_name as string);
    });
  }

  async describeTable(db: string, table: string, sampleRows = 3): Promise<TableInfo | null> {
    const schema = this.schemaFor(db);
    return this.inSchema(db, 10_000, async (c) => {
      const t = await c.query("SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND lower(table_name) = lower($2)", [schema, table]);
      if (t.rowCount === 0) return null;
      const name = t.rows[0].table_name as string;
      const cols = await c.query(
        `SELECT c.column_name, c.data_type, c.is_nullable,
                EXISTS (SELECT 1 FROM information_schema.table_constraints tc
                        JOIN information_schema.key_column_usage k ON k.constraint_name = tc.constraint_name AND k.table_schema = tc.table_schema
                        WHERE tc.table_schema = c.table_schema AND tc.table_name = c.table_name AND tc.constraint_type = 'PRIMARY KEY'
                          AND k.column_name = c.column_name) AS pk
         FROM information_schema.columns c WHERE c.table_schema = $1 AND c.table_name = $2 ORDER BY c.ordinal_position`,
        [schema, name],
      );
      const fks = await c.query(
        `SELECT kcu.column_name, ccu.table_name AS ref_table, ccu.column_name AS ref_column
         FROM information_schema.table_constraints tc
         JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name AND kcu.table_schema = tc.table_schema
         JOIN information_schema.constraint_column_usage ccu ON ccu.constraint_name = tc.constraint_name AND ccu.table_schema = tc.table_schema
         WHERE tc.constraint_type = 'FOREIGN KEY' AND tc.table_schema = $1 AND tc.table_name = $2`,
        [schema, name],
      );
      const count = await c.query(`SELECT COUNT(*) AS n FROM ${quoteIdent(name)}`);
      const sample = await c.query({ text: `SELECT * FROM ${quoteIdent(name)} LIMIT ${Math.max(0, sampleRows | 0)}`, rowMode: "array" });
      return {
        name,
        columns: cols.rows.map((r) => ({ name: r.column_name, type: r.data_type, notNull: r.is_nullable === "NO", primaryKey: Boolean(r.pk) })),
        foreignKeys: fks.rows.map((r) => ({ column: r.column_name, references: `${r.ref_table}.${r.ref_column}` })),
        rowCount: Number(count.rows[0].n),
        sample: sample.rows.map((row: unknown[]) => row.map(pgCell)),
      };
    });
  }

  async query(db: string, sql: string, limits: QueryLimits): Promise<QueryResult> {
    const check = checkReadOnly(sql);
    if (!check.ok) throw new SqlError(`query refused: ${check.reason}`, "refused");
    try {
      return await this.inSchema(db, limits.timeoutMs, async (c) => {
        const r = await c.query({ text: check.sql, rowMode: "array" });
        const rows = (r.rows as unknown[][]).map((row) => row.map(pgCell));
        const truncated = rows.length > limits.maxRows;
        return { columns: r.fields.map((f) => f.name), rows: truncated ? rows.slice(0, limits.maxRows) : rows, truncated };
      });
    } catch (err) {
      if (err instanceof SqlError) throw err;
      const e = err as { message?: string; code?: string };
      if (e.code === "57014") throw new SqlError(`the query did not finish within ${limits.timeoutMs} ms and was stopped; simplify it`, "timeout");
      if (e.code === "25006") throw new SqlError(`query refused: ${e.message}; only read-only queries are allowed`, "refused");
      throw new SqlError(e.message ?? String(err), "error");
    }
  }

  async close(): Promise<void> {
    const pending = this.connecting;
    if (pending) await pending.catch(() => undefined);
    const client = this.client;
    this.client = undefined;
    if (client) await client.end().catch(() => undefined);
  }
}
