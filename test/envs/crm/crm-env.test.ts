/**
 * The CRM env over a real generated SQLite database and a real HTTP API on 127.0.0.1: deterministic
 * data and tasks, the API and its OpenAPI document, exact-match reward (right answers 1, wrong ones 0),
 * the read-only SQL tool, the scripted expert on every task, clean close.
 */
import Database from "better-sqlite3";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTurn } from "../../../src/core/index.js";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import {
  answersMatch,
  createCrmEnv,
  CRM_ENV_ID,
  CRM_TASK_TYPES,
  generateCrmData,
  generateCrmTasks,
  registerCrmSuite,
  type CrmEnv,
  type CrmTask,
} from "../../../src/envs/crm/index.js";
import { ensureSqliteFile } from "../../../src/envs/crm/store.js";

registerCrmSuite();

const call = (name: string, args: Record<string, unknown>): AgentTurn => ({ content: "", toolCalls: [{ id: "c", name, arguments: JSON.stringify(args) }] });
const submit = (answer: string) => call("submit_answer", { answer });

let cacheDir: string;
let env: CrmEnv;
beforeAll(async () => {
  cacheDir = mkdtempSync(join(tmpdir(), "sinkflex-crm-test-"));
  env = await createCrmEnv({ cacheDir });
});
afterAll(async () => {
  await env.close();
  rmSync(cacheDir, { recursive: true, force: true });
});

async function answer(taskIndex: number, text: string) {
  await env.reset({ seed: 0, options: { taskIndex } });
  const [, reward, terminated, , info] = await env.step(submit(text));
  expect(terminated).toBe(true);
  return { reward, evidence: info.evidence as Record<string, unknown> };
}

describe("data and tasks", () => {
  it("are deterministic per seed, and differ between seeds", () => {
    const a = generateCrmData(3);
    const b = generateCrmData(3);
    expect(JSON.stringify(a, (_k, v) => (v instanceof Map ? [...v] : v))).toBe(JSON.stringify(b, (_k, v) => (v instanceof Map ? [...v] : v)));
    expect(generateCrmData(4).cases).not.toEqual(a.cases);
    expect(generateCrmTasks(a, { count: 30, seed: 1 })).toEqual(generateCrmTasks(b, { count: 30, seed: 1 }));
    const ts = generateCrmTasks(a, { count: 45, seed: 1 });
    expect(new Set(ts.map((t) => t.type)).size).toBe(9);
    expect(generateCrmTasks(a, { count: 12, seed: 1, levels: [1] }).every((t) => t.level === 1)).toBe(true);
    expect(() => generateCrmTasks(a, { count: 5, seed: 1, levels: [7] })).toThrow(/level 7/);
  });

  it("the SQLite file holds exactly the generated records, and the task answers agree with SQL over it", () => {
    const data = generateCrmData(0);
    const db = new Database(ensureSqliteFile(data, cacheDir), { readonly: true });
    try {
      expect(db.prepare("SELECT COUNT(*) FROM cases").pluck().get()).toBe(data.cases.length);
      expect(db.prepare("SELECT * FROM cases WHERE id = 7").get()).toEqual(data.cases[6]);
      const tasks = generateCrmTasks(data, { count: 90, seed: 0 });
      for (const t of tasks.filter((x) => x.type === "busiest_month")) {
        const rows = db
          .prepare("SELECT substr(c.created_at, 1, 7) m, COUNT(*) n FROM cases c JOIN accounts a ON a.id = c.account_id WHERE a.name = ? GROUP BY m ORDER BY n DESC LIMIT 2")
          .all(t.params.account) as { m: string; n: number }[];
        expect(rows[0]!.m).toBe(t.answer);
        expect(rows[0]!.n).toBeGreaterThan(rows[1]?.n ?? 0);
      }
      for (const t of tasks.filter((x) => x.type === "transfer_count")) {
        expect(String(db.prepare("SELECT COUNT(*) FROM case_history WHERE case_id = ? AND event = 'Transferred'").pluck().get(t.params.caseId))).toBe(t.answer);
      }
    } finally {
      db.close();
    }
  });
});

describe("the HTTP API", () => {
  it("serves its OpenAPI 3.1 document and the data, with clear errors", async () => {
    const base = env.server.url;
    expect(base).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const doc = (await (await fetch(`${base}/openapi.json`)).json()) as any;
    expect(doc.openapi).toBe("3.1.0");
    expect(Object.keys(doc.paths).length).toBeGreaterThanOrEqual(12);
    const c = (await (await fetch(`${base}/cases/5`)).json()) as any;
    expect(c.id).toBe(5);
    expect(c.history[0].event).toBe("Created");
    const list = (await (await fetch(`${base}/cases?status=Closed&created_from=2024-03-01&created_to=2024-03-31&limit=500`)).json()) as any;
    expect(list.total).toBe(list.cases.length);
    expect(list.cases.every((x: { status: string; created_at: string }) => x.status === "Closed" && x.created_at.startsWith("2024-03"))).toBe(true);
    const bad = await fetch(`${base}/cases?agent_id=abc`);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as any).error).toMatch(/agent_id.*positive integer/);
    expect((await fetch(`${base}/cases/99999`)).status).toBe(404);
    expect((await fetch(`${base}/cases/1`, { method: "DELETE" })).status).toBe(405);
  });

  it("is what the agent's tools call", async () => {
    const [obs] = await env.reset({ seed: 0, options: { taskIndex: 0 } });
    const names = obs.tools!.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(["listCases", "getCase", "getCaseTranscript", "searchContacts", "searchKnowledge", "sql_query", "describe_table", "submit_answer"]));
    const [o] = await env.step(call("getCaseTranscript", { case_id: 3 }));
    const body = JSON.parse(o.messages[0]!.content);
    expect(body.messages[0].sender).toBe("customer");
    const [o2] = await env.step(call("listCases", { agent_id: "x" }));
    expect(o2.messages[0]).toMatchObject({ isError: true });
  });
});

