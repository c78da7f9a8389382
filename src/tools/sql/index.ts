/**
 * The SQL tool source: the database contract, SQLite and PostgreSQL implementations, and the tools.
 * Re-exports only; see the files for what each part does.
 */
export * from "./database.js";
export { SqliteDatabase, type SqliteOptions } from "./sqlite.js";
export { PostgresDatabase, type PostgresOptions } from "./postgres.js";
export { sqlTools, sqlQueryTool, listTablesTool, describeTableTool, type SqlToolsOptions } from "./tools.js";
