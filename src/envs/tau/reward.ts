/**
 * The tau-bench reward: 1 only when the database after the episode equals the database after
 * replaying the task's gold actions on a fresh copy (compared canonically: key order aside, numbers by
 * value) and every required output appears in one of the agent's messages to the user
 * (case-insensitive, commas removed from the message); else 0. The evidence names the records that
 * differ and the outputs that were not said.
 */
import type { ChatMessage } from "../../core/index.js";
import type { Score } from "../../tools/index.js";
import { replayGold } from "./conform.js";
import { diffDbs, type TauDb } from "./db.js";
import type { TauTask } from "./tasks.js";

/** The agent's messages to the user: its turns without tool calls (the benchmark's `respond`). */
export function agentMessagesToUser(messages: readonly ChatMessage[]): string[] {
  return messages.filter((m) => m.role === "assistant" && !(m.toolCalls && m.toolCalls.length > 0)).map((m) => m.content);
}

/** True when `output` appears in one of the messages, as the benchmark checks it. */
export function outputSaid(output: string, messages: readonly string[]): boolean {
  const wanted = output.toLowerCase();
  return messages.some((m) => m.toLowerCase().replace(/,/g, "").includes(wanted));
}

export function scoreTau(task: TauTask, db: TauDb, messages: readonly ChatMessage[], dbDir?: string): Score {
  const gold = replayGold(db.domain, task, dbDir);
  const differingRecords = diffDbs(db, gold.db);
  const said = agentMessagesToUser(messages);
  const missingOutputs = task.outputs.filter((o) => !outputSaid(o, said));
  const dbMatch = differingRecords.length === 0;
  return {
    reward: dbMatch && missingOutputs.length === 0 ? 1 : 0,
    evidence: { dbMatch, differingRecords, requiredOutputs: task.outputs, missingOutputs },
  };
}
