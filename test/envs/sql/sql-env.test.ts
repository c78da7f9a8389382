/**
 * The Spider SQL env over real SQLite files: gold SQL scores 1 on every public question whose gold
 * returns rows, wrong queries score 0, writes are refused and leave the file unchanged, timeouts and
 * row limits, generated tasks, the scripted expert, determinism and clean close.
 */
import { createHash } from "node:crypto";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTurn } from "../../../src/core/index.js";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import {
  checkReadOnly,
  createSqlEnv,
  generateTasks,
  hasTopLevelOrderBy,
  registerSqlSuite,
  replaySql,
  SQL_ENV_ID,
  SqliteBackend,
  type SqlEnvOptions,
} from "../../../src/envs/sql/index.js";
import { defaultDbDir, defaultQuestionsFile, loadQuestions } from "../../../src/envs/sql/data.js";
import type { SqlEnv } from "../../../src/envs/sql/env.js";

registerSqlSuite();

const questions = loadQuestions(defaultQuestionsFile());

function submit(sql: string): AgentTurn {
  return { content: "", toolCalls: [{ id: "s", name: "submit_sql", arguments: JSON.stringify({ sql }) }] };
}
function call(name: string, args: Record<string, unknown>): AgentTurn {
  return { content: "", toolCalls: [{ id: "c", name, arguments: JSON.stringify(args) }] };
}

async function scoreOn(env: SqlEnv, taskIndex: number, sql: string) {
  await env.reset({ seed: 1, options: { taskIndex } });
  const [, reward, terminated, , info] = await env.step(submit(sql));
  expect(terminated).toBe(true);
  return { reward, evidence: info.evidence as Record<string, unknown> };
}

describe("gold replay over the public Spider questions", () => {
  it("every question whose gold query returns rows scores 1", async () => {
    const report = await replaySql(SQL_ENV_ID, { gold: true });
    expect(report.failures).toEqual([]);
    expect(report.total + report.skippedEmptyGold.length).toBe(questions.length);
    expect(report.total).toBeGreaterThan(700);
    expect(report.succeeded).toBe(report.total);
    // wta_1 has no rows in the source dump: its questions are left out unless their gold still returns a row (a count).
    const wta = new Set(questions.filter((q) => q.db === "wta_1").map((q) => q.id));
    expect(report.skippedEmptyGold.filter((id) => wta.has(id)).length).toBeGreaterThan(40);
  });
});

describe("statement checks", () => {
  it("find a top-level ORDER BY only outside parentheses, strings and comments", () => {
    expect(hasTopLevelOrderBy("SELECT a FROM t ORDER BY a")).toBe(true);
    expect(hasTopLevelOrderBy("SELECT a FROM t\n order\tby a DESC LIMIT 1")).toBe(true);
    expect(hasTopLevelOrderBy("SELECT * FROM (SELECT a FROM t ORDER BY a) LIMIT 3")).toBe(false);
    expect(hasTopLevelOrderBy("SELECT a FROM t WHERE b = 'order by' -- ORDER BY a")).toBe(false);
  });

  it("accept reads that mention write words inside strings or as functions, refuse the rest", () => {
    expect(checkReadOnly("SELECT name FROM t WHERE note = 'please DELETE me';")).toEqual({ ok: true, sql: "SELECT name FROM t WHERE note = 'please DELETE me'" });
    expect(checkReadOnly("SELECT replace(name, 'a', 'b') FROM t").ok).toBe(true);
    expect(checkReadOnly("WITH x AS (SELECT 1) SELECT * FROM x").ok).toBe(true);
    expect(checkReadOnly("  ").ok).toBe(false);
    expect(checkReadOnly("SELECT 1; SELECT 2")).toMatchObject({ ok: false, reason: expect.stringMatching(/one statement/) });
    expect(checkReadOnly("REPLACE INTO t VALUES (1)")).toMatchObject({ ok: false, reason: expect.stringMatching(/read-only/) });
  });
});

