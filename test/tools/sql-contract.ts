/**
 * The contract every `SqlDatabase` implementation passes (SQLite, PostgreSQL): isolation between
 * sessions, read-only refusal, statement timeout, row limit, table listing and description, and the
 * SQL tools run through a ToolEnv. Used by sql.test.ts for each implementation.
 */
import { expect, it } from "vitest";
import { SqlError, SqlReadOnlyError, SqlTimeoutError, type SqlDatabase, type SqlLimits } from "../../src/tools/sql/database.js";
import { sqlTools } from "../../src/tools/sql/tools.js";
import { ToolEnv, arrayTasks } from "../../src/tools/tool-env.js";
import type { SqlSession } from "../../src/tools/sql/database.js";

/** The fixture database, in SQL both SQLite and PostgreSQL accept. */
export const FIXTURE_SQL = `
CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT NOT NULL, age INTEGER DEFAULT 30);
CREATE TABLE song (id INTEGER PRIMARY KEY, singer_id INTEGER REFERENCES singer(id), title TEXT);
CREATE TABLE numbers (n INTEGER);
INSERT INTO singer VALUES (1, 'Ann', 31), (2, 'Bob', 25), (3, 'Cid', 40);
INSERT INTO song VALUES (1, 1, 'One'), (2, 3, 'Two');
INSERT INTO numbers WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) SELECT x FROM c;
`;

/** A query that would run for a very long time. */
export const SLOW_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000000000) SELECT count(*) FROM c";

export type OpenDb = (limits: SqlLimits) => Promise<SqlDatabase>;

