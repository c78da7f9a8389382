/**
 * Lexical checks on SQL text: is it one read-only query, and does it order its result at the top level.
 *
 * These are conservative guards that run before a statement reaches a database; the databases are also
 * opened read-only (SQLite) or queried inside READ ONLY transactions (PostgreSQL), so a statement that
 * slips past this check still cannot write. This is not a SQL parser: it only skips string literals,
 * quoted identifiers and comments, and tracks parentheses.
 */

/** The SQL with comments removed and string literals / quoted identifiers replaced by placeholders. */
export function maskSql(sql: string): string {
  let out = "";
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    const next = sql[i + 1];
    if (c === "-" && next === "-") {
      const end = sql.indexOf("\n", i);
      i = end === -1 ? sql.length : end;
      out += " ";
    } else if (c === "/" && next === "*") {
      const end = sql.indexOf("*/", i + 2);
      i = end === -1 ? sql.length : end + 2;
      out += " ";
    } else if (c === "'" || c === '"' || c === "`" || c === "[") {
      const close = c === "[" ? "]" : c;
      let j = i + 1;
      while (j < sql.length) {
        if (sql[j] === close) {
          if (close !== "]" && sql[j + 1] === close) {
            j += 2;
            continue;
          }
          break;
        }
        j++;
      }
      out += c === "'" ? "''" : "_q_";
      i = j + 1;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

const READ_STARTS = new Set(["SELECT", "WITH", "VALUES"]);
const WRITE_WORDS =
  /\b(INSERT|UPDATE|DELETE|REPLACE|UPSERT|MERGE|DROP|CREATE|ALTER|TRUNCATE|ATTACH|DETACH|PRAGMA|VACUUM|REINDEX|ANALYZE|GRANT|REVOKE|COPY|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|LOCK|SET|CALL|DO|LOAD)\b/i;

export type ReadOnlyCheck = { ok: true; sql: string } | { ok: false; reason: string };

/**
 * Accepts exactly one SELECT / WITH / VALUES statement (a trailing semicolon is fine) that names no
 * statement keyword that writes or changes the connection. Returns the statement without the trailing
 * semicolon.
 */
export function checkReadOnly(sql: string): ReadOnlyCheck {
  const masked = maskSql(sql).trim();
  if (masked === "") return { ok: false, reason: "the query is empty; send one SELECT statement" };
  const body = masked.replace(/;\s*$/, "");
  if (body.includes(";")) return { ok: false, reason: "only one statement per call is allowed; remove the extra statements after ';'" };
  const first = /^[A-Za-z]+/.exec(body)?.[0]?.toUpperCase() ?? "";
  if (!READ_STARTS.has(first)) {
    return { ok: false, reason: `only read-only queries (SELECT, WITH ... SELECT) are allowed, got a statement starting with "${first || body.slice(0, 12)}"; the database cannot be changed` };
  }
  const write = WRITE_WORDS.exec(body);
  // "SET" and "REPLACE" also occur as harmless words (REPLACE() the function); only flag them as statements.
  if (write) {
    const word = write[1]!.toUpperCase();
    const harmless = (word === "REPLACE" && /^\s*\(/.test(body.slice(write.index + word.length))) || (word === "SET" && !/\bUPDATE\b/i.test(body));
    if (!harmless) return { ok: false, reason: `the query contains "${word}", which could change the database; only read-only queries are allowed` };
  }
  return { ok: true, sql: sql.trim().replace(/;\s*$/, "") };
}

/** True when the statement has an ORDER BY outside every parenthesis (its result order is meaningful). */
export function hasTopLevelOrderBy(sql: string): boolean {
  const masked = maskSql(sql);
  let depth = 0;
  let flat = "";
  for (const c of masked) {
    if (c === "(") depth++;
    else if (c === ")") depth = Math.max(0, depth - 1);
    else if (depth === 0) flat += c;
  }
  return /\bORDER\s+BY\b/i.test(flat);
}