describe("execution accuracy", () => {
  let env: SqlEnv;
  beforeAll(() => {
    env = createSqlEnv();
  });
  afterAll(() => env.close());

  it.each([
    [0, "SELECT T1.Name FROM people AS T1 JOIN poker_player AS T2 ON T1.People_ID = T2.People_ID ORDER BY T2.Final_Table_Made DESC", "wrong order of an ordered result"],
    [4, "SELECT T2.Earnings FROM people AS T1 JOIN poker_player AS T2 ON T1.People_ID = T2.People_ID ORDER BY T1.Height DESC LIMIT 1", "another column"],
    [19, "SELECT T1.Name FROM people AS T1 JOIN poker_player AS T2 ON T1.People_ID = T2.People_ID", "a missing condition"],
    [5, "SELECT name FROM city WHERE Population BETWEEN 160000 AND 9000000", "a wrong bound"],
    [16, "SELECT Name, IndepYear FROM country WHERE IndepYear > 1950", "an extra column"],
    [58, "SELECT Nationality FROM people GROUP BY Nationality", "a missing aggregate"],
    [41, "SELECT Citizenship, min(Net_Worth_Millions) FROM singer GROUP BY Citizenship", "min instead of max"],
    [2, "SELECT avg(GNP), sum(population) FROM country WHERE GovernmentForm = 'Republic'", "another filter value"],
  ])("question %i: %s scores 0 (%s)", async (i, sql) => {
    const { reward, evidence } = await scoreOn(env, i, sql);
    expect(reward).toBe(0);
    expect(evidence.match).toBe(false);
    expect(String(evidence.reason)).toMatch(/row|column/);
  });

  it("equivalent queries score 1: other row order when the gold is unordered, numbers by value", async () => {
    expect(questions[5]!.gold).not.toMatch(/ORDER BY/i);
    expect((await scoreOn(env, 5, "SELECT name FROM city WHERE Population >= 160000 AND Population <= 900000 ORDER BY name DESC")).reward).toBe(1);
    expect((await scoreOn(env, 59, "SELECT count(*) * 1.0 FROM CARS_DATA WHERE YEAR = 1980")).reward).toBe(1);
    expect((await scoreOn(env, 0, questions[0]!.gold.toLowerCase().replace("t1.name", "T1.Name"))).reward).toBe(1);
  });

  it("a failing or missing submission scores 0 with the reason", async () => {
    const bad = await scoreOn(env, 0, "SELECT nme FROM people");
    expect(bad.reward).toBe(0);
    expect(String(bad.evidence.reason)).toMatch(/no such column/);
    await env.reset({ seed: 1, options: { taskIndex: 0 } });
    const [, reward, terminated, , info] = await env.step({ content: "I think the answer is Aaron.", toolCalls: [] });
    expect(terminated).toBe(true);
    expect(reward).toBe(0);
    expect((info.evidence as Record<string, unknown>).reason).toMatch(/no SQL was submitted/);
  });
});

