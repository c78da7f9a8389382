/**
 * The crm suite (modeled on CRMArena): registers `sinkflex/crm-v0` with the gym registry and the suite
 * (its scripted expert and replay) with the suite list. The env itself is in `env.ts`.
 */
import { register } from "../../gym/index.js";
import { SEED_RULE, TASK_INDEX_RESET_OPTIONS, type ClientOptionRules } from "../../gym/index.js";
import { registerSuite, replayWithExpert, type ReplayOptions, type ReplayReport, type Suite } from "../suite.js";
import { createCrmEnv, CRM_ENV_ID, type CrmEnvOptions } from "./env.js";
import { CrmExpert, wrongAnswer } from "./expert.js";
import { CRM_TASK_TYPES, type CrmTask } from "./tasks.js";

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
  wrongAnswer: (_envId, task) => wrongAnswer(task as CrmTask),
  replay: replayCrm,
};

let registered = false;

/**
 * What a remote client of `envs serve` may set (see docs/remote-protocol.md): never the database URL,
 * schema or cache folder, nor the dataset seed (each seed writes a new database).
 */
const CLIENT_OPTIONS: ClientOptionRules = {
  session: {
    taskSeed: SEED_RULE,
    count: { type: "integer", min: 1, max: 500 },
    levels: { type: "list", item: { type: "enum", values: [1, 2, 3] }, maxItems: 3 },
    types: { type: "list", item: { type: "enum", values: Object.keys(CRM_TASK_TYPES) }, maxItems: Object.keys(CRM_TASK_TYPES).length },
    maxRows: { type: "integer", min: 1, max: 1_000 },
  },
  reset: TASK_INDEX_RESET_OPTIONS,
};

export function registerCrmSuite(): void {
  if (registered) return;
  registered = true;
  register(CRM_ENV_ID, (options) => createCrmEnv(options as CrmEnvOptions), {
    suite: "crm",
    description: "CRMArena-style questions over a generated CRM: REST API (OpenAPI) + read-only SQL; exact-match answer.",
    maxEpisodeSteps: 30,
    clientOptions: CLIENT_OPTIONS,
  });
  registerSuite(crmSuite);
}
