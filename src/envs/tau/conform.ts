/**
 * Conformance: replays the gold actions of every task of a task file on a fresh database and checks
 * each action's output string and the final changed records against an expected file
 * (`{domain, tasks: [{index, action_outputs, changed_records}]}`). Used by the tests and by
 * `sinkflex envs conform`. It does not score agents; `reward.ts` does.
 */
import { resolve } from "node:path";
import { loadBase, readPyJson, TauDb, type Domain } from "./db.js";
import { firstDifference, pyEqual } from "./pyjson.js";
import { loadTasks, type TauTask } from "./tasks.js";
import { runAction } from "./tools.js";

export interface ConformMismatch {
  task: number;
  /** Which action (index into the task's actions), or "records" for the final state. */
  where: number | "records" | "count";
  expected: unknown;
  actual: unknown;
  detail: string;
}

export interface ConformReport {
  domain: Domain;
  total: number;
  matched: number;
  mismatches: ConformMismatch[];
}

/** Replays a task's gold actions on a fresh view of the base; returns the outputs and the database. */
export function replayGold(domain: Domain, task: TauTask, dbDir?: string): { outputs: (string | null)[]; db: TauDb } {
  const db = new TauDb(domain, loadBase(domain, dbDir));
  const outputs = task.actions.map((a) => (a.name === "transfer_to_human_agents" ? null : runAction(domain, db, a.name, a.kwargs)));
  return { outputs, db };
}

function detectDomain(expected: any, tasksFile: string): Domain {
  const d = expected?.domain ?? (/airline/.test(tasksFile) ? "airline" : /retail/.test(tasksFile) ? "retail" : undefined);
  if (d !== "retail" && d !== "airline") {
    throw new Error(`cannot tell the domain of ${tasksFile}: the expected file has no "domain" of "retail" or "airline"`);
  }
  return d;
}

/** Checks a task file against its expected file; `domain` defaults to the expected file's. */
export function conform(tasksFile: string, expectedFile: string, options: { domain?: Domain; dbDir?: string } = {}): ConformReport {
  const tasks = loadTasks(tasksFile);
  const expected = readPyJson(resolve(expectedFile));
  const domain = options.domain ?? detectDomain(expected, tasksFile);
  const rows: any[] = Array.isArray(expected) ? expected : expected?.tasks;
  if (!Array.isArray(rows)) throw new Error(`${expectedFile}: expected {domain, tasks: [{action_outputs, changed_records}]}`);
  const mismatches: ConformMismatch[] = [];
  if (rows.length !== tasks.length) {
    mismatches.push({ task: -1, where: "count", expected: rows.length, actual: tasks.length, detail: `${expectedFile} has ${rows.length} entries for ${tasks.length} tasks` });
  }
  let matched = 0;
  tasks.forEach((task, i) => {
    const row = rows.find((r) => r?.index === i) ?? rows[i];
    if (!row) return;
    const { outputs, db } = replayGold(domain, task, options.dbDir);
    let ok = true;
    const want: (string | null)[] = row.action_outputs ?? [];
    for (let k = 0; k < Math.max(want.length, outputs.length); k++) {
      if (want[k] !== outputs[k]) {
        ok = false;
        mismatches.push({ task: i, where: k, expected: want[k], actual: outputs[k], detail: `action ${k} (${task.actions[k]?.name ?? "missing"}): output differs` });
      }
    }
    const changed = db.changedRecords();
    if (!pyEqual(changed, row.changed_records ?? {})) {
      ok = false;
      mismatches.push({ task: i, where: "records", expected: row.changed_records, actual: changed, detail: `changed records differ at ${firstDifference(row.changed_records ?? {}, changed)}` });
    }
    if (ok) matched++;
  });
  return { domain, total: tasks.length, matched, mismatches };
}
