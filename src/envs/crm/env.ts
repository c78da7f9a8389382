/**
 * The CRM environment (`sinkflex/crm-v0`), modeled on CRMArena: answer a business question about a
 * generated CRM by calling its REST API and querying its database, then submit the exact answer.
 *
 * Per env: the dataset generated from `seed`, stored in a SQLite file (cached per seed) or a
 * PostgreSQL schema (`pgUrl`), a real HTTP API over it on 127.0.0.1 (its OpenAPI document turned into
 * tools by the OpenAPI tool source), and a read-only SQL tool (tools/sql). Per episode: one read-only
 * SQL session. The tools: the API operations, `sql_query`, `list_tables`, `describe_table`,
 * `submit_answer` (ends the episode). Reward: exact match after normalization (`answer.ts`). The env
 * owns its server and closes it on close. This file is the wiring; data, tasks, server and scoring are
 * their own files.
 */
import { z } from "zod";
import type { ChatMessage } from "../../core/index.js";
import { openApiTools } from "../../tools/index.js";
import { PostgresDatabase, SqliteDatabase, sqlTools, type SqlDatabase, type SqlSession } from "../../tools/index.js";
import { functionTool, type Tool } from "../../tools/index.js";
import { arrayTasks, ToolEnv, type Episode } from "../../tools/index.js";
import { answersMatch, normalizeAnswer } from "./answer.js";
import { generateCrmData } from "./generate.js";
import { startCrmServer, type CrmServer } from "./server.js";
import { ensurePostgresSchema, ensureSqliteFile, PostgresCrmStore, SqliteCrmStore, type CrmStore } from "./store.js";
import { generateCrmTasks, type CrmTask, type CrmTaskType } from "./tasks.js";

export const CRM_ENV_ID = "sinkflex/crm-v0";

export interface CrmEnvOptions {
  /** The dataset's seed (0 by default): the same seed, the same CRM. */
  seed?: number;
  /** The task generator's seed (the dataset seed by default). */
  taskSeed?: number;
  /** Number of tasks (90 by default). */
  count?: number;
  /** Difficulty levels to include: 1 lookups, 2 aggregates, 3 multi-step (all by default). */
  levels?: number[];
  /** Task types to include (all by default). */
  types?: CrmTaskType[];
  /** Store the CRM in PostgreSQL at this URL (schema `pgSchema`) instead of a SQLite file. */
  pgUrl?: string;
  /** PostgreSQL schema (`crm_seed<seed>` by default); rebuilt when it holds another seed or version. */
  pgSchema?: string;
  /** Folder for the cached SQLite file (SINKFLEX_CACHE_DIR or the system temp folder by default). */
  cacheDir?: string;
  /** Rows shown by sql_query (50 by default). */
  maxRows?: number;
}

export interface CrmState {
  session: SqlSession;
  answer?: string;
}

export const CRM_SYSTEM_PROMPT = [
  "You are a CRM analyst for a company that sells network hardware, software and services.",
  "Answer the user's question exactly, using the CRM's REST API tools (accounts, contacts, products, orders, cases, agents, issues, knowledge base)",
  "and the read-only SQL tools (sql_query, list_tables, describe_table) over the same database.",
  "Dates are UTC timestamps 'YYYY-MM-DD HH:MM:SS'; handle_minutes is the time from a case's creation to its closing.",
  "When you know the answer, call submit_answer with the answer only, in the form the question asks for. Submitting ends the episode.",
].join("\n");

/** A ToolEnv that also stops its HTTP server and closes its databases on close. */
export class CrmEnv extends ToolEnv<CrmTask, CrmState> {
  constructor(
    hooks: ConstructorParameters<typeof ToolEnv<CrmTask, CrmState>>[0],
    readonly server: CrmServer,
    private readonly resources: { store: CrmStore; sql: SqlDatabase },
  ) {
    super(hooks);
  }

