/**
 * SQLite as a tool source (the embedded default): `SqliteDatabase`.
 *
 * The database is a file (an existing one, or one built once from a SQL script). Each session gets its
 * own copy of the file in a temporary folder, so an episode's writes are never seen by another; in
 * read-only mode sessions open the base file read-only instead, and only statements SQLite itself
 * reports as read-only (SELECT, WITH, EXPLAIN, ...) may run. Statements run in a child process per
 * session (`sqlite-child.mjs`): when one runs past the statement timeout, the process is killed, which
 * really stops it, and a fresh one reopens the session's file (its committed writes are kept). Idle
 * processes are pooled and reused across sessions. This file is not the tools: see `tools.ts`.
 */
import { fork, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import {
  DEFAULT_MAX_ROWS,
  DEFAULT_STATEMENT_TIMEOUT_MS,
  SqlError,
  SqlReadOnlyError,
  SqlTimeoutError,
  firstKeyword,
  type QueryResult,
  type SqlDatabase,
  type SqlLimits,
  type SqlSession,
  type TableInfo,
} from "./database.js";

const CHILD_SCRIPT = fileURLToPath(new URL("./sqlite-child.mjs", import.meta.url));

export interface SqliteOptions extends SqlLimits {
  /** An existing SQLite database file. It is never modified. */
  file?: string;
  /** A SQL script that builds the database (used when `file` is absent). */
  script?: string;
  /** Idle query processes kept for reuse; 2 by default. */
  poolSize?: number;
}

/** Statements refused in every mode: they reach outside the session's own file. */
const OUTSIDE = new Set(["ATTACH", "DETACH", "VACUUM"]);

export class SqliteDatabase implements SqlDatabase {
  readonly dialect = "sqlite" as const;
  readonly readOnly: boolean;
  readonly statementTimeoutMs: number;
  readonly maxRows: number;
  /** The file every session starts from. */
  readonly baseFile: string;
  private readonly dir: string;
  private readonly idle: QueryProcess[] = [];
  private readonly sessions = new Set<SqliteSession>();
  private readonly poolSize: number;
  private closed = false;

  private constructor(options: SqliteOptions) {
    this.readOnly = options.readOnly ?? false;
    this.statementTimeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
    this.maxRows = options.maxRows ?? DEFAULT_MAX_ROWS;
    this.poolSize = options.poolSize ?? 2;
    this.dir = mkdtempSync(join(tmpdir(), "sinkflex-sqlite-"));
    if (options.file !== undefined) {
      if (!existsSync(options.file)) throw new Error(`SQLite file ${options.file} does not exist; pass an existing database file or a \`script\` that builds one.`);
      this.baseFile = options.file;
    } else if (options.script !== undefined) {
      this.baseFile = join(this.dir, "base.sqlite");
      const db = new Database(this.baseFile);
      try {
        db.exec(options.script);
      } finally {
        db.close();
      }
    } else {
      throw new Error("SqliteDatabase needs `file` (an existing database) or `script` (SQL that builds one).");
    }
  }

  /** Opens a SQLite database from a file or a build script. */
  static open(options: SqliteOptions): SqliteDatabase {
    return new SqliteDatabase(options);
  }

  async openSession(): Promise<SqlSession> {
    if (this.closed) throw new Error("SqliteDatabase: openSession after close");
    let file = this.baseFile;
    if (!this.readOnly) {
      file = join(this.dir, `episode-${randomUUID()}.sqlite`);
      copyFileSync(this.baseFile, file);
    }
    const session = new SqliteSession(this, file, !this.readOnly);
    this.sessions.add(session);
    return session;
  }

  /** @internal A query process: an idle pooled one, or a new one. */
  takeProcess(): QueryProcess {
    return this.idle.pop() ?? new QueryProcess();
  }

  /** @internal Returns a healthy process to the pool, or ends it. */
  giveBack(proc: QueryProcess): void {
    if (!this.closed && proc.alive && this.idle.length < this.poolSize) this.idle.push(proc);
    else proc.kill();
  }

  /** @internal */
  forget(session: SqliteSession): void {
    this.sessions.delete(session);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.sessions].map((s) => s.close()));
    for (const proc of this.idle.splice(0)) proc.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

class SqliteSession implements SqlSession {
  readonly dialect = "sqlite" as const;
  readonly readOnly: boolean;
  private proc: QueryProcess | undefined;
  private closed = false;
  /** Serializes requests: a session runs one statement at a time. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly db: SqliteDatabase,
    private readonly file: string,
    private readonly ownsFile: boolean,
  ) {
    this.readOnly = db.readOnly;
  }

  private async process(): Promise<QueryProcess> {
    if (this.proc?.alive) return this.proc;
    const proc = this.db.takeProcess();
    await proc.request({ op: "open", file: this.file, readOnly: this.readOnly }, 30_000);
    this.proc = proc;
    return proc;
  }

  /** A closed session's file is gone: refuse before starting a query process that would have nothing to open. */
  private checkOpen(): void {
    if (this.closed) throw new SqlError("the session is closed");
  }

  private serial<T>(work: () => Promise<T>): Promise<T> {
    const run = this.queue.then(work, work);
    this.queue = run.catch(() => undefined);
    return run;
  }

  query(sql: string, options: { signal?: AbortSignal } = {}): Promise<QueryResult> {
    return this.serial(async () => {
      this.checkOpen();
      if (typeof sql !== "string" || sql.trim() === "") throw new SqlError("the query is empty; send one SQL statement.");
      const keyword = firstKeyword(sql);
      if (OUTSIDE.has(keyword)) throw new SqlError(`${keyword} is not allowed: a session works on its own database only.`);
      const proc = await this.process();
      const timeoutMs = this.db.statementTimeoutMs;
      let result: { refused?: true } & QueryResult;
      try {
        result = (await proc.request({ op: "query", sql, maxRows: this.db.maxRows }, timeoutMs, options.signal)) as typeof result;
      } catch (err) {
        if (err instanceof ProcessStopped) throw err.reason === "timeout" ? new SqlTimeoutError(timeoutMs) : new SqlError("the statement was cancelled.");
        throw new SqlError(`${(err as Error).message}.`);
      }
      if (result.refused) throw new SqlReadOnlyError(keyword ? `a ${keyword} statement` : "this statement");
      return result;
    });
  }

  listTables(): Promise<string[]> {
    return this.serial(async () => {
      this.checkOpen();
      return (await (await this.process()).request({ op: "tables" }, this.db.statementTimeoutMs)) as string[];
    });
  }

  describeTable(name: string): Promise<TableInfo> {
    return this.serial(async () => {
      this.checkOpen();
      const info = (await (await this.process()).request({ op: "describe", table: name }, this.db.statementTimeoutMs)) as TableInfo | null;
      if (!info) throw new SqlError(`no table named "${name}". Use list_tables to see the tables.`);
      return info;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue;
    const proc = this.proc;
    this.proc = undefined;
    if (proc?.alive) {
      try {
        await proc.request({ op: "close" }, 5_000);
        this.db.giveBack(proc);
      } catch {
        proc.kill();
      }
    }
    if (this.ownsFile) {
      for (const suffix of ["", "-journal", "-wal", "-shm"]) rmSync(this.file + suffix, { force: true });
    }
    this.db.forget(this);
  }
}

class ProcessStopped extends Error {
  constructor(readonly reason: "timeout" | "aborted") {
    super(reason);
  }
}

type Pending = { resolve(v: unknown): void; reject(e: Error): void };

/** A child process running `sqlite-child.mjs`, with request/response over IPC. */
class QueryProcess {
  private readonly child: ChildProcess;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  alive = true;

  constructor() {
    this.child = fork(CHILD_SCRIPT, [], { execArgv: [], serialization: "advanced", stdio: ["ignore", "ignore", "inherit", "ipc"] });
    this.child.on("message", (msg: { id: number; ok: boolean; result?: unknown; error?: string }) => {
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      if (msg.ok) p.resolve(msg.result);
      else p.reject(new Error(msg.error));
    });
    this.child.on("exit", () => {
      this.alive = false;
      for (const p of this.pending.values()) p.reject(new Error("the SQLite query process exited unexpectedly"));
      this.pending.clear();
    });
    this.child.on("error", () => {
      this.alive = false;
    });
    this.idle();
  }

  /** Idle processes must not keep the program alive. */
  private idle(): void {
    this.child.unref();
    (this.child.channel as { unref?: () => void } | undefined)?.unref?.();
  }

  private busy(): void {
    this.child.ref();
    (this.child.channel as { ref?: () => void } | undefined)?.ref?.();
  }

  request(msg: Record<string, unknown>, timeoutMs: number, signal?: AbortSignal): Promise<unknown> {
    if (!this.alive) return Promise.reject(new Error("the SQLite query process is not running"));
    if (signal?.aborted) return Promise.reject(new ProcessStopped("aborted"));
    const id = this.nextId++;
    this.busy();
    return new Promise<unknown>((resolve, reject) => {
      const stop = (reason: "timeout" | "aborted") => {
        this.pending.delete(id);
        done();
        this.kill();
        reject(new ProcessStopped(reason));
      };
      const timer = setTimeout(() => stop("timeout"), timeoutMs);
      const onAbort = () => stop("aborted");
      signal?.addEventListener("abort", onAbort, { once: true });
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        if (this.pending.size === 0) this.idle();
      };
      this.pending.set(id, {
        resolve: (v) => {
          done();
          resolve(v);
        },
        reject: (e) => {
          done();
          reject(e);
        },
      });
      try {
        this.child.send({ ...msg, id });
      } catch (err) {
        this.pending.delete(id);
        done();
        reject(err as Error);
      }
    });
  }

  kill(): void {
    if (!this.alive) return;
    this.alive = false;
    this.child.kill("SIGKILL");
  }
}
