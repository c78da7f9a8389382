/**
 * The sql suite (Spider): registers `sinkflex/spider-sql-v0` with the gym registry and the suite (its
 * scripted expert and its replay) with the suite list. The env itself is in `env.ts`.
 */
import { register } from "../../gym/index.js";
import { SEED_RULE, TASK_INDEX_RESET_OPTIONS, type ClientOptionRules } from "../../gym/index.js";
import { registerSuite, runExpertEpisode, type ReplayOptions, type ReplayReport, type Suite } from "../suite.js";
import type { SqlTask } from "./data.js";
import { createSqlEnv, SQL_ENV_ID, type SqlEnvOptions } from "./env.js";
import { SqlExpert, wrongAnswer } from "./expert.js";

export { createSqlEnv, SQL_ENV_ID, scoreSubmission, type SqlEnvOptions, type SqlState } from "./env.js";
export { SqlExpert } from "./expert.js";
export { loadQuestions, dataDir, type SqlTask } from "./data.js";
export { generateTasks, LEVELS as SQL_LEVELS } from "./generate.js";
export { compareResults } from "./result.js";
export { checkReadOnly, hasTopLevelOrderBy } from "./statement.js";
export { SqliteBackend, PostgresBackend, SqlError, type SqlBackend, type QueryResult } from "./backend.js";
export { loadSqliteIntoPostgres } from "./postgres-load.js";

export interface SqlReplayReport extends ReplayReport {
  /** Questions left out because their gold query returns no rows (execution accuracy says nothing there). */
  skippedEmptyGold: string[];
}

/**
 * Replays a question set: with `gold`, submits each question's gold SQL; otherwise plays the scripted
 * expert. Success is expected on every question whose gold query returns rows.
 */
export async function replaySql(envId: string, options: ReplayOptions): Promise<SqlReplayReport> {
  if (envId !== SQL_ENV_ID) throw new Error(`the sql suite has no env "${envId}"; use ${SQL_ENV_ID}`);
  const envOptions: SqlEnvOptions = { ...(options.tasks ? { questionsFile: options.tasks } : {}), ...(options.dbDir ? { dbDir: options.dbDir } : {}) };
  const env = createSqlEnv(envOptions);
  const report: SqlReplayReport = { total: 0, succeeded: 0, expectedRate: 1, failures: [], skippedEmptyGold: [] };
  try {
    const n = Math.min(env.metadata.taskCount ?? 0, options.limit ?? Infinity);
    for (let i = 0; i < n; i++) {
      let reward: number;
      let info: Record<string, unknown>;
      if (options.gold) {
        await env.reset({ seed: i, options: { taskIndex: i } });
        const task = env.current!.task;
        [, reward, , , info] = await env.step({ content: "", toolCalls: [{ id: "gold", name: "submit_sql", arguments: JSON.stringify({ sql: task.gold }) }] });
      } else {
        ({ reward, info } = await runExpertEpisode(env, envId, { taskIndex: i, seed: i }));
      }
      const task = env.current!.task;
      const evidence = (info.evidence ?? {}) as Record<string, unknown>;
      if (evidence.goldRows === 0) {
        report.skippedEmptyGold.push(task.id);
      } else {
        report.total++;
        if (reward === 1) report.succeeded++;
        else report.failures.push({ task: `${task.id} (${task.db})`, reason: String(info.rewardError ?? evidence.reason ?? "reward 0") });
      }
      options.onProgress?.(i + 1, n);
    }
  } finally {
    await env.close();
  }
  return report;
}

export const sqlSuite: Suite = {
  name: "sql",
  envIds: [SQL_ENV_ID],
  createExpert: (_envId, task) => new SqlExpert(task as SqlTask),
  wrongAnswer: (_envId, task) => wrongAnswer(task as SqlTask),
  replay: replaySql,
};

let registered = false;

/**
 * What a remote client of `envs serve` may set (see docs/remote-protocol.md): never the questions
 * file, database folder or PostgreSQL URL; generated task sets and query limits are bounded.
 */
const CLIENT_OPTIONS: ClientOptionRules = {
  session: {
    taskSource: { type: "enum", values: ["spider", "generated"] },
    levels: { type: "list", item: { type: "enum", values: [1, 2, 3, 4, 5] }, maxItems: 5 },
    count: { type: "integer", min: 1, max: 500 },
    taskSeed: SEED_RULE,
    maxRows: { type: "integer", min: 1, max: 1_000 },
    queryTimeoutMs: { type: "integer", min: 100, max: 30_000 },
  },
  reset: TASK_INDEX_RESET_OPTIONS,
};

export function registerSqlSuite(): void {
  if (registered) return;
  registered = true;
  register(SQL_ENV_ID, (options) => createSqlEnv(options as SqlEnvOptions), {
    suite: "sql",
    description: "Spider text-to-SQL over SQLite (or PostgreSQL): list_tables, describe_table, run_query, submit_sql; execution accuracy.",
    maxEpisodeSteps: 30,
    clientOptions: CLIENT_OPTIONS,
  });
  registerSuite(sqlSuite);
}
