/**
 * Fuzz test: over 10,000 random and malformed actions (seeded) against tool environments built on each
 * tool source — function tools, OpenAPI over a real HTTP server, SQL over a writable SQLite database,
 * and MCP in-process — with resets in between. No step may throw, every observation must lie in the
 * observation space with each error recorded in `info.toolErrors`, and every episode must start from
 * the pristine state (a write in one episode is never seen in the next).
 */
import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, expect, it } from "vitest";
import { z } from "zod";
import type { AgentTurn, ChatObservation } from "../../src/core/index.js";
import { Rng } from "../../src/core/index.js";
import { McpToolSource, routeMcpTools } from "../../src/tools/mcp.js";
import { openApiTools } from "../../src/tools/openapi.js";
import type { SqlSession } from "../../src/tools/sql/database.js";
import { SqliteDatabase } from "../../src/tools/sql/sqlite.js";
import { sqlTools } from "../../src/tools/sql/tools.js";
import { functionTool } from "../../src/tools/tool.js";
import { ToolEnv, arrayTasks } from "../../src/tools/tool-env.js";
import { notesServer, type NotesStore } from "./fixtures/mcp-servers.js";
import { startPetstore, type Petstore } from "./fixtures/petstore.js";
import { FIXTURE_SQL, SLOW_SQL } from "./sql-contract.js";

const SEED = 20_261_202;
const MIN_ACTIONS = 10_000;
const MAX_STEPS_PER_EPISODE = 12;

interface Target {
  name: string;
  env: ToolEnv<any, any>;
  /** Plausible arguments for a tool: often valid, sometimes subtly off. */
  args(tool: string, rng: Rng): unknown;
  /** Checked right after each reset, before any action: the episode starts pristine. */
  checkFresh(): Promise<void>;
  close(): Promise<void>;
}

const task = arrayTasks([{ goal: "do things" }]);
const opening = async () => ({ role: "user" as const, content: "Do things." });
const noScore = async () => ({ reward: 0, evidence: {} });

function functionTarget(): Target {
  const add = functionTool({
    name: "add",
    description: "Add to the counter",
    parameters: z.object({ amount: z.number().int().min(1).max(100), note: z.string().max(20).optional() }),
    execute: ({ amount }, ctx: { state: { total: number } }) => ({ total: (ctx.state.total += amount) }),
  });
  const tags = functionTool({
    name: "tag",
    description: "Tag the counter",
    parameters: z.object({ tags: z.array(z.enum(["red", "blue"])).min(1), mode: z.enum(["set", "add"]) }),
    execute: ({ tags }) => tags.join(","),
  });
  const boom = functionTool({ name: "boom", description: "Throws", parameters: z.object({ why: z.string().optional() }), execute: () => { throw new Error("kaboom"); } });
  const hang = functionTool({ name: "hang", description: "Never answers", parameters: z.object({}), timeoutMs: 15, execute: () => new Promise(() => undefined) });
  const submit = functionTool({ name: "submit", description: "Finish", parameters: z.object({ answer: z.number() }), execute: (_a, ctx) => ctx.finish("submitted") });
  const env = new ToolEnv<unknown, { total: number }>({
    name: "FuzzFunctionsEnv",
    tasks: task,
    tools: [add, tags, boom, hang, submit],
    open: async () => ({ state: { total: 0 }, messages: [await opening()] }),
    score: async (ep) => ({ reward: ep.state.total, evidence: {} }),
  });
  return {
    name: "functions",
    env,
    args(tool, rng) {
      if (tool === "add") return { amount: rng.range(-5, 120), ...(rng.next() < 0.3 ? { note: "n".repeat(rng.int(30)) } : {}) };
      if (tool === "tag") return { tags: [rng.pick(["red", "blue", "green"])], mode: rng.pick(["set", "add", "del"]) };
      if (tool === "hang") return rng.next() < 0.3 ? {} : { x: 1 };
      if (tool === "submit") return { answer: rng.int(10) };
      return {};
    },
    async checkFresh() {
      expect(env.current!.state.total).toBe(0);
    },
    close: () => env.close(),
  };
}

