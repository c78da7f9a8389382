/**
 * The restapi environment (`sinkflex/restapi-v0`), modeled on ToolBench: answer a question by calling
 * a real local HTTP API — 28 endpoints over eight services — through tools generated from its OpenAPI
 * document, then `submit_answer`.
 *
 * Per env: the world generated from `seed`, one HTTP server on 127.0.0.1 (closed on close), the tools
 * from the server's OpenAPI 3.1 document (tools/openapi) plus `submit_answer`. Per episode: a fresh
 * fault schedule on the server (faults drawn from the episode's seed, so they repeat). Faults reach
 * the agent as the tool's error message (HTTP 503, a timeout, a body that is not valid JSON); the
 * episode goes on. Reward: 1 when the submitted answer matches (answer.ts), else 0, with evidence; after
 * every step `info.progress`, how close the calls came to the gold chain (for reward rubrics).
 * This file is the wiring; world, endpoints, server, tasks and scoring are their own files.
 */
import { z } from "zod";
import { openApiTools } from "../../tools/index.js";
import { functionTool, type Tool } from "../../tools/index.js";
import { arrayTasks, ToolEnv, type Episode } from "../../tools/index.js";
import { answerMatches, chainProgress, firstNumber, normalizeText } from "./answer.js";
import { FAULT_KINDS, startRestApiServer, type FaultKind, type RestApiServer } from "./server.js";
import { generateRestTasks, type RestTask } from "./tasks.js";
import { RestWorld, TODAY } from "./world.js";
import { cachedTasks } from "../task-cache.js";

export const RESTAPI_ENV_ID = "sinkflex/restapi-v0";

export interface RestFaultOptions {
  /** Probability that an API request fails (0 to 1). */
  rate?: number;
  /** Which faults to draw from (all three by default). */
  kinds?: FaultKind[];
  /** Fail these requests of every episode (1 = its first API request). */
  plan?: { request: number; kind: FaultKind }[];
}

export interface RestApiEnvOptions {
  /** The world's seed (0 by default). */
  seed?: number;
  /** The task generator's seed (the world seed by default). */
  taskSeed?: number;
  /** Number of tasks (120 by default). */
  count?: number;
  /** Levels (number of calls, 1 to 4) to include; all by default. */
  levels?: number[];
  /** Faults for every episode. None by default. */
  faults?: RestFaultOptions;
  /** Give every task one planned fault, cycling over these kinds (per-task faults). */
  taskFaults?: FaultKind[];
  /** The HTTP request timeout of the API tools, in ms (2,000 by default); a `slow` fault answers after it. */
  requestTimeoutMs?: number;
  /**
   * Which API tools the agent sees: "all" 28 endpoints (the default), or "used": only those the task
   * set's gold chains call (a shorter prompt and an easier choice, for small models and curricula).
   */
  tools?: "all" | "used";
  /** Currency amounts, unit values and weekday dates from wide ranges (see RestTaskOptions.wideValues); false by default. */
  wideValues?: boolean;
  /** Only these task kinds (see RestTaskOptions.kinds); every kind by default. */
  kinds?: string[];
}

export interface RestApiState {
  answer?: string | number;
}

export const RESTAPI_SYSTEM_PROMPT = [
  "You answer questions by calling web APIs: weather, currency exchange, calendar, geography, stocks, flights, recipes and unit conversion.",
  `Today is ${TODAY}. Use the tools to look up every fact; chain calls when one answer is the input of the next.`,
  "Services sometimes fail (an error, a timeout, a garbled response): read the error and try the call again.",
  "When you know the answer, call submit_answer with the answer only (a number without units, or a short text). Submitting ends the episode.",
].join("\n");

const OPTION_KEYS = ["seed", "taskSeed", "count", "levels", "faults", "taskFaults", "requestTimeoutMs", "tools", "wideValues", "kinds"];

