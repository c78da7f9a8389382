/**
 * The Spider SQL environment (`sinkflex/spider-sql-v0`): answer a question about a database by
 * exploring it and submitting one SQL query, scored by execution accuracy.
 *
 * Tools: `list_tables`, `describe_table`, `run_query` (read-only, timeout, row limit) and `submit_sql`
 * (ends the episode). Databases are SQLite files (`dbDir/<db>.sqlite`, opened read-only) or, with
 * `pgUrl`, schemas of a PostgreSQL database. Tasks are Spider's questions (or any questions file of the
 * same format) or generated ones with difficulty levels. The reward and its evidence come from
 * `result.ts`. This file is the env's wiring; it does not parse SQL or compare results itself.
 */
import { z } from "zod";
import type { ChatMessage } from "../../core/index.js";
import { functionTool, type Tool } from "../../tools/index.js";
import { arrayTasks, ToolEnv, type Episode, type Score } from "../../tools/index.js";
import { PostgresBackend, SqlError, SqliteBackend, type QueryResult, type SqlBackend, type SqlValue, type TableInfo } from "./backend.js";
import { dbFile, defaultDbDir, defaultQuestionsFile, loadQuestions, requireDbDir, type SqlTask } from "./data.js";
import { generateTasks, LEVELS, type Level } from "./generate.js";
import { compareResults } from "./result.js";
import { hasTopLevelOrderBy } from "./statement.js";
import { cachedTasks } from "../task-cache.js";

export const SQL_ENV_ID = "sinkflex/spider-sql-v0";

export interface SqlEnvOptions {
  /** A questions file (`[{db, query, gold, hardness?, db_tables?}]`); Spider's dev questions by default. */
  questionsFile?: string;
  /** The folder of `<db>.sqlite` files; Spider's by default. */
  dbDir?: string;
  /** "spider" (the questions file, default) or "generated" (templates over the databases in dbDir). */
  taskSource?: "spider" | "generated";
  /** Generated tasks: difficulty levels to draw from (1 count, 2 filter, 3 join, 4 group-by, 5 nested). */
  levels?: number[];
  /** Generated tasks: how many (100 by default). */
  count?: number;
  /** Generated tasks: the generator's seed (0 by default). */
  taskSeed?: number;
  /** Use PostgreSQL at this URL instead of SQLite files: each db is a schema. */
  pgUrl?: string;
  /** PostgreSQL: the schema of each db (the db name itself when absent). */
  pgSchemas?: Record<string, string>;
  /** Rows shown by run_query (50 by default). */
  maxRows?: number;
  /** Timeout of one query in ms (5,000 by default). */
  queryTimeoutMs?: number;
}

export interface SqlState {
  task: SqlTask;
  backend: SqlBackend;
  maxRows: number;
  queryTimeoutMs: number;
  submitted?: string;
  queries: number;
}

/** Limits for running the gold and the submitted query when scoring. */
const SCORE_LIMITS = { maxRows: 100_000, timeoutMs: 30_000 };

export const SYSTEM_PROMPT = [
  "You answer questions about a relational database by writing SQL.",
  "Explore the database with list_tables and describe_table, try queries with run_query (read-only; the database cannot be changed),",
  "and when you are sure, call submit_sql with ONE SELECT statement whose result answers the question. Submitting ends the episode.",
  "Your query is scored by executing it: its result must equal the reference answer's result (the same columns in the same order;",
  "rows compared as a multiset, and in order only when the question asks for an order). Return exactly the columns asked for.",
].join("\n");

function formatValue(v: SqlValue): string {
  return v === null ? "NULL" : typeof v === "string" ? v : String(v);
}

export function formatQueryResult(r: QueryResult): string {
  const lines = [r.columns.join(" | "), ...r.rows.map((row) => row.map(formatValue).join(" | "))];
  const tail = r.truncated ? `(first ${r.rows.length} rows shown; the query returns more: add LIMIT or conditions)` : `(${r.rows.length} row${r.rows.length === 1 ? "" : "s"})`;
  return `${lines.join("\n")}\n${tail}`;
}

