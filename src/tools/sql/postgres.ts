/**
 * PostgreSQL as a tool source (for real deployments): `PostgresDatabase`, over `pg`.
 *
 * Each session holds one connection and one transaction, begun when the session opens and rolled back
 * when it closes, so nothing an episode does is ever seen by another (DDL included; sequence values are
 * the one thing PostgreSQL does not roll back). Read-only sessions run in a READ ONLY transaction. Every
 * statement runs inside a savepoint, so a failing one leaves the session usable, under `statement_timeout`;
 * statements that would leave the transaction (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, SET, ...) are refused,
 * and the extended protocol allows one statement per call. Reading queries go through a cursor, so only
 * `maxRows + 1` rows are ever fetched. This file is not the tools: see `tools.ts`.
 */
import pg from "pg";
import {
  DEFAULT_MAX_ROWS,
  DEFAULT_STATEMENT_TIMEOUT_MS,
  SqlError,
  SqlReadOnlyError,
  SqlTimeoutError,
  firstKeyword,
  trimStatement,
  type QueryResult,
  type SqlDatabase,
  type SqlLimits,
  type SqlSession,
  type TableInfo,
} from "./database.js";

export interface PostgresOptions extends SqlLimits {
  /** A connection string, e.g. postgres://user:password@127.0.0.1:5432/db */
  url: string;
  /** Schemas searched for unqualified names, first one first (default: the server's search_path). */
  searchPath?: string[];
  /** Connections at most (one per open session); 8 by default. */
  maxConnections?: number;
}

/** Statements that would end, split or reconfigure the session's transaction. */
const TRANSACTION_CONTROL = new Set(["BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE", "PREPARE", "SET", "RESET", "DISCARD", "LISTEN", "NOTIFY", "COPY", "VACUUM", "CHECKPOINT"]);
const READING = new Set(["SELECT", "WITH", "VALUES", "TABLE"]);

export class PostgresDatabase implements SqlDatabase {
  readonly dialect = "postgres" as const;
  readonly readOnly: boolean;
  readonly statementTimeoutMs: number;
  readonly maxRows: number;
  readonly searchPath: string[] | undefined;
  private readonly url: string;
  private readonly pool: pg.Pool;
  private readonly sessions = new Set<PostgresSession>();
  private closed = false;

  private constructor(options: PostgresOptions) {
    this.readOnly = options.readOnly ?? false;
    this.statementTimeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
    this.maxRows = options.maxRows ?? DEFAULT_MAX_ROWS;
    this.searchPath = options.searchPath;
    this.url = options.url;
    this.pool = new pg.Pool({ connectionString: options.url, max: options.maxConnections ?? 8, connectionTimeoutMillis: 10_000 });
    this.pool.on("error", () => undefined); // an idle connection lost: the pool replaces it
  }

  /** Connects to PostgreSQL and checks that the server answers. */
  static async connect(options: PostgresOptions): Promise<PostgresDatabase> {
    const db = new PostgresDatabase(options);
    try {
      await db.pool.query("SELECT 1");
    } catch (err) {
      await db.pool.end().catch(() => undefined);
      throw new Error(`cannot connect to PostgreSQL at ${redact(options.url)}: ${(err as Error).message}. Check that the server runs and the URL is right.`);
    }
    return db;
  }

  /** Runs statements outside any session and commits them (setting up fixtures, not for agents). */
  async setup(sql: string): Promise<void> {
    await this.pool.query(sql);
  }

  async openSession(): Promise<SqlSession> {
    if (this.closed) throw new Error("PostgresDatabase: openSession after close");
    const client = await this.pool.connect();
    try {
      await client.query(this.readOnly ? "BEGIN TRANSACTION READ ONLY" : "BEGIN");
      await client.query(`SET LOCAL statement_timeout = ${Math.max(1, Math.floor(this.statementTimeoutMs))}`);
      if (this.searchPath) await client.query(`SET LOCAL search_path TO ${this.searchPath.map(quoteIdent).join(", ")}`);
    } catch (err) {
      client.release(err as Error);
      throw err;
    }
    const session = new PostgresSession(this, client);
    this.sessions.add(session);
    return session;
  }

