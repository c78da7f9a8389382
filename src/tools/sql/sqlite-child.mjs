// The SQLite query process: one per episode session, started by `sqlite.ts`.
//
// It opens one database file (read-only, or the episode's own writable copy) and answers requests from
// its parent over the IPC channel, one at a time. It runs in its own process so that a statement that
// runs too long can be stopped for real: the parent kills the process (SQLite offers no other way to
// interrupt a statement through better-sqlite3), and the file's locks and journal are released with it.
// It holds no episode logic and never decides what is allowed beyond the read-only check.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const Database = require("better-sqlite3");

/** @type {import("better-sqlite3").Database | undefined} */
let db;
let readOnly = false;

const handlers = {
  open({ file, readOnly: ro }) {
    if (db) db.close();
    readOnly = ro;
    db = new Database(file, { readonly: ro, fileMustExist: true });
    db.pragma("foreign_keys = ON");
    // An episode's copy needs no durability against power loss, only against this process being
    // killed, which the rollback journal (kept) gives without an fsync per write.
    if (!ro) db.pragma("synchronous = OFF");
    return true;
  },
  query({ sql, maxRows }) {
    const stmt = db.prepare(sql);
    if (readOnly && !stmt.readonly) return { refused: true };
    if (!stmt.reader) {
      const info = stmt.run();
      return { columns: [], rows: [], truncated: false, changes: info.changes };
    }
    stmt.raw(true);
    const columns = stmt.columns().map((c) => c.name);
    const rows = [];
    let truncated = false;
    for (const row of stmt.iterate()) {
      if (rows.length >= maxRows) {
        truncated = true;
        break;
      }
      rows.push(row);
    }
    return { columns, rows, truncated };
  },
  tables() {
    return db
      .prepare("SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name")
      .pluck()
      .all();
  },
  describe({ table }) {
    const found = db.prepare("SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE").pluck().get(table);
    if (found === undefined) return null;
    const columns = db
      .prepare("SELECT name, type, \"notnull\" AS nn, dflt_value AS dflt, pk FROM pragma_table_info(?)")
      .all(found)
      .map((c) => ({ name: c.name, type: c.type, notNull: c.nn === 1, primaryKey: c.pk > 0, default: c.dflt }));
    const foreignKeys = db
      .prepare("SELECT \"from\" AS col, \"table\" AS tbl, \"to\" AS ref FROM pragma_foreign_key_list(?)")
      .all(found)
      .map((f) => ({ column: f.col, references: { table: f.tbl, column: f.ref } }));
    return { name: found, columns, foreignKeys };
  },
  close() {
    if (db) db.close();
    db = undefined;
    return true;
  },
};

process.on("message", (msg) => {
  let reply;
  try {
    if (!db && msg.op !== "open" && msg.op !== "close") throw new Error("no database is open");
    reply = { id: msg.id, ok: true, result: handlers[msg.op](msg) };
  } catch (err) {
    reply = { id: msg.id, ok: false, error: err instanceof Error ? err.message : String(err) };
  }
  process.send(reply);
});
// The parent went away: nothing is left to serve.
process.on("disconnect", () => process.exit(0));