export function formatTable(t: TableInfo): string {
  const cols = t.columns.map((c) => `  ${c.name} ${c.type || "(no type)"}${c.primaryKey ? " PRIMARY KEY" : ""}${c.notNull ? " NOT NULL" : ""}`);
  const fks = t.foreignKeys.map((f) => `  ${f.column} -> ${f.references}`);
  const sample = t.sample.map((row) => `  ${row.map(formatValue).join(" | ")}`);
  return [
    `Table ${t.name} (${t.rowCount} rows)`,
    "Columns:",
    ...cols,
    ...(fks.length ? ["Foreign keys:", ...fks] : []),
    ...(sample.length ? [`Sample rows (${t.columns.map((c) => c.name).join(" | ")}):`, ...sample] : []),
  ].join("\n");
}

function sqlTools(): Tool<any, SqlState>[] {
  return [
    functionTool({
      name: "list_tables",
      description: "List the tables of the database.",
      parameters: z.object({}),
      execute: async (_args, { state }: { state: SqlState }) => {
        const tables = await state.backend.listTables(state.task.db);
        return `Tables in ${state.task.db}: ${tables.join(", ")}`;
      },
    }),
    functionTool({
      name: "describe_table",
      description: "Show a table's columns (name, type, primary key), its foreign keys, its row count and a few sample rows.",
      parameters: z.object({ table: z.string().min(1).describe("The table name, as list_tables shows it.") }),
      execute: async ({ table }, { state }: { state: SqlState }) => {
        const info = await state.backend.describeTable(state.task.db, table);
        if (!info) {
          const tables = await state.backend.listTables(state.task.db);
          throw new Error(`no table "${table}" in ${state.task.db}. Tables: ${tables.join(", ")}`);
        }
        return formatTable(info);
      },
    }),
    functionTool({
      name: "run_query",
      description: "Run one read-only SQL query (SELECT or WITH ... SELECT) and see its result (the first rows only). Writes are refused.",
      parameters: z.object({ sql: z.string().min(1).describe("One SELECT statement.") }),
      timeoutMs: 60_000,
      execute: async ({ sql }, { state }: { state: SqlState }) => {
        state.queries++;
        const result = await state.backend.query(state.task.db, sql, { maxRows: state.maxRows, timeoutMs: state.queryTimeoutMs });
        return formatQueryResult(result);
      },
    }),
    functionTool({
      name: "submit_sql",
      description: "Submit your final answer: one SELECT statement whose result answers the question. This ends the episode.",
      parameters: z.object({ sql: z.string().min(1).describe("The final SELECT statement.") }),
      execute: ({ sql }, ctx: { state: SqlState; finish(reason: string): void }) => {
        ctx.state.submitted = sql;
        ctx.finish("submitted");
        return "Submitted. The episode ends; your query will be executed and scored.";
      },
    }),
  ];
}

/** A ToolEnv whose close also stops its database backend. */
export class SqlEnv extends ToolEnv<SqlTask, SqlState> {
  constructor(
    hooks: ConstructorParameters<typeof ToolEnv<SqlTask, SqlState>>[0],
    readonly backend: SqlBackend,
  ) {
    super(hooks);
  }

  override async close(): Promise<void> {
    await super.close();
    await this.backend.close();
  }
}

/** The tasks an options object selects (Spider's questions, a questions file, or generated ones). */
export function loadSqlTasks(options: SqlEnvOptions): readonly SqlTask[] {
  const dbDir = options.dbDir ?? defaultDbDir();
  if ((options.taskSource ?? "spider") === "generated") {
    const levels = (options.levels ?? [...LEVELS]) as Level[];
    const spec = { dbDir, levels, count: options.count ?? 100, seed: options.taskSeed ?? 0 };
    return cachedTasks("sql", spec, () => generateTasks(spec));
  }
  if (options.taskSource !== undefined && options.taskSource !== "spider") {
    throw new Error(`taskSource must be "spider" or "generated", got ${JSON.stringify(options.taskSource)}`);
  }
  return loadQuestions(options.questionsFile ?? defaultQuestionsFile());
}