describe("tools", () => {
  let dir: string;
  let env: SqlEnv;
  const hash = (f: string) => createHash("sha256").update(readFileSync(f)).digest("hex");
  beforeAll(() => {
    // Any SQLite file plus a questions file of the same format.
    dir = mkdtempSync(join(tmpdir(), "sinkflex-sql-"));
    copyFileSync(join(defaultDbDir(), "poker_player.sqlite"), join(dir, "poker.sqlite"));
    writeFileSync(
      join(dir, "questions.json"),
      JSON.stringify([
        { db: "poker", query: "How many poker players are there?", gold: "SELECT count(*) FROM poker_player", db_tables: { poker_player: [] } },
        { db: "poker", query: "List the names of people, tallest first.", gold: "SELECT Name FROM people ORDER BY Height DESC" },
      ]),
    );
    env = createSqlEnv({ questionsFile: join(dir, "questions.json"), dbDir: dir, maxRows: 3, queryTimeoutMs: 700 });
  });
  afterAll(async () => {
    await env.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("list_tables, describe_table and run_query show the database", async () => {
    const [obs] = await env.reset({ seed: 0, options: { taskIndex: 0 } });
    expect(obs.tools!.map((t) => t.name)).toEqual(["list_tables", "describe_table", "run_query", "submit_sql"]);
    expect(obs.messages[1]!.content).toContain("How many poker players are there?");
    let [o] = await env.step(call("list_tables", {}));
    expect(o.messages[0]!.content).toBe("Tables in poker: people, poker_player");
    [o] = await env.step(call("describe_table", { table: "POKER_PLAYER" }));
    expect(o.messages[0]!.content).toMatch(/Table poker_player \(5 rows\)/);
    expect(o.messages[0]!.content).toMatch(/People_ID -> people\.People_ID/);
    [o] = await env.step(call("describe_table", { table: "players" }));
    expect(o.messages[0]).toMatchObject({ isError: true });
    expect(o.messages[0]!.content).toMatch(/no table "players".*people, poker_player/);
    [o] = await env.step(call("run_query", { sql: "SELECT Name FROM people ORDER BY Name" }));
    expect(o.messages[0]!.content).toMatch(/^Name\n.*\n.*\n.*\n\(first 3 rows shown/);
    [o] = await env.step(call("run_query", { sql: "SELECT Nme FROM people" }));
    expect(o.messages[0]!.content).toMatch(/Error: .*no such column: Nme/);
  });

  it("refuses every write, at both layers, and the file is unchanged", async () => {
    const file = join(dir, "poker.sqlite");
    const before = hash(file);
    await env.reset({ seed: 0, options: { taskIndex: 0 } });
    const writes = [
      "DELETE FROM people",
      "UPDATE people SET Name = 'x'",
      "INSERT INTO people (People_ID) VALUES (99)",
      "DROP TABLE people",
      "CREATE TABLE t (x)",
      `ATTACH DATABASE '${join(dir, "other.sqlite")}' AS other`,
      "PRAGMA user_version = 7",
      "SELECT 1; DELETE FROM people",
      "WITH x AS (SELECT 1) DELETE FROM people",
      `VACUUM INTO '${join(dir, "copy.sqlite")}'`,
    ];
    for (const sql of writes) {
      const [o, , terminated] = await env.step(call("run_query", { sql }));
      expect(terminated).toBe(false);
      expect(o.messages[0]!.content, sql).toMatch(/refused/);
    }
    // A write submitted as the answer is refused too, and scores 0.
    const [, reward, , , info] = await env.step(submit("DELETE FROM poker_player"));
    expect(reward).toBe(0);
    expect(String((info.evidence as Record<string, unknown>).reason)).toMatch(/refused/);
    // Behind the lexical check, the runner opens files read-only and rejects writing statements.
    const backend = new SqliteBackend(() => file);
    const raw = (backend as unknown as { call(m: object, t: number): Promise<unknown> }).call.bind(backend);
    await expect(raw({ op: "query", file, sql: "DELETE FROM people", maxRows: 5 }, 5000)).rejects.toThrow(/read-only|readonly|would change|returns no rows/);
    await backend.close();
    expect(hash(file)).toBe(before);
  });

  it("stops a runaway query at its timeout and keeps working", async () => {
    await env.reset({ seed: 0, options: { taskIndex: 0 } });
    const t0 = Date.now();
    const [o, , , , info] = await env.step(call("run_query", { sql: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c" }));
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(o.messages[0]!.content).toMatch(/did not finish within 700 ms/);
    expect(info.toolErrors).toBeDefined();
    const [o2] = await env.step(call("run_query", { sql: "SELECT count(*) FROM poker_player" }));
    expect(o2.messages[0]!.content).toBe("count(*)\n5\n(1 row)");
  });

  it("a closed backend's runner serves the next backend; one stopped at a timeout is never reused", async () => {
    const file = join(dir, "poker.sqlite");
    const runnerPid = (b: SqliteBackend) => (b as unknown as { child?: { child: { pid: number } } }).child?.child.pid;
    const a = new SqliteBackend(() => file);
    expect(await a.listTables("poker")).toEqual(["people", "poker_player"]);
    const first = runnerPid(a);
    await a.close();
    const b = new SqliteBackend(() => file);
    expect(await b.listTables("poker")).toEqual(["people", "poker_player"]);
    expect(runnerPid(b)).toBe(first);
    const runaway = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";
    await expect(b.query("poker", runaway, { maxRows: 5, timeoutMs: 300 })).rejects.toThrow(/did not finish within 300 ms/);
    await b.close();
    const c = new SqliteBackend(() => file);
    expect((await c.query("poker", "SELECT count(*) FROM poker_player", { maxRows: 5, timeoutMs: 5000 })).rows).toEqual([[5]]);
    expect(runnerPid(c)).not.toBe(first);
    await c.close();
  });

  it("scores an ordered gold in order", async () => {
    expect((await scoreOn(env, 1, "SELECT Name FROM people ORDER BY Height DESC")).reward).toBe(1);
    expect((await scoreOn(env, 1, "SELECT Name FROM people ORDER BY Height ASC")).reward).toBe(0);
  });
});

describe("generated tasks, the expert, determinism", () => {
  it("generates deterministic tasks at every level whose gold returns rows", () => {
    const a = generateTasks({ dbDir: defaultDbDir(), count: 20, seed: 7 });
    const b = generateTasks({ dbDir: defaultDbDir(), count: 20, seed: 7 });
    expect(a).toEqual(b);
    expect(new Set(a.map((t) => t.hardness))).toEqual(new Set(["level-1", "level-2", "level-3", "level-4", "level-5"]));
    expect(a.find((t) => t.hardness === "level-3")!.gold).toMatch(/JOIN/);
    expect(a.find((t) => t.hardness === "level-4")!.gold).toMatch(/GROUP BY .* HAVING/);
    expect(a.find((t) => t.hardness === "level-5")!.gold).toMatch(/\(SELECT AVG/);
    expect(generateTasks({ dbDir: defaultDbDir(), count: 20, seed: 8 })).not.toEqual(a);
    // A missing data folder is named, with what to do.
    expect(() => generateTasks({ dbDir: "/nonexistent/spider/db", count: 5, seed: 7 })).toThrow(/database folder \/nonexistent\/spider\/db does not exist; pass dbDir .* or set SINKFLEX_DATA_DIR/);
  });

  it("the scripted expert explores, queries and solves Spider and generated tasks", async () => {
    for (const options of [{}, { taskSource: "generated", count: 15, taskSeed: 3 }] as SqlEnvOptions[]) {
      const env = createSqlEnv(options);
      try {
        const n = options.taskSource ? 15 : 25;
        for (let i = 0; i < n; i++) {
          const ep = await runExpertEpisode(env, SQL_ENV_ID, { taskIndex: i });
          const ev = ep.info.evidence as Record<string, unknown>;
          if (ev.goldRows === 0) continue;
          expect(ep.reward, `task ${i}`).toBe(1);
          const names = ep.messages.flatMap((m) => (m.role === "assistant" ? (m.toolCalls ?? []).map((c) => c.name) : []));
          expect(names[0]).toBe("list_tables");
          expect(names).toContain("describe_table");
          expect(names.slice(-2)).toEqual(["run_query", "submit_sql"]);
        }
      } finally {
        await env.close();
      }
    }
  });

  it("the same seed gives the same episode; close is safe twice; step after the end is an error", async () => {
    const env = createSqlEnv();
    const [o1, i1] = await env.reset({ seed: 42 });
    const r1 = await env.step(call("list_tables", {}));
    const [o2, i2] = await env.reset({ seed: 42 });
    const r2 = await env.step(call("list_tables", {}));
    expect(o2).toEqual(o1);
    expect(i2).toEqual(i1);
    expect(r2).toEqual(r1);
    await env.step(submit("SELECT 1"));
    await expect(env.step(submit("SELECT 1"))).rejects.toThrow(/after the episode ended/);
    await env.close();
    await env.close();
    await expect(env.reset({ seed: 1 })).rejects.toThrow(/after close/);
    expect(() => createSqlEnv({ dbDir: "/nonexistent/spider" })).toThrow(/database folder \/nonexistent\/spider does not exist/);
    expect(() => createSqlEnv({ questionFile: "q.json" } as SqlEnvOptions)).toThrow(/unknown option\(s\) questionFile; the options are questionsFile/);
  });
});
