/**
 * The crm suite's scripted expert: solves each task type the way an analyst would, through the env's
 * own tools (the REST API operations and the read-only SQL tool), then submits the answer it read off
 * the tool results. It knows the task's type and parameters (which product, which period), never its
 * answer. It is not a language model: its reading of transcripts is a fixed set of rules.
 * `wrongAnswer` is the same play with a changed final answer (`envs replay --wrong`).
 */
import type { AgentTurn, ChatObservation, ToolCall } from "../../core/index.js";
import { changeArg, offByOne, withChangedCall, type Expert } from "../suite.js";
import type { CrmTask } from "./tasks.js";

type Step = (results: string[]) => { content: string; calls: [string, Record<string, unknown>][] } | { answer: string };

const lit = (s: string | number) => `'${String(s).replace(/'/g, "''")}'`;

/** The first cell of the first row of a sql_query result ("col | col\nv | v\n(1 row)"). */
export function firstCell(result: string): string {
  const row = result.split("\n")[1];
  if (row === undefined || row.startsWith("(")) throw new Error(`the query returned no rows: ${result.slice(0, 200)}`);
  return row.split(" | ")[0]!;
}

function json(result: string): any {
  try {
    return JSON.parse(result);
  } catch {
    throw new Error(`the tool did not return JSON: ${result.slice(0, 200)}`);
  }
}

function sqlStep(content: string, sql: string): Step[] {
  return [() => ({ content, calls: [["sql_query", { sql }]] }), ([r]) => ({ answer: firstCell(r!) })];
}