describe("reward", () => {
  it("exact match after normalization; wrong answers score 0", async () => {
    const data = generateCrmData(0);
    const tasks = generateCrmTasks(data, { count: 90, seed: 0 });
    const first = (type: keyof typeof CRM_TASK_TYPES) => tasks.findIndex((t) => t.type === type);
    const wrongAgent = (t: CrmTask) => data.agents.find((a) => a.name !== t.answer)!.name;

    let i = first("case_routing");
    expect((await answer(i, `  ${tasks[i]!.answer.toUpperCase()}. `)).reward).toBe(1);
    expect((await answer(i, wrongAgent(tasks[i]!))).reward).toBe(0);
    i = first("handle_time");
    expect((await answer(i, `"${tasks[i]!.answer}"`)).reward).toBe(1);
    expect((await answer(i, wrongAgent(tasks[i]!))).reward).toBe(0);
    i = first("busiest_month");
    expect((await answer(i, tasks[i]!.answer)).reward).toBe(1);
    expect((await answer(i, tasks[i]!.answer.replace("-0", "-"))).reward).toBe(tasks[i]!.answer.includes("-0") ? 0 : 1);
    const other = tasks[i]!.answer === "2024-01" ? "2024-02" : "2024-01";
    const r = await answer(i, other);
    expect(r.reward).toBe(0);
    expect(r.evidence).toMatchObject({ expected: tasks[i]!.answer, submitted: other, match: false });
    i = first("transfer_count");
    expect((await answer(i, `${tasks[i]!.answer}.0`)).reward).toBe(1);
    expect((await answer(i, String(Number(tasks[i]!.answer) + 1))).reward).toBe(0);
    i = first("policy_violation");
    expect((await answer(i, tasks[i]!.answer === "None" ? "Discount limit policy" : "None")).reward).toBe(0);
    i = first("entity_disambiguation");
    const t = tasks[i]!;
    const namesake = data.contacts.find((c) => `${c.first_name} ${c.last_name}` === t.params.name && c.email !== t.answer)!;
    expect((await answer(i, namesake.email)).reward).toBe(0);
    expect(answersMatch("Gina Marino", "gina  marino")).toBe(true);
    expect(answersMatch("Gina Marino", "Gina Marin")).toBe(false);
  });

  it("no answer scores 0 with the reason", async () => {
    await env.reset({ seed: 0, options: { taskIndex: 1 } });
    const [, reward, terminated, , info] = await env.step({ content: "I am not sure.", toolCalls: [] });
    expect(terminated).toBe(true);
    expect(reward).toBe(0);
    expect((info.evidence as Record<string, unknown>).reason).toMatch(/no answer was submitted/);
  });
});

describe("the read-only SQL tool", () => {
  it("answers queries and refuses writes; the database is unchanged", async () => {
    await env.reset({ seed: 0, options: { taskIndex: 0 } });
    const [o] = await env.step(call("sql_query", { sql: "SELECT COUNT(*) AS n FROM cases" }));
    expect(o.messages[0]!.content).toBe("n\n480\n(1 row)");
    for (const sql of ["DELETE FROM cases", "UPDATE agents SET name = 'x'", "DROP TABLE cases", "INSERT INTO issues (id, name) VALUES (99, 'x')"]) {
      const [w] = await env.step(call("sql_query", { sql }));
      expect(w.messages[0]!.content, sql).toMatch(/read-only/);
    }
    const [after] = await env.step(call("sql_query", { sql: "SELECT COUNT(*) AS n FROM cases" }));
    expect(after.messages[0]!.content).toBe("n\n480\n(1 row)");
  });
});

describe("the scripted expert", () => {
  it("solves every task of the default set through the API and SQL tools", async () => {
    const n = env.metadata.taskCount!;
    expect(n).toBe(90);
    const used = new Set<string>();
    for (let i = 0; i < n; i++) {
      const ep = await runExpertEpisode(env, CRM_ENV_ID, { taskIndex: i });
      expect(ep.reward, `task ${i}: ${JSON.stringify(ep.info.evidence)}`).toBe(1);
      for (const m of ep.messages) if (m.role === "assistant") for (const c of m.toolCalls ?? []) used.add(c.name);
    }
    expect(used).toEqual(new Set(["sql_query", "searchKnowledge", "searchContacts", "getCase", "listIssues", "getCaseTranscript", "submit_answer"]));
  });

  it("same seed, same episode; close stops the server and is safe twice", async () => {
    const e = await createCrmEnv({ cacheDir, count: 9 });
    const [o1] = await e.reset({ seed: 5 });
    const s1 = await e.step(call("listAgents", {}));
    const [o2] = await e.reset({ seed: 5 });
    const s2 = await e.step(call("listAgents", {}));
    expect(o2).toEqual(o1);
    expect(s2).toEqual(s1);
    const url = e.server.url;
    await e.close();
    await e.close();
    await expect(fetch(`${url}/agents`)).rejects.toThrow();
    await expect(createCrmEnv({ level: 2 } as never)).rejects.toThrow(/unknown option\(s\) level/);
  });
});