function openApiTarget(store: Petstore): Target {
  const env = new ToolEnv({
    name: "FuzzOpenApiEnv",
    tasks: task,
    tools: openApiTools(store.document("3.0"), { baseUrl: store.url, requestTimeoutMs: 40 }),
    open: async () => {
      store.resetData();
      return { state: null, messages: [await opening()] };
    },
    score: noScore,
  });
  return {
    name: "openapi",
    env,
    args(tool, rng) {
      const status = rng.pick(["available", "pending", "sold", "lost"]);
      switch (tool) {
        case "listPets":
          return rng.next() < 0.5 ? { status } : { status, limit: rng.range(-1, 101) };
        case "addPet":
          return { name: rng.pick(["Rex", "", "Nemo", "é\u0000x"]), status, ...(rng.next() < 0.5 ? { tag: rng.pick(["a", null, 3]) } : {}) };
        case "getPet":
          return { petId: rng.range(0, 7) };
        case "delete_pets_petId":
          return { petId: rng.range(1, 6), "X-Api-Key": rng.pick(["secret", "wrong"]) };
        case "put_pets_petId_rename":
          return { petId: rng.range(1, 6), body: rng.pick(["Max", ""]) };
        case "slow":
          return rng.next() < 0.05 ? {} : { now: true };
        default:
          return {};
      }
    },
    async checkFresh() {
      const res = await fetch(`${store.url}/pets?status=available`);
      expect(await res.json()).toEqual([{ id: 1, name: "Rex", status: "available", tag: "dog" }]);
    },
    close: () => env.close(),
  };
}

const SQL_STATEMENTS = [
  "SELECT name, age FROM singer ORDER BY id",
  "SELECT count(*) FROM song",
  "SELECT * FROM numbers",
  "SELECT s.name, g.title FROM singer s JOIN song g ON g.singer_id = s.id",
  "INSERT INTO singer (id, name, age) VALUES (10, 'Zed', 50)",
  "INSERT INTO singer (id, name) VALUES (1, 'Dup')",
  "UPDATE singer SET age = age + 1",
  "DELETE FROM song",
  "DELETE FROM numbers WHERE n > 10",
  "DROP TABLE numbers",
  "CREATE TABLE leaked (x INTEGER)",
  "ALTER TABLE singer ADD COLUMN leaked TEXT",
  "BEGIN",
  "COMMIT",
  "ROLLBACK",
  "PRAGMA journal_mode = WAL",
  "ATTACH DATABASE ':memory:' AS other",
  "VACUUM",
  "SELECT 1; DROP TABLE singer",
  "SELEC * FRM singer",
  "SELECT * FROM no_such_table",
  "",
  ";;;",
  "-- only a comment",
  "SELECT randomblob(8), NULL, 1.5, 'a\nb'",
  "SELECT load_extension('x')",
];

async function sqliteTarget(): Promise<Target> {
  const db = SqliteDatabase.open({ script: FIXTURE_SQL, statementTimeoutMs: 150, maxRows: 20 });
  const env = new ToolEnv<unknown, SqlSession>({
    name: "FuzzSqliteEnv",
    tasks: task,
    tools: sqlTools(),
    open: async () => ({ state: await db.openSession(), messages: [await opening()] }),
    score: noScore,
    dispose: (s) => s.close(),
  });
  const baseTables = ["numbers", "singer", "song"];
  return {
    name: "sqlite",
    env,
    args(tool, rng) {
      if (tool === "sql_query") return { sql: rng.next() < 0.004 ? SLOW_SQL : rng.pick(SQL_STATEMENTS) };
      if (tool === "describe_table") return { table: rng.pick([...baseTables, "leaked", "", "sqlite_schema", "x'; DROP TABLE singer; --"]) };
      return {};
    },
    async checkFresh() {
      const s = env.current!.state;
      expect(await s.listTables()).toEqual(baseTables);
      const r = await s.query("SELECT (SELECT count(*) FROM singer), (SELECT count(*) FROM song), (SELECT count(*) FROM numbers), (SELECT sum(age) FROM singer)");
      expect(r.rows).toEqual([[3, 2, 1000, 96]]);
      expect((await s.describeTable("singer")).columns.map((c) => c.name)).toEqual(["id", "name", "age"]);
    },
    async close() {
      await env.close();
      await db.close();
    },
  };
}

