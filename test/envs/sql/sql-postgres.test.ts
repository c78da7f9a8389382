/**
 * The Spider SQL env over PostgreSQL: small Spider databases loaded into per-test schemas, gold SQL
 * scoring 1, wrong queries 0, writes refused, the expert. Needs SINKFLEX_TEST_PG_URL; skipped (and
 * reported as skipped) when it is unset.
 */
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTurn } from "../../../src/core/index.js";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import { createSqlEnv, loadSqliteIntoPostgres, registerSqlSuite, SQL_ENV_ID } from "../../../src/envs/sql/index.js";
import { defaultDbDir, defaultQuestionsFile, loadQuestions } from "../../../src/envs/sql/data.js";
import type { SqlEnv } from "../../../src/envs/sql/env.js";

const url = process.env.SINKFLEX_TEST_PG_URL;
registerSqlSuite();

const submit = (sql: string): AgentTurn => ({ content: "", toolCalls: [{ id: "s", name: "submit_sql", arguments: JSON.stringify({ sql }) }] });

describe.skipIf(!url)("sql env over PostgreSQL (SINKFLEX_TEST_PG_URL)", () => {
  const suffix = `${process.pid}_${randomBytes(3).toString("hex")}`;
  const dbs = ["poker_player", "singer"];
  const schemas = Object.fromEntries(dbs.map((db) => [db, `sfx_${db}_${suffix}`]));
  const all = loadQuestions(defaultQuestionsFile());
  const indices = all.map((q, i) => (dbs.includes(q.db) ? i : -1)).filter((i) => i >= 0);
  let env: SqlEnv;

  beforeAll(async () => {
    for (const db of dbs) await loadSqliteIntoPostgres(join(defaultDbDir(), `${db}.sqlite`), url!, schemas[db]!);
    env = createSqlEnv({ pgUrl: url, pgSchemas: schemas });
  });
  afterAll(async () => {
    await env?.close();
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    for (const s of Object.values(schemas)) await client.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await client.end();
  });

  it("gold SQL scores 1 on the questions PostgreSQL accepts (most of them)", async () => {
    let ran = 0;
    for (const i of indices) {
      await env.reset({ seed: i, options: { taskIndex: i } });
      const [, reward, , , info] = await env.step(submit(all[i]!.gold));
      if (info.rewardError) continue; // Spider SQL written for SQLite that PostgreSQL rejects (e.g. loose GROUP BY)
      ran++;
      expect(reward, `${all[i]!.id}: ${all[i]!.gold} ${JSON.stringify(info.evidence)}`).toBe(1);
    }
    console.log(`postgres: ${ran} of ${indices.length} gold queries ran`);
    expect(ran).toBeGreaterThanOrEqual(Math.floor(indices.length * 0.6));
  });

  it("wrong queries score 0 and writes are refused", async () => {
    const q19 = all.findIndex((q) => q.gold.includes("T2.Earnings > 300000"));
    await env.reset({ seed: 0, options: { taskIndex: q19 } });
    let [, reward] = await env.step(submit("SELECT T1.Name FROM people AS T1 JOIN poker_player AS T2 ON T1.People_ID = T2.People_ID"));
    expect(reward).toBe(0);
    await env.reset({ seed: 0, options: { taskIndex: q19 } });
    const calls = ["DELETE FROM people", "UPDATE people SET name = 'x'", "DROP TABLE people", "SELECT 1; DELETE FROM people", "WITH d AS (DELETE FROM people RETURNING 1) SELECT * FROM d"];
    for (const sql of calls) {
      const [o] = await env.step({ content: "", toolCalls: [{ id: "q", name: "run_query", arguments: JSON.stringify({ sql }) }] });
      expect(o.messages[0]!.content, sql).toMatch(/refused/);
    }
    [, reward] = await env.step(submit(all[q19]!.gold));
    expect(reward).toBe(1);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const n = await client.query(`SELECT count(*)::int AS n FROM "${schemas.poker_player}".people`);
    await client.end();
    expect(n.rows[0].n).toBe(7);
  });

  it("the scripted expert solves questions through the tools", async () => {
    const i = all.findIndex((q) => q.db === "singer" && !/GROUP BY/i.test(q.gold));
    const ep = await runExpertEpisode(env, SQL_ENV_ID, { taskIndex: i });
    expect(ep.reward).toBe(1);
    const describe = ep.messages.find((m) => m.role === "tool" && m.name === "describe_table");
    expect(describe?.content).toMatch(/Table singer \(\d+ rows\)/);
  });
});
