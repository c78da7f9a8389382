/**
 * The crm suite (modeled on CRMArena): registers `sinkflex/crm-v0` with the gym registry and the suite
 * (its scripted expert and replay) with the suite list. The env itself is in `env.ts`.
 */
import { register } from "../../gym/registry.js";
import { registerSuite, replayWithExpert, type ReplayOptions, type ReplayReport, type Suite } from "../suite.js";
import { createCrmEnv, CRM_ENV_ID, type CrmEnvOptions } from "./env.js";
import { CrmExpert } from "./expert.js";
import type { CrmTask } from "./tasks.js";

export { createCrmEnv, CRM_ENV_ID, CrmEnv, type CrmEnvOptions, type CrmState } from "./env.js";
export { CrmExpert } from "./expert.js";
export { generateCrmData, POLICIES, type CrmData } from "./generate.js";
export { generateCrmTasks, CRM_TASK_TYPES, type CrmTask, type CrmTaskType } from "./tasks.js";
export { startCrmServer, crmOpenApiDocument, type CrmServer } from "./server.js";
export { answersMatch, normalizeAnswer } from "./answer.js";

/** Plays the scripted expert over the task set (the crm suite has no separate gold actions). */
export async function replayCrm(envId: string, options: ReplayOptions): Promise<ReplayReport> {
  if (envId !== CRM_ENV_ID) throw new Error(`the crm suite has no env "${envId}"; use ${CRM_ENV_ID}`);
  if (options.tasks || options.dbDir) throw new Error("the crm suite generates its tasks and database from a seed; it takes no --tasks or --db-dir");
  const env = await createCrmEnv();
  return replayWithExpert(env, envId, options, (task) => `${task.id} (${task.type})`);
}

export const crmSuite: Suite = {
  name: "crm",
  envIds: [CRM_ENV_ID],
  createExpert: (_envId, task) => new CrmExpert(task as CrmTask),
  replay: replayCrm,
};

let registered = false;

export function registerCrmSuite(): void {
  if (registered) return;
  registered = true;
  register(CRM_ENV_ID, (options) => createCrmEnv(options as CrmEnvOptions), {
    suite: "crm",
    description: "CRMArena-style questions over a generated CRM: REST API (OpenAPI) + read-only SQL; exact-match answer.",
    maxEpisodeSteps: 30,
  });
  registerSuite(crmSuite);
}
