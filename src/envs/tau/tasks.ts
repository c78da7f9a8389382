/**
 * tau-bench task files: `{user_id, instruction, actions: [{name, kwargs}], outputs}` per task, loaded
 * from the bundled data (`train`, `dev`) or from any file of the same format. Task kwargs keep Python's
 * float/int distinction (see pyjson.ts). This file does not run tasks; `conform.ts` and `env.ts` do.
 */
import { join, resolve } from "node:path";
import { domainDir, readPyJson, type Domain } from "./db.js";

export interface TauAction {
  name: string;
  kwargs: Record<string, any>;
}

export interface TauTask {
  user_id: string;
  instruction: string;
  actions: TauAction[];
  outputs: string[];
  annotator?: string;
  /** Set on generated tasks: "easy" | "medium" | "hard". */
  difficulty?: string;
}

/** The bundled task sets of each domain. */
export const TASK_SETS: Record<Domain, string[]> = { retail: ["train", "dev"], airline: ["dev"] };

/** The bundled task file of a set, e.g. `<data>/tau-bench/retail/tasks_train.json`. */
export function taskFile(domain: Domain, set: string): string {
  if (!TASK_SETS[domain].includes(set)) {
    throw new Error(`the ${domain} domain has no "${set}" task set; use one of: ${TASK_SETS[domain].join(", ")}, "generated", or a tasksFile`);
  }
  return join(domainDir(domain), `tasks_${set}.json`);
}

/** The expected-outputs file that goes with a bundled task set. */
export function expectedFile(domain: Domain, set: string): string {
  return join(domainDir(domain), `expected_${set}.json`);
}

/** Loads and checks a task file; errors name the file and the bad task. */
export function loadTasks(path: string): TauTask[] {
  const data = readPyJson(resolve(path));
  if (!Array.isArray(data)) throw new Error(`${path}: expected a JSON array of tasks ({user_id, instruction, actions, outputs})`);
  data.forEach((t: any, i: number) => {
    if (!t || typeof t.user_id !== "string" || !Array.isArray(t.actions)) {
      throw new Error(`${path}: task ${i} lacks user_id (string) or actions (array); each task is {user_id, instruction, actions, outputs}`);
    }
    t.instruction ??= "";
    t.outputs ??= [];
    for (const a of t.actions) {
      if (typeof a?.name !== "string" || typeof a.kwargs !== "object") {
        throw new Error(`${path}: task ${i} has an action without {name, kwargs}`);
      }
    }
  });
  return data as TauTask[];
}
