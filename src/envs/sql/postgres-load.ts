/**
 * Loads a SQLite database into a PostgreSQL schema, so that the sql env can run over PostgreSQL.
 *
 * Table and column names are lower-cased (PostgreSQL folds unquoted names, so Spider's SQL, written
 * with mixed case, resolves to them). A column is typed bigint, double precision or text from its
 * values (SQLite's declared types are not enforced, so the values decide). Primary keys are kept.
 * This is a loader for fixtures and deployments; it is not used while an episode runs.
 */
import Database from "better-sqlite3";
import pg from "pg";

function q(name: string): string {
  return `"${name.toLowerCase().replace(/"/g, '""')}"`;
}

/** Creates `schema` (dropping it first when `replace`) and copies every table of the SQLite file into it. */
export async function loadSqliteIntoPostgres(sqliteFile: string, pgUrl: string, schema: string, options: { replace?: boolean } = {}): Promise<string[]> {
  const src = new Database(sqliteFile, { readonly: true, fileMustExist: true });
  const client = new pg.Client({ connectionString: pgUrl });
  await client.connect();
  try {
    await client.query("BEGIN");
    if (options.replace) await client.query(`DROP SCHEMA IF EXISTS ${q(schema)} CASCADE`);
    await client.query(`CREATE SCHEMA ${q(schema)}`);
    const tables = src.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").pluck().all() as string[];
    for (const table of tables) {
      const st = `"${table.replace(/"/g, '""')}"`;
      const info = src.prepare(`PRAGMA table_info(${st})`).all() as { name: string; pk: number }[];
      const rows = src.prepare(`SELECT * FROM ${st}`).raw(true).all() as unknown[][];
      const types = info.map((_, i) => {
        const values = rows.map((r) => r[i]).filter((v) => v !== null && v !== undefined);
        if (values.length > 0 && values.every((v) => typeof v === "number" && Number.isInteger(v))) return "bigint";
        if (values.length > 0 && values.every((v) => typeof v === "number")) return "double precision";
        return "text";
      });
      const pk = info.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk);
      const pkUnique = pk.length > 0 && new Set(rows.map((r) => JSON.stringify(pk.map((c) => r[info.indexOf(c)])))).size === rows.length;
      const cols = info.map((c, i) => `${q(c.name)} ${types[i]}`);
      if (pkUnique) cols.push(`PRIMARY KEY (${pk.map((c) => q(c.name)).join(", ")})`);
      await client.query(`CREATE TABLE ${q(schema)}.${q(table)} (${cols.join(", ")})`);
      for (let start = 0; start < rows.length; start += 500) {
        const chunk = rows.slice(start, start + 500);
        const params: unknown[] = [];
        const tuples = chunk.map((r) => `(${r.map((v, i) => {
          params.push(v === null || v === undefined ? null : types[i] === "text" ? String(v) : v);
          return `$${params.length}`;
        }).join(", ")})`);
        await client.query(`INSERT INTO ${q(schema)}.${q(table)} VALUES ${tuples.join(", ")}`, params);
      }
    }
    await client.query("COMMIT");
    return tables;
  } catch (err) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw err;
  } finally {
    src.close();
    await client.end();
  }
}
