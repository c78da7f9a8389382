/**
 * The sql suite's task data: where the Spider files are, and how questions files are read.
 *
 * The data folder is `../shared/data` next to the repository (resolved from this file's location), or
 * `SINKFLEX_DATA_DIR` when set. A questions file is a JSON array of
 * `{db, query (the question), gold (SQL), hardness?, db_tables?}`; each `db` names `DIR/<db>.sqlite`.
 * This file does not open databases.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { benchmarkDataDir } from "../data-dir.js";

export interface SqlTask {
  /** Stable id: `spider/<index>` or `gen/<seed>/<index>`. */
  id: string;
  db: string;
  question: string;
  gold: string;
  /** Spider's hardness (easy, medium, hard, extra) or a generated difficulty (`level-1` ... `level-5`). */
  hardness: string;
  /** Tables the gold query uses (from the questions file; for the expert's exploration). */
  tables: string[];
}

/** The shared benchmark data folder. */
export function dataDir(): string {
  return benchmarkDataDir();
}

/** Throws a clear error, with what to do, when a folder of `<db>.sqlite` files does not exist. */
export function requireDbDir(dbDir: string): void {
  if (!existsSync(dbDir)) throw new Error(`the database folder ${dbDir} does not exist; pass dbDir (a folder of <db>.sqlite files) or set SINKFLEX_DATA_DIR to the folder holding spider/`);
}

export function spiderDir(): string {
  return join(dataDir(), "spider");
}

export function defaultQuestionsFile(): string {
  return join(spiderDir(), "questions.json");
}

export function defaultDbDir(): string {
  return join(spiderDir(), "db");
}

export function dbFile(dbDir: string, db: string): string {
  if (!/^[A-Za-z0-9_.-]+$/.test(db) || db.includes("..")) throw new Error(`invalid database name "${db}": use letters, digits, "_", "-" and "."`);
  return join(dbDir, `${db}.sqlite`);
}

export function loadQuestions(file: string): SqlTask[] {
  if (!existsSync(file)) {
    throw new Error(`questions file ${file} not found; pass a JSON array of {db, query, gold} as questionsFile, or set SINKFLEX_DATA_DIR to the folder holding spider/`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new Error(`questions file ${file} is not valid JSON: ${(err as Error).message}`);
  }
  if (!Array.isArray(raw)) throw new Error(`questions file ${file} must hold a JSON array of {db, query, gold}`);
  return raw.map((q, i) => {
    const item = q as Record<string, unknown>;
    for (const key of ["db", "query", "gold"]) {
      if (typeof item[key] !== "string" || (item[key] as string).trim() === "") {
        throw new Error(`questions file ${file}: item ${i} needs a non-empty string "${key}"`);
      }
    }
    const tables = item.db_tables && typeof item.db_tables === "object" ? Object.keys(item.db_tables as object) : [];
    return {
      id: `spider/${i}`,
      db: item.db as string,
      question: item.query as string,
      gold: item.gold as string,
      hardness: typeof item.hardness === "string" ? item.hardness : "unknown",
      tables,
    };
  });
}