function plan(task: CrmTask): Step[] {
  const p = task.params;
  switch (task.type) {
    case "knowledge_qa":
      return [
        () => ({ content: "Let me find the product's facts in the knowledge base.", calls: [["searchKnowledge", { query: p.product, kind: "product" }]] }),
        ([r]) => {
          const body = (json(r!).articles as { body: string }[]).map((a) => a.body).join(" ");
          const m = /warranty period is (\d+) months/.exec(body);
          if (!m) throw new Error("no warranty period in the articles found");
          return { answer: m[1]! };
        },
      ];
    case "entity_disambiguation":
      return [
        () => ({ content: `Let me look up every contact named ${p.name}.`, calls: [["searchContacts", { name: p.name }]] }),
        ([r]) => {
          const c = (json(r!).contacts as { account_name: string; email: string }[]).find((x) => x.account_name === p.account);
          if (!c) throw new Error(`no ${p.name} at ${p.account}`);
          return { answer: c.email };
        },
      ];
    case "transfer_count":
      return [
        () => ({ content: "Let me read the case's history.", calls: [["getCase", { case_id: p.caseId }]] }),
        ([r]) => ({ answer: String((json(r!).history as { event: string }[]).filter((e) => e.event === "Transferred").length) }),
      ];
    case "top_issue":
      return sqlStep(
        "I'll count the cases per issue for that product and period.",
        `SELECT i.name, COUNT(*) AS cases FROM cases c JOIN issues i ON i.id = c.issue_id JOIN products p ON p.id = c.product_id ` +
          `WHERE p.name = ${lit(p.product!)} AND substr(c.created_at, 1, 10) BETWEEN ${lit(p.from!)} AND ${lit(p.to!)} GROUP BY i.name ORDER BY COUNT(*) DESC LIMIT 1`,
      );
    case "busiest_month":
      return sqlStep(
        "I'll count the account's cases per month.",
        `SELECT substr(c.created_at, 1, 7) AS month, COUNT(*) AS cases FROM cases c JOIN accounts a ON a.id = c.account_id ` +
          `WHERE a.name = ${lit(p.account!)} AND c.created_at LIKE '2024-%' GROUP BY substr(c.created_at, 1, 7) ORDER BY COUNT(*) DESC LIMIT 1`,
      );
    case "top_account_revenue":
      return sqlStep(
        "I'll sum the delivered order amounts per account for that product and period.",
        `SELECT a.name, SUM(o.quantity * o.unit_price) AS amount FROM orders o JOIN accounts a ON a.id = o.account_id JOIN products p ON p.id = o.product_id ` +
          `WHERE p.name = ${lit(p.product!)} AND o.status = 'Delivered' AND substr(o.ordered_at, 1, 10) BETWEEN ${lit(p.from!)} AND ${lit(p.to!)} ` +
          `GROUP BY a.name ORDER BY SUM(o.quantity * o.unit_price) DESC LIMIT 1`,
      );
    case "handle_time":
      return sqlStep(
        "I'll average the handle time per agent over the cases closed in that period.",
        `SELECT g.name, AVG(c.handle_minutes) AS avg_minutes, COUNT(*) AS closed FROM cases c JOIN agents g ON g.id = c.agent_id ` +
          `WHERE c.status = 'Closed' AND substr(c.closed_at, 1, 10) BETWEEN ${lit(p.from!)} AND ${lit(p.to!)} ` +
          `GROUP BY g.name HAVING COUNT(*) >= 3 ORDER BY AVG(c.handle_minutes) ASC LIMIT 1`,
      );
    case "case_routing":
      return [
        () => ({ content: "First, which issue category does the new case belong to?", calls: [["listIssues", {}]] }),
        ([r]) => {
          const issue = (json(r!).issues as { id: number; description: string }[]).find((i) => i.description === p.issueDescription);
          if (!issue) throw new Error("no issue matches the case description");
          return {
            content: `It is issue ${issue.id}. Now the agents with the most closed cases of that issue.`,
            calls: [
              [
                "sql_query",
                {
                  sql:
                    `SELECT g.name, COUNT(*) AS closed_cases, AVG(c.handle_minutes) AS avg_minutes FROM cases c JOIN agents g ON g.id = c.agent_id ` +
                    `WHERE c.issue_id = ${issue.id} AND c.status = 'Closed' GROUP BY g.name ORDER BY COUNT(*) DESC, AVG(c.handle_minutes) ASC LIMIT 3`,
                },
              ],
            ],
          };
        },
        ([r]) => ({ answer: firstCell(r!) }),
      ];
    case "policy_violation":
      return [
        () => ({
          content: "Let me read the support policies and the case transcript.",
          calls: [
            ["searchKnowledge", { kind: "policy" }],
            ["getCaseTranscript", { case_id: p.caseId }],
          ],
        }),
        ([policiesText, transcriptText]) => {
          const policies = json(policiesText!).articles as { title: string; body: string }[];
          const said = (json(transcriptText!).messages as { sender: string; text: string }[]).filter((m) => m.sender === "agent").map((m) => m.text);
          const titleAbout = (word: RegExp) => policies.find((a) => word.test(a.body))?.title;
          for (const text of said) {
            const days = /(\d+) days ago/.exec(text);
            if (days && Number(days[1]) > 30 && /refund/i.test(text)) return { answer: titleAbout(/refund/i)! };
            const discount = /(\d+)% discount/.exec(text);
            if (discount && Number(discount[1]) > 15) return { answer: titleAbout(/discount/i)! };
            if (/[\w.]+@[\w.]+\.\w+/.test(text)) return { answer: titleAbout(/disclose/i)! };
            if (/no need to verify/i.test(text)) return { answer: titleAbout(/verify/i)! };
          }
          return { answer: "None" };
        },
      ];
  }
}

export class CrmExpert implements Expert {
  private readonly steps: Step[];
  private turn = 0;

  constructor(task: CrmTask) {
    this.steps = plan(task);
  }

  act(obs: ChatObservation): AgentTurn {
    const n = this.turn++;
    const results = obs.messages.filter((m) => m.role === "tool").map((m) => m.content);
    const step = this.steps[Math.min(n, this.steps.length - 1)]!;
    let out: ReturnType<Step>;
    try {
      out = step(results);
    } catch (err) {
      out = { answer: `unknown (${(err as Error).message})` };
    }
    const toolCalls: ToolCall[] =
      "answer" in out
        ? [{ id: `call_${n}_0`, name: "submit_answer", arguments: JSON.stringify({ answer: out.answer }) }]
        : out.calls.map(([name, args], i) => ({ id: `call_${n}_${i}`, name, arguments: JSON.stringify(args) }));
    return { content: "answer" in out ? `The answer is ${out.answer}.` : out.content, toolCalls };
  }
}

/** The expert's play with the submitted answer changed (a number off by one, another id or name): it must score 0. */
export function wrongAnswer(task: CrmTask): Expert {
  const change = (value: unknown) => (value === "None" ? "Unknown" : offByOne(value));
  return withChangedCall(new CrmExpert(task), (call) => (call.name === "submit_answer" ? changeArg(call, "answer", change) : undefined));
}
