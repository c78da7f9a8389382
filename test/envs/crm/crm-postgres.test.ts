/**
 * The CRM env over PostgreSQL: the generated CRM in a per-test schema, the API and the read-only SQL
 * tool over it, the scripted expert on every task type. Needs SINKFLEX_TEST_PG_URL; skipped (and
 * reported as skipped) when it is unset.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import { createCrmEnv, CRM_ENV_ID, registerCrmSuite, type CrmEnv } from "../../../src/envs/crm/index.js";

const url = process.env.SINKFLEX_TEST_PG_URL;
registerCrmSuite();

describe.skipIf(!url)("crm env over PostgreSQL (SINKFLEX_TEST_PG_URL)", () => {
  const schema = `sfx_crm_${process.pid}_${randomBytes(3).toString("hex")}`;
  let env: CrmEnv;
  beforeAll(async () => {
    env = await createCrmEnv({ pgUrl: url, pgSchema: schema, count: 27, seed: 1 });
  });
  afterAll(async () => {
    await env?.close();
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
  });

  it("the scripted expert solves every task type", async () => {
    expect(env.metadata.dialect).toBe("PostgreSQL");
    const types = new Set<string>();
    for (let i = 0; i < 27; i++) {
      const ep = await runExpertEpisode(env, CRM_ENV_ID, { taskIndex: i });
      expect(ep.reward, `task ${i}: ${JSON.stringify(ep.info.evidence)}`).toBe(1);
      types.add(env.current!.task.type);
    }
    expect(types.size).toBe(9);
  });

  it("the SQL tool refuses writes and the API reads the same rows", async () => {
    await env.reset({ seed: 0, options: { taskIndex: 0 } });
    const [w] = await env.step({ content: "", toolCalls: [{ id: "w", name: "sql_query", arguments: JSON.stringify({ sql: "DELETE FROM cases" }) }] });
    expect(w.messages[0]!.content).toMatch(/read-only/);
    const [r] = await env.step({ content: "", toolCalls: [{ id: "r", name: "sql_query", arguments: JSON.stringify({ sql: "SELECT COUNT(*) AS n FROM cases" }) }] });
    const api = (await (await fetch(`${env.server.url}/cases?limit=1`)).json()) as { total: number };
    expect(r.messages[0]!.content).toBe(`n\n${api.total}\n(1 row)`);
    expect(api.total).toBe(480);
  });
});
