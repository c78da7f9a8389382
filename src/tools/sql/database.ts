/**
 * The SQL database contract shared by the SQLite and PostgreSQL tool sources.
 *
 * A `SqlDatabase` is one database (a file, a server) that hands out `SqlSession`s: one per episode, each
 * isolated from every other (a fresh copy of the file, or a transaction rolled back at the end). A
 * session runs one statement at a time under a statement timeout and a row limit, and in read-only mode
 * refuses every write with a clear error. This file holds the types, the errors and the result
 * formatting; it opens no database (see `sqlite.ts`, `postgres.ts`) and defines no tools (`tools.ts`).
 */

export type SqlDialect = "sqlite" | "postgres";

export interface SqlLimits {
  /** Refuse every statement that could change the database. */
  readOnly?: boolean;
  /** A statement running longer than this is stopped (ms); 5,000 by default. */
  statementTimeoutMs?: number;
  /** Rows beyond this are cut from a result, and the result says so; 200 by default. */
  maxRows?: number;
}

export const DEFAULT_STATEMENT_TIMEOUT_MS = 5_000;
export const DEFAULT_MAX_ROWS = 200;

export interface QueryResult {
  /** Column names, in order; empty for a statement that returns no rows. */
  columns: string[];
  /** At most `maxRows` rows, each an array in column order. */
  rows: unknown[][];
  /** True when the statement returned more rows than `maxRows` and the rest were cut. */
  truncated: boolean;
  /** Rows changed by an INSERT, UPDATE or DELETE; absent for a query. */
  changes?: number;
}

export interface ColumnInfo {
  name: string;
  type: string;
  notNull: boolean;
  primaryKey: boolean;
  default: string | null;
}

export interface ForeignKeyInfo {
  column: string;
  references: { table: string; column: string };
}

export interface TableInfo {
  name: string;
  columns: ColumnInfo[];
  foreignKeys: ForeignKeyInfo[];
}

/** One episode's isolated view of a database. */
export interface SqlSession {
  readonly dialect: SqlDialect;
  readonly readOnly: boolean;
  /** Runs one SQL statement. Throws `SqlError` (or its subclasses) with a message an agent can act on. */
  query(sql: string, options?: { signal?: AbortSignal }): Promise<QueryResult>;
  /** The names of the tables and views the session can see, sorted. */
  listTables(): Promise<string[]>;
  /** Columns and foreign keys of one table; throws `SqlError` when there is no such table. */
  describeTable(name: string): Promise<TableInfo>;
  /** Ends the session and discards every change it made. Safe to call more than once. */
  close(): Promise<void>;
}

/** A database that hands out isolated per-episode sessions. */
export interface SqlDatabase {
  readonly dialect: SqlDialect;
  readonly readOnly: boolean;
  /** A fresh session: it sees the database as it was set up, never another session's changes. */
  openSession(): Promise<SqlSession>;
  /** Closes every session and releases connections, processes and temporary files. */
  close(): Promise<void>;
}

/** A statement the database refused or failed to run. The message says what went wrong and what to do. */
export class SqlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SqlError";
  }
}

/** A statement that would change a read-only database. */
export class SqlReadOnlyError extends SqlError {
  constructor(what: string) {
    super(`the database is read-only: ${what} is not allowed. Only SELECT, WITH and EXPLAIN queries can run.`);
    this.name = "SqlReadOnlyError";
  }
}

/** A statement stopped by the statement timeout. */
export class SqlTimeoutError extends SqlError {
  constructor(timeoutMs: number) {
    super(`the statement ran longer than ${timeoutMs} ms and was stopped. Simplify it, or add a LIMIT or a WHERE clause.`);
    this.name = "SqlTimeoutError";
  }
}

/** The first keyword of a statement, upper-case, after leading whitespace and comments ("" when none). */
export function firstKeyword(sql: string): string {
  let s = sql;
  for (;;) {
    s = s.replace(/^[\s;]+/, "");
    if (s.startsWith("--")) {
      const nl = s.indexOf("\n");
      s = nl < 0 ? "" : s.slice(nl + 1);
    } else if (s.startsWith("/*")) {
      const end = s.indexOf("*/");
      s = end < 0 ? "" : s.slice(end + 2);
    } else if (s.startsWith("(")) {
      s = s.slice(1);
    } else break;
  }
  const m = /^[A-Za-z_]+/.exec(s);
  return m ? m[0].toUpperCase() : "";
}

/** A statement with trailing semicolons and whitespace removed. */
export function trimStatement(sql: string): string {
  return sql.replace(/[\s;]+$/, "").trim();
}

function cell(v: unknown): string {
  if (v === null || v === undefined) return "NULL";
  if (v instanceof Uint8Array) return `<blob ${v.byteLength} bytes>`;
  if (v instanceof Date) return v.toISOString();
  if (typeof v === "object") return JSON.stringify(v);
  return String(v).replace(/\n/g, "\\n");
}

/** A result as text for the agent: a header line, one line per row (cells separated by " | "), a row count. */
export function formatQueryResult(result: QueryResult, maxRows?: number): string {
  if (result.columns.length === 0) {
    return result.changes !== undefined ? `OK, ${result.changes} row(s) changed.` : "OK.";
  }
  const lines = [result.columns.join(" | ")];
  for (const row of result.rows) lines.push(row.map(cell).join(" | "));
  if (result.truncated) {
    lines.push(`(only the first ${maxRows ?? result.rows.length} rows are shown; the result has more. Add a LIMIT, a WHERE clause or an aggregate to see what you need.)`);
  } else {
    lines.push(`(${result.rows.length} row${result.rows.length === 1 ? "" : "s"})`);
  }
  return lines.join("\n");
}
