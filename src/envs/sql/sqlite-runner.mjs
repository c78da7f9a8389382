// The SQLite query runner: a child process that opens SQLite files read-only and answers queries
// over IPC. It is a separate process so that a runaway query can be stopped by killing it (better-sqlite3
// runs queries synchronously and cannot be interrupted from JavaScript). It is not a general SQL
// server: it only reads, and the parent (`sqlite-backend.ts`) decides which statements may reach it.
import { Buffer } from "node:buffer";
import Database from "better-sqlite3";

const open = new Map();

function database(file) {
  let db = open.get(file);
  if (!db) {
    db = new Database(file, { readonly: true, fileMustExist: true });
    open.set(file, db);
  }
  return db;
}

function cell(value) {
  if (typeof value === "bigint") return Number(value);
  if (value instanceof Uint8Array) return `x'${Buffer.from(value).toString("hex")}'`;
  return value;
}

// SQLite's legacy rule, which Spider's SQL relies on: a double-quoted token that names no column is a
// string literal. This build of SQLite disables that rule, so it is applied here: each "x" that SQLite
// reports as an unknown column becomes the literal 'x', and the statement is prepared again.
function prepareLegacy(db, sql) {
  for (let attempt = 0; ; attempt++) {
    try {
      return db.prepare(sql);
    } catch (err) {
      const m = /no such column: "((?:[^"]|"")*)" - should this be a string literal/.exec(err instanceof Error ? err.message : "");
      if (!m || attempt >= 20) throw err;
      const quoted = `"${m[1]}"`;
      const literal = `'${m[1].replace(/""/g, '"').replace(/'/g, "''")}'`;
      if (!sql.includes(quoted)) throw err;
      sql = sql.split(quoted).join(literal);
    }
  }
}

function run(msg) {
  const db = database(msg.file);
  if (msg.op === "query") {
    const stmt = prepareLegacy(db, msg.sql);
    if (!stmt.reader) throw new Error("the statement returns no rows; only SELECT queries are allowed");
    if (!stmt.readonly) throw new Error("the statement would change the database; only read-only queries are allowed");
    stmt.raw(true);
    const columns = stmt.columns().map((c) => c.name);
    const rows = [];
    let truncated = false;
    for (const row of stmt.iterate()) {
      if (rows.length >= msg.maxRows) {
        truncated = true;
        break;
      }
      rows.push(row.map(cell));
    }
    return { columns, rows, truncated };
  }
  if (msg.op === "tables") {
    return db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
      .pluck()
      .all();
  }
  if (msg.op === "describe") {
    const table = db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND lower(name) = lower(?)")
      .pluck()
      .get(msg.table);
    if (!table) return null;
    const quoted = `"${table.replace(/"/g, '""')}"`;
    const columns = db
      .prepare(`PRAGMA table_info(${quoted})`)
      .all()
      .map((c) => ({ name: c.name, type: c.type || "", notNull: Boolean(c.notnull), primaryKey: c.pk > 0 }));
    const foreignKeys = db
      .prepare(`PRAGMA foreign_key_list(${quoted})`)
      .all()
      .map((f) => ({ column: f.from, references: `${f.table}.${f.to ?? ""}` }));
    const rowCount = db.prepare(`SELECT COUNT(*) FROM ${quoted}`).pluck().get();
    const sample = db.prepare(`SELECT * FROM ${quoted} LIMIT ${Math.max(0, msg.sampleRows | 0)}`).raw(true).all().map((r) => r.map(cell));
    return { name: table, columns, foreignKeys, rowCount, sample };
  }
  throw new Error(`unknown operation ${msg.op}`);
}

process.on("message", (msg) => {
  let reply;
  try {
    reply = { id: msg.id, ok: true, result: run(msg) };
  } catch (err) {
    reply = { id: msg.id, ok: false, error: err instanceof Error ? err.message : String(err) };
  }
  process.send(reply);
});
process.on("disconnect", () => process.exit(0));
// Tells the parent the runner is up, so that query timeouts do not count the process start.
process.send({ ready: true });