export function sqlContract(open: OpenDb): void {
  it("runs queries, lists and describes tables", async () => {
    const db = await open({});
    const s = await db.openSession();
    try {
      const r = await s.query("SELECT name, age FROM singer WHERE age > 30 ORDER BY id");
      expect(r.columns).toEqual(["name", "age"]);
      expect(r.rows).toEqual([["Ann", 31], ["Cid", 40]]);
      expect(r.truncated).toBe(false);
      expect(await s.listTables()).toEqual(["numbers", "singer", "song"]);
      const song = await s.describeTable("song");
      expect(song.columns.map((c) => c.name)).toEqual(["id", "singer_id", "title"]);
      expect(song.columns[0]!.primaryKey).toBe(true);
      expect(song.foreignKeys).toEqual([{ column: "singer_id", references: { table: "singer", column: "id" } }]);
      const singer = await s.describeTable("singer");
      expect(singer.columns.find((c) => c.name === "name")!.notNull).toBe(true);
      expect(singer.columns.find((c) => c.name === "age")!.default).toBe("30");
      await expect(s.describeTable("nope")).rejects.toThrow(/no table named "nope".*list_tables/);
      await expect(s.query("SELECT * FROM nope")).rejects.toBeInstanceOf(SqlError);
      // A failed statement leaves the session usable.
      expect((await s.query("SELECT count(*) FROM song")).rows).toEqual([[expect.anything()]]);
    } finally {
      await s.close();
      await db.close();
    }
  });

  it("isolates sessions: one episode's writes are never seen by another", async () => {
    const db = await open({});
    try {
      const a = await db.openSession();
      const b = await db.openSession();
      const w = await a.query("INSERT INTO singer (id, name, age) VALUES (4, 'Dee', 22)");
      expect(w.changes).toBe(1);
      await a.query("DELETE FROM song");
      await a.query("CREATE TABLE scratch (x INTEGER)");
      expect((await a.query("SELECT count(*) FROM singer")).rows[0]![0]).toEqual(expect.anything());
      expect(Number((await a.query("SELECT count(*) FROM singer")).rows[0]![0])).toBe(4);
      expect(Number((await b.query("SELECT count(*) FROM singer")).rows[0]![0])).toBe(3);
      expect(Number((await b.query("SELECT count(*) FROM song")).rows[0]![0])).toBe(2);
      expect(await b.listTables()).not.toContain("scratch");
      await a.close();
      await b.close();
      const c = await db.openSession();
      expect(Number((await c.query("SELECT count(*) FROM singer")).rows[0]![0])).toBe(3);
      expect(await c.listTables()).not.toContain("scratch");
      await c.close();
    } finally {
      await db.close();
    }
  });

  it("refuses every write in read-only mode and leaves the database unchanged", async () => {
    const db = await open({ readOnly: true });
    const s = await db.openSession();
    try {
      for (const sql of [
        "INSERT INTO singer (id, name) VALUES (9, 'X')",
        "UPDATE singer SET age = 0",
        "DELETE FROM singer",
        "DROP TABLE song",
        "CREATE TABLE t (x INTEGER)",
        "  -- a comment first\n  update singer set name = 'Y'",
      ]) {
        await expect(s.query(sql), sql).rejects.toBeInstanceOf(SqlError);
        await expect(s.query(sql), sql).rejects.toThrow(/read-only|not allowed/);
      }
      await expect(s.query("INSERT INTO singer (id, name) VALUES (9, 'X')")).rejects.toBeInstanceOf(SqlReadOnlyError);
      expect((await s.query("SELECT id, name, age FROM singer ORDER BY id")).rows).toEqual([[1, "Ann", 31], [2, "Bob", 25], [3, "Cid", 40]]);
      expect((await s.query("WITH x AS (SELECT 1 AS one) SELECT one FROM x")).rows).toEqual([[1]]);
      expect(await s.listTables()).toEqual(["numbers", "singer", "song"]);
    } finally {
      await s.close();
      await db.close();
    }
  });

  it("stops a statement that runs past the timeout, and the session goes on", async () => {
    const db = await open({ statementTimeoutMs: 400 });
    const s = await db.openSession();
    try {
      await s.query("INSERT INTO singer (id, name) VALUES (5, 'Eve')");
      const t0 = Date.now();
      await expect(s.query(SLOW_SQL)).rejects.toBeInstanceOf(SqlTimeoutError);
      const took = Date.now() - t0;
      expect(took).toBeGreaterThanOrEqual(350);
      expect(took).toBeLessThan(5_000);
      // The episode's earlier write survived; the session still answers.
      expect(Number((await s.query("SELECT count(*) FROM singer")).rows[0]![0])).toBe(4);
    } finally {
      await s.close();
      await db.close();
    }
  });

  it("stops a statement when the episode's signal aborts", async () => {
    const db = await open({ statementTimeoutMs: 20_000 });
    const s = await db.openSession();
    try {
      const controller = new AbortController();
      const t0 = Date.now();
      setTimeout(() => controller.abort(), 200);
      await expect(s.query(SLOW_SQL, { signal: controller.signal })).rejects.toThrow(/cancelled/);
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect((await s.query("SELECT count(*) FROM song")).rows.map((r) => Number(r[0]))).toEqual([2]);
    } finally {
      await s.close();
      await db.close();
    }
  });

  it("cuts rows beyond the row limit and says so", async () => {
    const db = await open({ maxRows: 50 });
    const s = await db.openSession();
    try {
      const r = await s.query("SELECT n FROM numbers ORDER BY n");
      expect(r.rows).toHaveLength(50);
      expect(r.rows[49]).toEqual([50]);
      expect(r.truncated).toBe(true);
      const exact = await s.query("SELECT n FROM numbers WHERE n <= 50");
      expect(exact.truncated).toBe(false);
    } finally {
      await s.close();
      await db.close();
    }
  });

  it("serves the SQL tools through a ToolEnv, with errors as observations", async () => {
    const db = await open({ readOnly: true, maxRows: 10 });
    const env = new ToolEnv<null, SqlSession>({
      name: "SqlTestEnv",
      tasks: arrayTasks([null]),
      tools: sqlTools(),
      open: async () => ({ state: await db.openSession(), messages: [{ role: "user", content: "How many singers?" }] }),
      score: async () => ({ reward: 0, evidence: {} }),
      dispose: (s) => s.close(),
    });
    try {
      const [obs] = await env.reset({ seed: 1 });
      expect(obs.tools!.map((t) => t.name)).toEqual(["list_tables", "describe_table", "sql_query"]);
      const call = (name: string, args: unknown) => env.step({ content: "", toolCalls: [{ id: "c", name, arguments: JSON.stringify(args) }] });
      let [o, , , , info] = await call("list_tables", {});
      expect(o.messages[0]!.content).toBe("numbers\nsinger\nsong");
      [o] = await call("describe_table", { table: "song" });
      expect(o.messages[0]!.content).toMatch(/TABLE song\n {2}id \w+.*PRIMARY KEY/);
      expect(o.messages[0]!.content).toContain("FOREIGN KEY (singer_id) REFERENCES singer(id)");
      [o] = await call("sql_query", { sql: "SELECT name FROM singer ORDER BY name" });
      expect(o.messages[0]!.content).toBe("name\nAnn\nBob\nCid\n(3 rows)");
      [o] = await call("sql_query", { sql: "SELECT n FROM numbers" });
      expect(o.messages[0]!.content).toMatch(/only the first 10 rows are shown/);
      [o, , , , info] = await call("sql_query", { sql: "DELETE FROM singer" });
      expect(o.messages[0]!.content).toMatch(/^Error: "sql_query" failed: the database is read-only/);
      expect((info.toolErrors as { kind: string }[])[0]!.kind).toBe("tool_error");
      [o] = await call("sql_query", { query: "SELECT 1" });
      expect(o.messages[0]!.content).toMatch(/missing required property "sql"/);
    } finally {
      await env.close();
      await db.close();
    }
  });
}
