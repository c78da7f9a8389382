/**
 * The sql suite's scripted expert: explores the database the way an agent should (list the tables,
 * describe the ones the question needs), runs the gold SQL as a query to see its result, then submits
 * it. It acts only through the env's tools. It is not a text-to-SQL model: it knows the gold query.
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
