/**
 * The tool-source contract for the SQL tools (`sqlTools`) over SQLite, and over a real PostgreSQL
 * server when SINKFLEX_TEST_PG_URL is set (skipped otherwise, and says so, as sql.test.ts does). Each
 * episode gets its own session.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { PostgresDatabase } from "../../../src/tools/sql/postgres.js";
import { SqliteDatabase } from "../../../src/tools/sql/sqlite.js";
import { sqlTools } from "../../../src/tools/sql/tools.js";
import type { SqlDatabase, SqlSession } from "../../../src/tools/sql/database.js";
import { FIXTURE_SQL } from "../sql-contract.js";
import { toolSourceContract, type ToolSourceSubject } from "./tool-source.contract.js";

function subject(db: SqlDatabase, teardown: () => Promise<void> = async () => undefined): ToolSourceSubject<SqlSession> {
  return {
    tools: sqlTools(),
    openState: () => db.openSession(),
    disposeState: (s) => s.close(),
    script: [
      { tool: "list_tables", args: {}, expect: /^numbers\nsinger\nsong$/ },
      { tool: "describe_table", args: { table: "singer" }, expect: /^TABLE singer\n {2}id /m },
      { tool: "sql_query", args: { sql: "INSERT INTO singer (id, name, age) VALUES (4, 'Dee', 22)" }, expect: /^OK, 1 row\(s\) changed\.$/ },
      { tool: "sql_query", args: { sql: "SELECT count(*) AS n FROM singer" }, expect: /^n\n4\n\(1 row\)$/ },
    ],
    invalid: { tool: "sql_query", args: { sql: 42 } },
    failing: { tool: "sql_query", args: { sql: "SELECT * FROM nope" }, expect: /nope/ },
    stopService: () => db.close(),
    stoppedError: /the session is closed/,
    close: () => db.close(),
    dispose: async () => {
      await db.close();
      await teardown();
    },
  };
}

const caps = { deterministic: true, isolatesEpisodes: true, checksArgumentsItself: false };

toolSourceContract("SQL tools on SQLite", caps, async () => subject(SqliteDatabase.open({ script: FIXTURE_SQL })));

const pgUrl = process.env.SINKFLEX_TEST_PG_URL;
if (pgUrl) {
  toolSourceContract("SQL tools on PostgreSQL", caps, async () => {
    const schema = `sinkflex_contract_${process.pid}_${Date.now()}_${Math.floor(Math.random() * 1e6)}`;
    const admin = await PostgresDatabase.connect({ url: pgUrl });
    await admin.setup(`CREATE SCHEMA ${schema}; SET search_path TO ${schema}; ${FIXTURE_SQL}`);
    const db = await PostgresDatabase.connect({ url: pgUrl, searchPath: [schema] });
    return subject(db, async () => {
      await admin.setup(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await admin.close();
    });
  });
} else {
  console.warn("SKIPPED: the PostgreSQL tool-source contract needs SINKFLEX_TEST_PG_URL (run `bash .ci/start-postgres.sh`, then set it to postgres://sinkflex:sinkflex@127.0.0.1:5432/sinkflex_test).");
}

describe("SQLite sessions after close", () => {
  function queryProcesses(): number[] {
    try {
      return execFileSync("pgrep", ["-P", String(process.pid), "-f", "sqlite-child"], { encoding: "utf8" }).split("\n").filter(Boolean).map(Number);
    } catch {
      return [];
    }
  }

  it("list_tables and describe_table on a closed session say so and start no query process", async () => {
    const db = SqliteDatabase.open({ script: FIXTURE_SQL, poolSize: 0 });
    const session = await db.openSession();
    expect(await session.listTables()).toEqual(["numbers", "singer", "song"]);
    await session.close();
    await new Promise((r) => setTimeout(r, 100));
    const before = queryProcesses();
    await expect(session.listTables()).rejects.toThrow(/the session is closed/);
    await expect(session.describeTable("singer")).rejects.toThrow(/the session is closed/);
    await db.close();
    await new Promise((r) => setTimeout(r, 100));
    expect(queryProcesses().filter((pid) => !before.includes(pid))).toEqual([]);
  });
});