/** A ToolEnv that also stops its HTTP server on close. */
export class RestApiEnv extends ToolEnv<RestTask, RestApiState> {
  constructor(
    hooks: ConstructorParameters<typeof ToolEnv<RestTask, RestApiState>>[0],
    readonly server: RestApiServer,
    readonly world: RestWorld,
  ) {
    super(hooks);
  }

  override async close(): Promise<void> {
    await super.close();
    await this.server.close();
  }
}

function checkKinds(kinds: unknown, where: string): FaultKind[] {
  if (!Array.isArray(kinds) || kinds.some((k) => !FAULT_KINDS.includes(k))) {
    throw new Error(`${RESTAPI_ENV_ID}: ${where} must be a list of ${FAULT_KINDS.map((k) => `"${k}"`).join(", ")}; got ${JSON.stringify(kinds)}`);
  }
  return kinds as FaultKind[];
}

function checkFaults(f: unknown): RestFaultOptions | undefined {
  if (f === undefined) return undefined;
  if (typeof f !== "object" || f === null) throw new Error(`${RESTAPI_ENV_ID}: options.faults must be an object {rate, kinds, plan}`);
  const { rate, kinds, plan, ...rest } = f as Record<string, unknown>;
  if (Object.keys(rest).length) throw new Error(`${RESTAPI_ENV_ID}: unknown key(s) ${Object.keys(rest).join(", ")} in options.faults; the keys are rate, kinds, plan`);
  if (rate !== undefined && (typeof rate !== "number" || rate < 0 || rate > 1)) throw new Error(`${RESTAPI_ENV_ID}: options.faults.rate must be a number in [0, 1], got ${JSON.stringify(rate)}`);
  const out: RestFaultOptions = {};
  if (rate !== undefined) out.rate = rate as number;
  if (kinds !== undefined) out.kinds = checkKinds(kinds, "options.faults.kinds");
  if (plan !== undefined) {
    if (!Array.isArray(plan) || plan.some((p) => !Number.isInteger(p?.request) || p.request < 1 || !FAULT_KINDS.includes(p?.kind))) {
      throw new Error(`${RESTAPI_ENV_ID}: options.faults.plan must be a list of {request: 1, 2, ..., kind: "5xx" | "slow" | "malformed"}`);
    }
    out.plan = plan as RestFaultOptions["plan"];
  }
  return out;
}

function submitTool(): Tool<{ answer: string | number }, RestApiState> {
  return functionTool({
    name: "submit_answer",
    description: "Submit the final answer: a number (no units) or a short text. This ends the episode.",
    parameters: z.object({ answer: z.union([z.string(), z.number()]).describe("The answer, e.g. 23.4 or \"Tuesday\".") }),
    execute: ({ answer }, ctx: { state: RestApiState; finish(reason: string): void }) => {
      ctx.state.answer = answer;
      ctx.finish("submitted");
      return "Answer submitted. The episode ends.";
    },
  });
}

