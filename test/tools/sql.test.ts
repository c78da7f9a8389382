/**
 * The SQL tool sources against real databases: SQLite files in a temporary folder, and a real
 * PostgreSQL server when SINKFLEX_TEST_PG_URL is set (CI sets it; without it the PostgreSQL tests are
 * skipped and say so).
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresDatabase } from "../../src/tools/sql/postgres.js";
import { SqliteDatabase } from "../../src/tools/sql/sqlite.js";
import { FIXTURE_SQL, SLOW_SQL, sqlContract } from "./sql-contract.js";

const dir = mkdtempSync(join(tmpdir(), "sinkflex-sql-test-"));
const file = join(dir, "music.sqlite");
beforeAll(() => {
  const db = new Database(file);
  db.exec(FIXTURE_SQL);
  db.close();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function childPids(): number[] {
  try {
    const out = execFileSync("pgrep", ["-P", String(process.pid), "-f", "sqlite-child"], { encoding: "utf8" });
    return out.split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

describe("SQLite (file)", () => {
  sqlContract(async (limits) => SqliteDatabase.open({ file, ...limits }));

  it("never modifies the base file, and leaves no process behind", async () => {
    const before = readFileSync(file);
    const db = SqliteDatabase.open({ file, statementTimeoutMs: 300 });
    const sessions = await Promise.all([db.openSession(), db.openSession(), db.openSession()]);
    await sessions[0]!.query("DELETE FROM singer WHERE id = 2");
    await expect(sessions[1]!.query(SLOW_SQL)).rejects.toThrow(/ran longer than 300 ms/);
    await sessions[2]!.query("UPDATE singer SET age = 99");
    // The timed-out session's process was killed; the other two still run.
    expect(childPids()).toHaveLength(2);
    await db.close();
    await new Promise((r) => setTimeout(r, 200));
    expect(childPids()).toEqual([]);
    expect(readFileSync(file).equals(before)).toBe(true);
  });

  it("builds a database from a script, and refuses ATTACH and several statements at once", async () => {
    const db = SqliteDatabase.open({ script: "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (7);" });
    const s = await db.openSession();
    try {
      expect((await s.query("SELECT x FROM t")).rows).toEqual([[7]]);
      await expect(s.query(`ATTACH DATABASE '${join(dir, "other.sqlite")}' AS other`)).rejects.toThrow(/ATTACH is not allowed/);
      await expect(s.query("SELECT 1; DELETE FROM t")).rejects.toThrow(/more than one statement/);
      await expect(s.query("   ")).rejects.toThrow(/empty/);
      expect((await s.query("SELECT x FROM t")).rows).toEqual([[7]]);
    } finally {
      await db.close();
    }
  });
});

const pgUrl = process.env.SINKFLEX_TEST_PG_URL;
if (!pgUrl && process.env.SINKFLEX_REQUIRE_PG) {
  throw new Error("SINKFLEX_REQUIRE_PG is set but SINKFLEX_TEST_PG_URL is not: the PostgreSQL tests must run here.");
}
if (!pgUrl) {
  console.warn("SKIPPED: the PostgreSQL tool-source tests need SINKFLEX_TEST_PG_URL (run `bash .ci/start-postgres.sh`, then set it to postgres://sinkflex:sinkflex@127.0.0.1:5432/sinkflex_test).");
}

describe.skipIf(!pgUrl)("PostgreSQL (real server)", () => {
  const schema = `sinkflex_test_${process.pid}_${Date.now()}`;
  let admin: PostgresDatabase;
  beforeAll(async () => {
    admin = await PostgresDatabase.connect({ url: pgUrl! });
    await admin.setup(`CREATE SCHEMA ${schema}; SET search_path TO ${schema}; ${FIXTURE_SQL}`);
  });
  afterAll(async () => {
    await admin?.setup(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin?.close();
  });

  sqlContract((limits) => PostgresDatabase.connect({ url: pgUrl!, searchPath: [schema], ...limits }));

  it("refuses transaction control and several statements at once, and stays isolated", async () => {
    const db = await PostgresDatabase.connect({ url: pgUrl!, searchPath: [schema] });
    try {
      const s = await db.openSession();
      await s.query("DELETE FROM song");
      for (const sql of ["COMMIT", "rollback", "BEGIN", "SET statement_timeout = 0", "SAVEPOINT x", "END"]) {
        await expect(s.query(sql), sql).rejects.toThrow(/not allowed: each episode runs in its own transaction/);
      }
      await expect(s.query("SELECT 1; COMMIT")).rejects.toThrow(/one SQL statement at a time/);
      await expect(s.query("SELECT set_config('statement_timeout', '0', false)")).rejects.toThrow(/set_config\(\) is not allowed/);
      // A data-modifying WITH runs (not as a cursor) and returns its rows.
      const w = await s.query("WITH d AS (DELETE FROM singer WHERE id = 2 RETURNING name) SELECT name FROM d");
      expect(w.rows).toEqual([["Bob"]]);
      await s.close();
      const t = await db.openSession();
      expect((await t.query("SELECT count(*)::int FROM song")).rows).toEqual([[2]]);
      expect((await t.query("SELECT count(*)::int FROM singer")).rows).toEqual([[3]]);
      await t.close();
    } finally {
      await db.close();
    }
  });

  it("says clearly when the server is not there", async () => {
    await expect(PostgresDatabase.connect({ url: "postgres://nobody:secret@127.0.0.1:1/none" })).rejects.toThrow(/cannot connect to PostgreSQL at postgres:\/\/nobody:\*\*\*@127\.0\.0\.1:1\/none/);
  });
});