async function mcpTarget(): Promise<Target> {
  // One server per episode: the tools are listed once, and each call goes to the episode's own server.
  const template = await McpToolSource.connect({ kind: "in-process", server: notesServer() });
  await template.close();
  type State = { source: McpToolSource; store: NotesStore };
  const tools = routeMcpTools(template.tools, (state: State) => state.source);
  const env = new ToolEnv<unknown, State>({
    name: "FuzzMcpEnv",
    tasks: task,
    tools,
    open: async () => {
      const store: NotesStore = { notes: [] };
      const source = await McpToolSource.connect({ kind: "in-process", server: notesServer(store) }, { callTimeoutMs: 40 });
      return { state: { source, store }, messages: [await opening()] };
    },
    score: noScore,
    dispose: (s) => s.source.close(),
  });
  return {
    name: "mcp",
    env,
    args(tool, rng) {
      if (tool === "add_note") return { text: rng.pick(["milk", "", "a".repeat(50)]), ...(rng.next() < 0.4 ? { priority: rng.pick(["low", "high", "urgent"]) } : {}) };
      if (tool === "fail") return { reason: rng.pick(["x", 5]) };
      if (tool === "slow") return { ms: rng.next() < 0.05 ? 100 : rng.range(-1, 3) };
      return {};
    },
    async checkFresh() {
      const state = env.current!.state;
      expect(state.store.notes).toEqual([]);
      expect(await state.source.call("list_notes", {})).toBe("no notes");
    },
    close: () => env.close(),
  };
}

/** Random text: ASCII, JSON punctuation, control characters, lone surrogates, emoji. */
function junk(rng: Rng, max = 40): string {
  const alphabet = ['{', '}', '[', ']', '"', ":", ",", "\\", "a", "1", " ", "\n", "\u0000", "\ud800", "😀", "null", "true", "-", "e", "."];
  let s = "";
  for (let i = rng.int(max); i > 0; i--) s += rng.pick(alphabet);
  return s;
}

function randomJsonValue(rng: Rng, depth = 0): unknown {
  const k = rng.int(depth > 2 ? 5 : 7);
  if (k === 0) return null;
  if (k === 1) return rng.next() < 0.5;
  if (k === 2) return rng.pick([0, -1, 1.5, 1e308, -0, 2 ** 53 + 1]);
  if (k === 3) return junk(rng, 10);
  if (k === 4) return "";
  if (k === 5) return Array.from({ length: rng.int(3) }, () => randomJsonValue(rng, depth + 1));
  return Object.fromEntries(Array.from({ length: rng.int(3) }, () => [rng.pick(["a", "sql", "status", "petId", "text", "__proto__", "amount"]), randomJsonValue(rng, depth + 1)]));
}

function randomArguments(rng: Rng, target: Target, tool: string): string {
  const r = rng.next();
  const good = target.args(tool, rng);
  if (r < 0.45) return JSON.stringify(good);
  if (r < 0.6) {
    const mutated: Record<string, unknown> = { ...(good as Record<string, unknown>) };
    const keys = Object.keys(mutated);
    const m = rng.int(3);
    if (m === 0 && keys.length > 0) delete mutated[rng.pick(keys)];
    else if (m === 1) mutated[rng.pick(["extra", "SQL", "x"])] = randomJsonValue(rng);
    else if (keys.length > 0) mutated[rng.pick(keys)] = randomJsonValue(rng);
    return JSON.stringify(mutated);
  }
  if (r < 0.7) {
    const text = JSON.stringify(good);
    return text.slice(0, rng.int(text.length));
  }
  if (r < 0.8) return JSON.stringify(randomJsonValue(rng));
  if (r < 0.9) return junk(rng);
  if (r < 0.95) return rng.pick(["", "   ", "\n"]);
  if (rng.next() < 0.5) return `${'{"a":'.repeat(300)}1${"}".repeat(300)}`;
  return JSON.stringify({ ...(good as object), padding: "p".repeat(50_000) });
}