/** Generates the world and tasks, starts the API server and returns the env. */
export async function createRestApiEnv(options: RestApiEnvOptions = {}): Promise<RestApiEnv> {
  const unknown = Object.keys(options).filter((k) => !OPTION_KEYS.includes(k));
  if (unknown.length) throw new Error(`${RESTAPI_ENV_ID}: unknown option(s) ${unknown.join(", ")}; the options are ${OPTION_KEYS.join(", ")}`);
  const seed = options.seed ?? 0;
  if (!Number.isInteger(seed)) throw new Error(`${RESTAPI_ENV_ID}: options.seed must be an integer, got ${JSON.stringify(seed)}`);
  const requestTimeoutMs = options.requestTimeoutMs ?? 2_000;
  if (!Number.isInteger(requestTimeoutMs) || requestTimeoutMs < 50) throw new Error(`${RESTAPI_ENV_ID}: options.requestTimeoutMs must be an integer of at least 50, got ${JSON.stringify(requestTimeoutMs)}`);
  const faults = checkFaults(options.faults);
  const taskFaults = options.taskFaults === undefined ? undefined : checkKinds(options.taskFaults, "options.taskFaults");
  const count = options.count ?? 120;
  if (!Number.isInteger(count) || count < 1) throw new Error(`${RESTAPI_ENV_ID}: options.count must be a positive integer, got ${JSON.stringify(count)}`);

  const toolChoice = options.tools ?? "all";
  if (toolChoice !== "all" && toolChoice !== "used") throw new Error(`${RESTAPI_ENV_ID}: options.tools must be "all" or "used", got ${JSON.stringify(toolChoice)}`);

  const world = new RestWorld(seed);
  const wideValues = options.wideValues ?? false;
  if (typeof wideValues !== "boolean") throw new Error(`${RESTAPI_ENV_ID}: options.wideValues must be true or false, got ${JSON.stringify(wideValues)}`);
  const kinds = options.kinds;
  if (kinds !== undefined && (!Array.isArray(kinds) || kinds.some((k) => typeof k !== "string"))) throw new Error(`${RESTAPI_ENV_ID}: options.kinds must be a list of task kinds such as ["unit_convert"], got ${JSON.stringify(kinds)}`);
  const taskOptions = { count, seed: options.taskSeed ?? seed, levels: options.levels, faultKinds: taskFaults, ...(wideValues ? { wideValues } : {}), ...(kinds ? { kinds } : {}) };
  // The tasks depend on the world's seed and these options only (the world they read is the same).
  const tasks = cachedTasks("restapi", { worldSeed: seed, ...taskOptions }, () => generateRestTasks(world, taskOptions));
  const server = await startRestApiServer(world, { slowMs: requestTimeoutMs + 1_000 });
  let apiTools = openApiTools(server.document, { baseUrl: server.url, requestTimeoutMs });
  if (toolChoice === "used") {
    const used = new Set(tasks.flatMap((t) => t.chain.map((c) => c.tool)));
    apiTools = apiTools.filter((t) => used.has(t.name));
  }
  const tools: Tool<any, RestApiState>[] = [...apiTools, submitTool()];
  return new RestApiEnv(
    {
      name: "RestApiEnv",
      tasks: arrayTasks(tasks),
      tools,
      toolTimeoutMs: requestTimeoutMs + 2_000,
      metadata: { id: RESTAPI_ENV_ID, description: "ToolBench-style questions over a local HTTP API of 28 endpoints (OpenAPI tools); 1-4 chained calls; answer correctness.", seed },
      async open(task, rng) {
        const plan = [...(faults?.plan ?? []), ...(task.faults ?? [])];
        server.setFaults({ plan, rate: faults?.rate ?? 0, kinds: faults?.kinds, rng: rng.fork(0xfa17) });
        return {
          state: {},
          messages: [
            { role: "system", content: RESTAPI_SYSTEM_PROMPT },
            { role: "user", content: task.question },
          ],
        };
      },
      async score(episode: Episode<RestTask, RestApiState>) {
        const { task, state } = episode;
        const base = { taskId: task.id, kind: task.kind, level: task.level, expected: task.answer, requests: server.requests, faults: [...server.injected] };
        if (state.answer === undefined) return { reward: 0, evidence: { ...base, submitted: null, reason: "no answer was submitted (call submit_answer)" } };
        const match = answerMatches(task.answer, state.answer);
        const read = typeof task.answer === "number" ? (typeof state.answer === "number" ? state.answer : firstNumber(state.answer) ?? null) : normalizeText(String(state.answer));
        return { reward: match ? 1 : 0, evidence: { ...base, submitted: state.answer, read, match } };
      },
      progress({ task, state, messages }: Episode<RestTask, RestApiState>) {
        const calls = messages.flatMap((m) => (m.role === "assistant" ? (m.toolCalls ?? []) : []));
        return chainProgress(task.chain, calls, state.answer !== undefined && answerMatches(task.answer, state.answer));
      },
      dispose: () => server.setFaults({}),
    },
    server,
    world,
  );
}