  override async close(): Promise<void> {
    await super.close();
    await this.server.close();
    await this.resources.sql.close();
    await this.resources.store.close();
  }
}

function submitTool(): Tool<{ answer: string }, CrmState> {
  return functionTool({
    name: "submit_answer",
    description: "Submit the final answer (only the answer, in the form the question asks for). This ends the episode.",
    parameters: z.object({ answer: z.string().describe("The answer, e.g. a name, a number, a month YYYY-MM or an email address.") }),
    execute: ({ answer }, ctx: { state: CrmState; finish(reason: string): void }) => {
      ctx.state.answer = answer;
      ctx.finish("submitted");
      return "Answer submitted. The episode ends.";
    },
  });
}

const OPTION_KEYS = ["seed", "taskSeed", "count", "levels", "types", "pgUrl", "pgSchema", "cacheDir", "maxRows"];

/** Builds the CRM (cached), starts its API server and returns the env. */
export async function createCrmEnv(options: CrmEnvOptions = {}): Promise<CrmEnv> {
  const unknown = Object.keys(options).filter((k) => !OPTION_KEYS.includes(k));
  if (unknown.length) throw new Error(`${CRM_ENV_ID}: unknown option(s) ${unknown.join(", ")}; the options are ${OPTION_KEYS.join(", ")}`);
  const seed = options.seed ?? 0;
  const data = generateCrmData(seed);
  const tasks = generateCrmTasks(data, { count: options.count ?? 90, seed: options.taskSeed ?? seed, levels: options.levels, types: options.types });
  const maxRows = options.maxRows ?? 50;
  let store: CrmStore;
  let sql: SqlDatabase;
  if (options.pgUrl) {
    const schema = options.pgSchema ?? `crm_seed${seed}`;
    await ensurePostgresSchema(data, options.pgUrl, schema);
    store = new PostgresCrmStore(options.pgUrl, schema);
    sql = await PostgresDatabase.connect({ url: options.pgUrl, readOnly: true, searchPath: [schema], maxRows, maxConnections: 2 });
  } else {
    const file = ensureSqliteFile(data, options.cacheDir);
    store = new SqliteCrmStore(file);
    sql = SqliteDatabase.open({ file, readOnly: true, maxRows, poolSize: 1 });
  }
  let server: CrmServer;
  try {
    server = await startCrmServer(store);
  } catch (err) {
    await sql.close();
    await store.close();
    throw err;
  }
  const tools: Tool<any, CrmState>[] = [
    ...openApiTools(server.document, { baseUrl: server.url }),
    ...sqlTools<CrmState>({ session: (s) => s.session }),
    submitTool(),
  ];
  const dialect = options.pgUrl ? "PostgreSQL" : "SQLite";
  return new CrmEnv(
    {
      name: "CrmEnv",
      tasks: arrayTasks(tasks),
      tools,
      metadata: { id: CRM_ENV_ID, description: "CRMArena-style questions over a generated CRM: REST API + read-only SQL; exact answer.", dialect, seed },
      async open(task) {
        const session = await sql.openSession();
        const messages: ChatMessage[] = [
          { role: "system", content: `${CRM_SYSTEM_PROMPT}\nThe SQL database is ${dialect}.` },
          { role: "user", content: task.question },
        ];
        return { state: { session }, messages };
      },
      async score(episode: Episode<CrmTask, CrmState>) {
        const { task, state } = episode;
        const base = { taskId: task.id, type: task.type, level: task.level, expected: task.answer, params: task.params };
        if (state.answer === undefined) return { reward: 0, evidence: { ...base, submitted: null, reason: "no answer was submitted (call submit_answer)" } };
        const match = answersMatch(task.answer, state.answer);
        return {
          reward: match ? 1 : 0,
          evidence: { ...base, submitted: state.answer, normalized: { expected: normalizeAnswer(task.answer), submitted: normalizeAnswer(state.answer) }, match },
        };
      },
      dispose: (state) => state.session.close(),
    },
    server,
    { store, sql },
  );
}
