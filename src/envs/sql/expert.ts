/**
 * The sql suite's scripted expert: explores the database the way an agent should (list the tables,
 * describe the ones the question needs), runs the gold SQL as a query to see its result, then submits
 * it. It acts only through the env's tools. It is not a text-to-SQL model: it knows the gold query.
 * `wrongAnswer` is the same play submitting the gold query with a changed literal (`wrongSqls`).
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import type { Expert } from "../suite.js";
import type { SqlTask } from "./data.js";

type Phase = "list" | "describe" | "query" | "submit" | "done";

export class SqlExpert implements Expert {
  private phase: Phase = "list";
  private turn = 0;

  constructor(private readonly task: SqlTask) {}

  act(obs: ChatObservation): AgentTurn {
    const n = this.turn++;
    const call = (name: string, args: Record<string, unknown>, i = 0) => ({ id: `call_${n}_${i}`, name, arguments: JSON.stringify(args) });
    if (this.phase === "list") {
      this.phase = "describe";
      return { content: "Let me look at the tables of the database first.", toolCalls: [call("list_tables", {})] };
    }
    if (this.phase === "describe") {
      this.phase = "query";
      const toolText = obs.messages.find((m) => m.role === "tool")?.content ?? "";
      const listed = /Tables in [^:]*: (.*)/.exec(toolText)?.[1]?.split(", ") ?? [];
      const byLower = new Map(listed.map((t) => [t.toLowerCase(), t]));
      const tables = (this.task.tables.length ? this.task.tables : listed.slice(0, 2)).map((t) => byLower.get(t.toLowerCase()) ?? t);
      if (tables.length > 0) {
        return {
          content: `The question needs ${tables.join(" and ")}; let me see their columns.`,
          toolCalls: tables.map((table, i) => call("describe_table", { table }, i)),
        };
      }
    }
    if (this.phase === "query") {
      this.phase = "submit";
      return { content: "Let me check the result of my query.", toolCalls: [call("run_query", { sql: this.task.gold })] };
    }
    this.phase = "done";
    return { content: "The result answers the question; submitting the query.", toolCalls: [call("submit_sql", { sql: this.task.gold })] };
  }
}

/**
 * Wrong versions of the gold query, most plausible first: the first number outside quotes and names
 * moved on by one, the first string literal with a letter added, and last the result's row count plus
 * one instead of its rows (always different from the gold result).
 */
export function wrongSqls(gold: string): string[] {
  const out: string[] = [];
  const lexeme = /'(?:[^']|'')*'|"(?:[^"]|"")*"|`[^`]*`|\[[^\]]*\]|[A-Za-z_][A-Za-z0-9_$]*|(\d+(?:\.\d+)?)/g;
  let number: RegExpExecArray | undefined;
  let string: RegExpExecArray | undefined;
  for (let m = lexeme.exec(gold); m; m = lexeme.exec(gold)) {
    if (m[1] !== undefined) number ??= m;
    else if (m[0].startsWith("'")) string ??= m;
  }
  if (number) out.push(`${gold.slice(0, number.index)}${Number(number[1]) + 1}${gold.slice(number.index + number[0].length)}`);
  if (string) out.push(`${gold.slice(0, string.index)}${string[0].slice(0, -1)}x'${gold.slice(string.index + string[0].length)}`);
  out.push(`SELECT COUNT(*) + 1 AS n FROM (${gold.trim().replace(/;\s*$/, "")}) AS wrong_answer`);
  return out;
}

/**
 * The expert's play, but at the end it tries `wrongSqls(gold)` with run_query, in order, and submits
 * the first whose result differs from the gold query's (a changed literal can select the same rows):
 * the verifier must score it 0.
 */
export function wrongAnswer(task: SqlTask): Expert {
  const expert = new SqlExpert(task);
  const candidates = wrongSqls(task.gold);
  let goldResult: string | undefined;
  let tried = -1;
  const lastTool = (obs: ChatObservation) => [...obs.messages].reverse().find((m) => m.role === "tool")?.content;
  const call = (name: string, sql: string): AgentTurn => ({ content: "", toolCalls: [{ id: `call_wrong_${tried}`, name, arguments: JSON.stringify({ sql }) }] });
  return {
    async act(obs) {
      if (tried < 0) {
        const turn = await expert.act(obs);
        if (turn.toolCalls[0]?.name !== "submit_sql") return turn;
        goldResult = lastTool(obs);
        tried = 0;
        return call("run_query", candidates[0]!);
      }
      if (tried >= candidates.length) return { content: "Submitted.", toolCalls: [] };
      const differs = lastTool(obs) !== goldResult;
      if (differs || tried === candidates.length - 1) {
        const sql = candidates[tried]!;
        tried = candidates.length;
        return call("submit_sql", sql);
      }
      tried++;
      return call("run_query", candidates[tried]!);
    },
  };
}