  /** @internal Cancels the statement a backend is running, over a connection of its own (the pool may be full). */
  async cancel(backendPid: number): Promise<void> {
    const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: 5_000 });
    try {
      await client.connect();
      await client.query("SELECT pg_cancel_backend($1)", [backendPid]);
    } catch {
      // The statement timeout still bounds the statement.
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  /** @internal */
  forget(session: PostgresSession): void {
    this.sessions.delete(session);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.sessions].map((s) => s.close()));
    await this.pool.end();
  }
}

class PostgresSession implements SqlSession {
  readonly dialect = "postgres" as const;
  readonly readOnly: boolean;
  private closed = false;
  private broken = false;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly db: PostgresDatabase,
    private readonly client: pg.PoolClient,
  ) {
    this.readOnly = db.readOnly;
  }

  private serial<T>(work: () => Promise<T>): Promise<T> {
    const run = this.queue.then(work, work);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Runs `work` inside a savepoint: on failure the session's transaction stays usable. */
  private async guarded<T>(work: () => Promise<T>): Promise<T> {
    if (this.closed) throw new SqlError("the session is closed");
    if (this.broken) throw new SqlError("the database connection was lost; the episode cannot continue with this database.");
    try {
      await this.client.query("SAVEPOINT sinkflex_statement");
    } catch (err) {
      this.broken = true;
      throw new SqlError(`the database connection failed: ${(err as Error).message}`);
    }
    try {
      const result = await work();
      await this.client.query("RELEASE SAVEPOINT sinkflex_statement");
      return result;
    } catch (err) {
      await this.client.query("ROLLBACK TO SAVEPOINT sinkflex_statement").catch(() => {
        this.broken = true;
      });
      throw this.translate(err);
    }
  }

  private translate(err: unknown): Error {
    if (err instanceof SqlError) return err;
    const e = err as { code?: string; message?: string };
    if (e.code === "57014") return /user request/i.test(e.message ?? "") ? new SqlError("the statement was cancelled.") : new SqlTimeoutError(this.db.statementTimeoutMs);
    if (e.code === "25006") return new SqlReadOnlyError("this statement");
    if (e.message?.includes("cannot insert multiple commands")) return new SqlError("send one SQL statement at a time.");
    return new SqlError(`${e.message ?? String(err)}.`);
  }

  query(sql: string, options: { signal?: AbortSignal } = {}): Promise<QueryResult> {
    return this.serial(async () => {
      const text = typeof sql === "string" ? trimStatement(sql) : "";
      if (text === "") throw new SqlError("the query is empty; send one SQL statement.");
      const keyword = firstKeyword(text);
      if (TRANSACTION_CONTROL.has(keyword)) throw new SqlError(`${keyword} statements are not allowed: each episode runs in its own transaction, managed for you.`);
      if (/\bset_config\s*\(/i.test(text)) throw new SqlError("set_config() is not allowed: the session's settings (statement timeout, search path) are managed for you.");
      const signal = options.signal;
      if (signal?.aborted) throw new SqlError("the statement was cancelled.");
      const maxRows = this.db.maxRows;
      const backendPid = (this.client as unknown as { processID: number }).processID;
      const onAbort = () => void this.db.cancel(backendPid);
      signal?.addEventListener("abort", onAbort, { once: true });
      try {
        return await this.run(text, keyword, maxRows);
      } catch (err) {
        if (signal?.aborted && !(err instanceof SqlTimeoutError)) throw new SqlError("the statement was cancelled.");
        throw err;
      } finally {
        signal?.removeEventListener("abort", onAbort);
      }
    });
  }

  private run(text: string, keyword: string, maxRows: number): Promise<QueryResult> {
    return this.guarded(async () => {
      if (READING.has(keyword)) {
        try {
          await this.client.query("SAVEPOINT sinkflex_cursor");
          await this.client.query({ text: `DECLARE sinkflex_cursor NO SCROLL CURSOR FOR ${text}`, queryMode: "extended" } as pg.QueryConfig);
        } catch (err) {
          await this.client.query("ROLLBACK TO SAVEPOINT sinkflex_cursor");
          // A WITH that writes cannot be a cursor: run it as a plain statement below.
          if (!/data-modifying|DECLARE CURSOR/i.test((err as Error).message)) throw err;
          return this.plain(text, maxRows);
        }
        const fetched = await this.client.query({ text: `FETCH FORWARD ${maxRows + 1} FROM sinkflex_cursor`, rowMode: "array" });
        await this.client.query("CLOSE sinkflex_cursor");
        await this.client.query("RELEASE SAVEPOINT sinkflex_cursor");
        return {
          columns: fetched.fields.map((f) => f.name),
          rows: (fetched.rows as unknown[][]).slice(0, maxRows),
          truncated: fetched.rows.length > maxRows,
        };
      }
      return this.plain(text, maxRows);
    });
  }

  private async plain(text: string, maxRows: number): Promise<QueryResult> {
    const r = await this.client.query({ text, rowMode: "array", queryMode: "extended" } as pg.QueryConfig);
    if (!r.fields || r.fields.length === 0) return { columns: [], rows: [], truncated: false, changes: r.rowCount ?? 0 };
    const rows = r.rows as unknown[][];
    return { columns: r.fields.map((f) => f.name), rows: rows.slice(0, maxRows), truncated: rows.length > maxRows, changes: r.command === "SELECT" ? undefined : (r.rowCount ?? undefined) };
  }

  listTables(): Promise<string[]> {
    return this.serial(() =>
      this.guarded(async () => {
        const r = await this.client.query(
          `SELECT CASE WHEN n.nspname = current_schema() THEN c.relname ELSE n.nspname || '.' || c.relname END AS name
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f') AND n.nspname = ANY (current_schemas(false))
            ORDER BY 1`,
        );
        return r.rows.map((row: { name: string }) => row.name);
      }),
    );
  }

  describeTable(name: string): Promise<TableInfo> {
    return this.serial(() =>
      this.guarded(async () => {
        const rel = await this.client.query("SELECT to_regclass($1)::oid AS oid", [quoteIfPlain(name)]).catch(() => ({ rows: [{ oid: null }] }));
        const oid = rel.rows[0]?.oid as number | null;
        if (oid === null || oid === undefined) throw new SqlError(`no table named "${name}". Use list_tables to see the tables.`);
        const cols = await this.client.query(
          `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
                  pg_get_expr(d.adbin, d.adrelid) AS dflt,
                  EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY (i.indkey)) AS pk
             FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
          [oid],
        );
        const fks = await this.client.query(
          `SELECT a.attname AS col, cf.relname AS tbl, af.attname AS ref
             FROM pg_constraint k
             CROSS JOIN LATERAL unnest(k.conkey, k.confkey) AS u(src, dst)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.src
             JOIN pg_class cf ON cf.oid = k.confrelid
             JOIN pg_attribute af ON af.attrelid = k.confrelid AND af.attnum = u.dst
            WHERE k.conrelid = $1 AND k.contype = 'f'`,
          [oid],
        );
        return {
          name,
          columns: cols.rows.map((c: { name: string; type: string; not_null: boolean; dflt: string | null; pk: boolean }) => ({
            name: c.name,
            type: c.type,
            notNull: c.not_null,
            primaryKey: c.pk,
            default: c.dflt,
          })),
          foreignKeys: fks.rows.map((f: { col: string; tbl: string; ref: string }) => ({ column: f.col, references: { table: f.tbl, column: f.ref } })),
        };
      }),
    );
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue;
    try {
      await this.client.query("ROLLBACK");
      this.client.release();
    } catch (err) {
      this.client.release(err as Error);
    }
    this.db.forget(this);
  }
}

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** A plain name is looked up as written (case included); a dotted or quoted one is passed through. */
function quoteIfPlain(name: string): string {
  return /^[A-Za-z_][A-Za-z0-9_$]*$/.test(name) && name !== name.toLowerCase() ? quoteIdent(name) : name;
}

function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, "//$1:***@");
}