export function createBackend(options: SqlEnvOptions): SqlBackend {
  if (options.pgUrl) {
    const schemas = options.pgSchemas ?? {};
    return new PostgresBackend(options.pgUrl, (db) => schemas[db] ?? db);
  }
  const dbDir = options.dbDir ?? defaultDbDir();
  requireDbDir(dbDir);
  return new SqliteBackend((db) => dbFile(dbDir, db));
}

/** Runs a task's gold SQL and a submitted query, and compares their results. */
export async function scoreSubmission(backend: SqlBackend, task: SqlTask, submitted: string | undefined, goldCache?: Map<string, QueryResult>): Promise<Score> {
  const ordered = hasTopLevelOrderBy(task.gold);
  const base = { db: task.db, gold: task.gold, submitted: submitted ?? null, ordered };
  if (submitted === undefined) return { reward: 0, evidence: { ...base, reason: "no SQL was submitted (call submit_sql)" } };
  let gold = goldCache?.get(task.id);
  if (!gold) {
    gold = await backend.query(task.db, task.gold, SCORE_LIMITS); // a failing gold query is a verifier error, not a 0
    goldCache?.set(task.id, gold);
  }
  let given: QueryResult;
  try {
    given = await backend.query(task.db, submitted, SCORE_LIMITS);
  } catch (err) {
    const kind = err instanceof SqlError ? err.kind : "error";
    return { reward: 0, evidence: { ...base, goldRows: gold.rows.length, reason: `the submitted query failed (${kind}): ${(err as Error).message}` } };
  }
  const cmp = compareResults(gold, given, ordered);
  return {
    reward: cmp.equal ? 1 : 0,
    evidence: {
      ...base,
      goldRows: gold.rows.length,
      submittedRows: given.rows.length,
      goldColumns: gold.columns,
      submittedColumns: given.columns,
      match: cmp.equal,
      ...(cmp.difference ? { reason: cmp.difference } : {}),
    },
  };
}

const OPTION_KEYS = ["questionsFile", "dbDir", "taskSource", "levels", "count", "taskSeed", "pgUrl", "pgSchemas", "maxRows", "queryTimeoutMs"];

export function createSqlEnv(options: SqlEnvOptions = {}): SqlEnv {
  const unknown = Object.keys(options).filter((k) => !OPTION_KEYS.includes(k));
  if (unknown.length) throw new Error(`${SQL_ENV_ID}: unknown option(s) ${unknown.join(", ")}; the options are ${OPTION_KEYS.join(", ")}`);
  const tasks = loadSqlTasks(options);
  const backend = createBackend(options);
  const goldCache = new Map<string, QueryResult>();
  const maxRows = options.maxRows ?? 50;
  const queryTimeoutMs = options.queryTimeoutMs ?? 5_000;
  const dialect = backend.dialect === "postgres" ? "PostgreSQL" : "SQLite";
  return new SqlEnv(
    {
      name: "SpiderSqlEnv",
      tasks: arrayTasks(tasks),
      tools: sqlTools(),
      metadata: { id: SQL_ENV_ID, description: "Spider text-to-SQL: explore a database, submit one query; execution accuracy.", dialect },
      async open(task) {
        const state: SqlState = { task, backend, maxRows, queryTimeoutMs, queries: 0 };
        const messages: ChatMessage[] = [
          { role: "system", content: `${SYSTEM_PROMPT}\nThe database engine is ${dialect}.` },
          { role: "user", content: `Database: ${task.db}\nQuestion: ${task.question}` },
        ];
        return { state, messages };
      },
      async score(episode: Episode<SqlTask, SqlState>) {
        const s = await scoreSubmission(backend, episode.task, episode.state.submitted, goldCache);
        return { reward: s.reward, evidence: { ...s.evidence, taskId: episode.task.id, hardness: episode.task.hardness, queries: episode.state.queries } };
      },
    },
    backend,
  );
}