function randomAction(rng: Rng, target: Target, toolNames: string[]): { action: AgentTurn; calls: number } {
  const r = rng.next();
  if (r < 0.03) {
    const garbage = [null, 42, "text", [], { content: 1, toolCalls: [] }, { content: "", toolCalls: [{ id: 1 }] }, { content: "", toolCalls: "x" }, { toolCalls: [] }];
    return { action: rng.pick(garbage) as unknown as AgentTurn, calls: 1 };
  }
  if (r < 0.07) return { action: { content: junk(rng), toolCalls: [] }, calls: 1 };
  const n = 1 + rng.int(3);
  const toolCalls = [];
  for (let i = 0; i < n; i++) {
    const p = rng.next();
    const real = rng.pick(toolNames);
    const name = p < 0.8 ? real : p < 0.9 ? junk(rng, 12) : rng.pick([real.toUpperCase(), ` ${real}`, "", "a".repeat(300)]);
    toolCalls.push({ id: `call_${i}`, name, arguments: randomArguments(rng, target, real) });
  }
  return { action: { content: rng.next() < 0.5 ? "" : junk(rng), toolCalls }, calls: n };
}

function sqliteChildren(): number {
  try {
    return execFileSync("pgrep", ["-P", String(process.pid), "-f", "sqlite-child"], { encoding: "utf8" }).split("\n").filter(Boolean).length;
  } catch {
    return 0;
  }
}

let store: Petstore;
let targets: Target[] = [];
beforeAll(async () => {
  store = await startPetstore();
  targets = [functionTarget(), openApiTarget(store), await sqliteTarget(), await mcpTarget()];
});
afterAll(async () => {
  for (const t of targets) await t.close();
  await store?.close();
});

it(`survives ${MIN_ACTIONS} random and malformed actions across every tool source, with no state leaking between episodes`, async () => {
  const rng = new Rng(SEED);
  const stats = new Map(targets.map((t) => [t.name, { actions: 0, steps: 0, episodes: 0, errors: 0, terminated: 0, ms: 0 }]));
  let total = 0;
  const KINDS = new Set(["malformed_json", "unknown_tool", "invalid_arguments", "tool_error", "timeout"]);
  const started = Date.now();
  while (total < MIN_ACTIONS) {
    for (const target of targets) {
      const s = stats.get(target.name)!;
      const t0 = Date.now();
      const trng = rng.fork(s.episodes + total);
      await target.env.reset({ seed: trng.int(2 ** 31) });
      s.episodes++;
      await target.checkFresh();
      const toolNames = target.env.hooks.tools.map((t) => t.name);
      const steps = 1 + trng.int(MAX_STEPS_PER_EPISODE);
      for (let i = 0; i < steps; i++) {
        const { action, calls } = randomAction(trng, target, toolNames);
        let result;
        try {
          result = await target.env.step(action);
        } catch (err) {
          throw new Error(`${target.name}: step threw on ${JSON.stringify(action)?.slice(0, 500)}: ${(err as Error).stack}`);
        }
        const [obs, reward, terminated, truncated, info] = result;
        total += calls;
        s.actions += calls;
        s.steps++;
        expect(target.env.observationSpace.contains(obs), `${target.name}: observation outside the space`).toBe(true);
        expect(Number.isFinite(reward)).toBe(true);
        expect(typeof terminated).toBe("boolean");
        expect(truncated).toBe(false);
        const errors = (info.toolErrors ?? []) as { kind: string; message: string }[];
        for (const e of errors) {
          expect(KINDS.has(e.kind), e.kind).toBe(true);
          expect(e.message.length).toBeGreaterThan(10);
        }
        const toolMessages = (obs as ChatObservation).messages.filter((m) => m.role === "tool");
        if (toolMessages.length > 0) expect(toolMessages.filter((m) => m.role === "tool" && m.isError).length).toBe(errors.length);
        s.errors += errors.length;
        if (terminated) {
          s.terminated++;
          await expect(target.env.step(action)).rejects.toThrow(/after the episode ended/);
          break;
        }
      }
      s.ms += Date.now() - t0;
    }
  }
  const elapsed = (Date.now() - started) / 1000;
  console.log(`fuzz: ${total} actions in ${elapsed.toFixed(1)} s (seed ${SEED})`);
  console.table(Object.fromEntries(stats));
  expect(total).toBeGreaterThanOrEqual(MIN_ACTIONS);
  for (const s of stats.values()) {
    expect(s.episodes).toBeGreaterThan(50);
    expect(s.errors).toBeGreaterThan(100);
  }
  for (const t of targets) await t.close();
  targets = [];
  await new Promise((r) => setTimeout(r, 200));
  expect(sqliteChildren()).toBe(0);
}, 120_000);
