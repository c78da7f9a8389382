/**
 * The restapi suite (modeled on ToolBench): registers `sinkflex/restapi-v0` with the gym registry and
 * the suite (its scripted expert and replay) with the suite list. The env itself is in `env.ts`.
 */
import { register } from "../../gym/index.js";
import { SEED_RULE, TASK_INDEX_RESET_OPTIONS, type ClientOptionRules } from "../../gym/index.js";
import { registerSuite, replayWithExpert, type ReplayOptions, type ReplayReport, type Suite } from "../suite.js";
import { createRestApiEnv, RESTAPI_ENV_ID, type RestApiEnvOptions } from "./env.js";
import { RestApiExpert, wrongAnswer } from "./expert.js";
import { FAULT_KINDS } from "./server.js";
import { restTaskKinds, type RestTask } from "./tasks.js";

export { createRestApiEnv, RESTAPI_ENV_ID, RESTAPI_SYSTEM_PROMPT, RestApiEnv, type RestApiEnvOptions, type RestApiState, type RestFaultOptions } from "./env.js";
export { RestApiExpert, valueAt } from "./expert.js";
export { RestWorld, TODAY } from "./world.js";
export { ENDPOINTS, handleRequest, restApiDocument } from "./api.js";
export { startRestApiServer, FAULT_KINDS, type FaultKind, type FaultSchedule, type RestApiServer } from "./server.js";
export { generateRestTasks, restTaskKinds, LEVELS, type RestTask, type GoldCall } from "./tasks.js";
export { answerMatches, chainProgress, firstNumber, normalizeText } from "./answer.js";

/** Plays the scripted expert over the task set (the suite has no separate gold trajectories); all must succeed. */
export async function replayRestApi(envId: string, options: ReplayOptions): Promise<ReplayReport> {
  if (envId !== RESTAPI_ENV_ID) throw new Error(`the restapi suite has no env "${envId}"; use ${RESTAPI_ENV_ID}`);
  if (options.tasks || options.dbDir || options.games) throw new Error("the restapi suite generates its world and tasks from a seed; it takes no --tasks, --db-dir or --games");
  const env = await createRestApiEnv();
  return replayWithExpert(env, envId, options, (task) => `${task.id} (${task.kind})`);
}

export const restApiSuite: Suite = {
  name: "restapi",
  envIds: [RESTAPI_ENV_ID],
  createExpert: (_envId, task) => new RestApiExpert(task as RestTask),
  wrongAnswer: (_envId, task) => wrongAnswer(task as RestTask),
  replay: replayRestApi,
};

let registered = false;

/** What a remote client of `envs serve` may set (see docs/remote-protocol.md); task generation is bounded. */
const CLIENT_OPTIONS: ClientOptionRules = {
  session: {
    seed: SEED_RULE,
    taskSeed: SEED_RULE,
    // The demo's recipe asks for 12,000 tasks; at 20,000 a session's task set takes under 0.5 s and a few MB.
    count: { type: "integer", min: 1, max: 20_000 },
    levels: { type: "list", item: { type: "enum", values: [1, 2, 3, 4] }, maxItems: 4 },
    taskFaults: { type: "list", item: { type: "enum", values: FAULT_KINDS }, maxItems: 8 },
    requestTimeoutMs: { type: "integer", min: 100, max: 10_000 },
    tools: { type: "enum", values: ["all", "used"] },
    wideValues: { type: "boolean" },
    kinds: { type: "list", item: { type: "enum", values: [...new Set(Object.values(restTaskKinds()).flat())] }, maxItems: 64 },
  },
  reset: TASK_INDEX_RESET_OPTIONS,
};

export function registerRestApiSuite(): void {
  if (registered) return;
  registered = true;
  register(RESTAPI_ENV_ID, (options) => createRestApiEnv(options as RestApiEnvOptions), {
    suite: "restapi",
    description: "ToolBench-style questions over a local HTTP API (28 endpoints, 8 services, OpenAPI tools); 1-4 chained calls; answer correctness; optional faults.",
    taskCount: 120,
    maxEpisodeSteps: 20,
    clientOptions: CLIENT_OPTIONS,
  });
  registerSuite(restApiSuite);
}
