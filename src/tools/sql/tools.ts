/**
 * The SQL tools an agent uses: `sql_query`, `list_tables`, `describe_table`, built on `SqlSession`.
 *
 * They work on whichever session the episode's state holds (SQLite or PostgreSQL alike), so a suite
 * opens a session per episode in its `open` hook, closes it in `dispose`, and lists these tools. Errors
 * (a refused write, a timeout, a bad statement) are thrown with their message, so `ToolEnv` turns them
 * into error observations. This file opens no database.
 */
import type { Tool } from "../tool.js";
import { formatQueryResult, type SqlSession } from "./database.js";

export interface SqlToolsOptions<State> {
  /** The episode's session, from the episode state; by default the state is the session itself. */
  session?: (state: State) => SqlSession;
}

function describeDialect(session: SqlSession): string {
  return session.dialect === "sqlite" ? "SQLite" : "PostgreSQL";
}

/** `sql_query`: runs one SQL statement and returns the rows as text (header, rows, row count). */
export function sqlQueryTool<State = SqlSession>(options: SqlToolsOptions<State> = {}): Tool<{ sql: string }, State> {
  const get = options.session ?? ((s: State) => s as unknown as SqlSession);
  return {
    name: "sql_query",
    description:
      "Run one SQL statement on the database and return its result: a header line with the column names, one line per row (cells separated by ' | '), and the row count. Long results are cut.",
    parameters: {
      type: "object",
      properties: { sql: { type: "string", description: "One SQL statement, e.g. SELECT name FROM singer WHERE age > 30" } },
      required: ["sql"],
      additionalProperties: false,
    },
    async execute({ sql }, ctx) {
      const session = get(ctx.state);
      const result = await session.query(sql, { signal: ctx.signal });
      return formatQueryResult(result);
    },
  };
}

/** `list_tables`: the tables and views of the database, one per line. */
export function listTablesTool<State = SqlSession>(options: SqlToolsOptions<State> = {}): Tool<Record<string, never>, State> {
  const get = options.session ?? ((s: State) => s as unknown as SqlSession);
  return {
    name: "list_tables",
    description: "List the tables and views of the database, one name per line.",
    parameters: { type: "object", properties: {}, additionalProperties: false },
    async execute(_args, ctx) {
      const session = get(ctx.state);
      const tables = await session.listTables();
      return tables.length === 0 ? `The ${describeDialect(session)} database has no tables.` : tables.join("\n");
    },
  };
}

/** `describe_table`: the columns of one table (name, type, NOT NULL, PRIMARY KEY, default) and its foreign keys. */
export function describeTableTool<State = SqlSession>(options: SqlToolsOptions<State> = {}): Tool<{ table: string }, State> {
  const get = options.session ?? ((s: State) => s as unknown as SqlSession);
  return {
    name: "describe_table",
    description: "Describe one table: its columns (name, type, NOT NULL, PRIMARY KEY, default) and its foreign keys.",
    parameters: {
      type: "object",
      properties: { table: { type: "string", description: "The table name, as list_tables shows it." } },
      required: ["table"],
      additionalProperties: false,
    },
    async execute({ table }, ctx) {
      const info = await get(ctx.state).describeTable(table);
      const lines = [`TABLE ${info.name}`];
      for (const c of info.columns) {
        const flags = [c.type || "ANY", c.primaryKey ? "PRIMARY KEY" : "", c.notNull ? "NOT NULL" : "", c.default !== null ? `DEFAULT ${c.default}` : ""];
        lines.push(`  ${c.name} ${flags.filter(Boolean).join(" ")}`);
      }
      for (const fk of info.foreignKeys) lines.push(`  FOREIGN KEY (${fk.column}) REFERENCES ${fk.references.table}(${fk.references.column})`);
      return lines.join("\n");
    },
  };
}

/** The three SQL tools, in the order an agent usually needs them. */
export function sqlTools<State = SqlSession>(options: SqlToolsOptions<State> = {}): Tool<any, State>[] {
  return [listTablesTool(options), describeTableTool(options), sqlQueryTool(options)];
}
