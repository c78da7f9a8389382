/**
 * The retail and airline envs (`sinkflex/tau-retail-v0`, `sinkflex/tau-airline-v0`) as `ToolEnv`s:
 * the policy document is the system prompt, the benchmark's tools are the agent's tools, a turn
 * without tool calls is a message to the user (who answers through a simulator), and the episode ends
 * when the user writes `###STOP###` or the agent calls `transfer_to_human_agents`. Each episode gets
 * its own copy-on-write view of the database (loaded once per process). The reward is `scoreTau`.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { arrayTasks, ToolEnv } from "../../tools/index.js";
import { domainDir, loadBase, TauDb, type Domain } from "./db.js";
import { generateTasks, type Difficulty } from "./generate.js";
import { scoreTau } from "./reward.js";
import { loadTasks, taskFile, type TauTask } from "./tasks.js";
import { agentTools, type TauState } from "./tools.js";
import { LlmUser, ScriptedUser, STOP, type LlmUserOptions, type UserSimulator } from "./user.js";

export interface TauEnvOptions {
  /** "train" | "dev" (bundled files; airline has only "dev") or "generated". */
  taskSet?: string;
  /** A task file in the benchmark's format; overrides taskSet. */
  tasksFile?: string;
  /** Generated tasks: "easy" (1 change), "medium" (2-3), "hard" (4+) or "mixed". */
  difficulty?: Difficulty | "mixed";
  /** Generated tasks: how many, and the seed they are drawn from. */
  count?: number;
  taskSeed?: number;
  /** A folder with the domain's `<collection>.json` files instead of the bundled database. */
  dbDir?: string;
  /** "scripted" (default) or "llm" (an OpenAI-compatible endpoint, see `userLlm`). */
  user?: "scripted" | "llm";
  userLlm?: LlmUserOptions;
}

export interface TauEpisodeState extends TauState {
  user: UserSimulator;
}

const DEFAULT_SET: Record<Domain, string> = { retail: "train", airline: "dev" };
const policyCache = new Map<Domain, string>();

/** The domain's policy document (the agent's system prompt). */
export function policyOf(domain: Domain): string {
  let policy = policyCache.get(domain);
  if (!policy) {
    policy = readFileSync(join(domainDir(domain), "policy.md"), "utf8");
    policyCache.set(domain, policy);
  }
  return policy;
}

/** The task list the options select. */
export function selectTasks(domain: Domain, options: TauEnvOptions): TauTask[] {
  if (options.tasksFile) return loadTasks(options.tasksFile);
  const set = options.taskSet ?? DEFAULT_SET[domain];
  if (set === "generated") {
    return generateTasks(domain, {
      count: options.count ?? 200,
      seed: options.taskSeed ?? 1,
      difficulty: options.difficulty ?? "mixed",
      dbDir: options.dbDir,
    });
  }
  return loadTasks(taskFile(domain, set));
}

function checkOptions(options: Record<string, unknown>): TauEnvOptions {
  const known = ["taskSet", "tasksFile", "difficulty", "count", "taskSeed", "dbDir", "user", "userLlm"];
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw new Error(`unknown tau env option "${key}"; known options: ${known.join(", ")}`);
  }
  if (options.user !== undefined && options.user !== "scripted" && options.user !== "llm") {
    throw new Error(`option user must be "scripted" or "llm", got ${JSON.stringify(options.user)}`);
  }
  const d = options.difficulty;
  if (d !== undefined && !["easy", "medium", "hard", "mixed"].includes(d as string)) {
    throw new Error(`option difficulty must be "easy", "medium", "hard" or "mixed", got ${JSON.stringify(d)}`);
  }
  return options as TauEnvOptions;
}

export function createTauEnv(domain: Domain, rawOptions: Record<string, unknown> = {}): ToolEnv<TauTask, TauEpisodeState> {
  const options = checkOptions(rawOptions);
  const base = loadBase(domain, options.dbDir);
  const tasks = selectTasks(domain, options);
  const policy = policyOf(domain);
  return new ToolEnv<TauTask, TauEpisodeState>({
    name: domain === "retail" ? "RetailEnv" : "AirlineEnv",
    tasks: arrayTasks(tasks),
    tools: agentTools(domain),
    // The benchmark shows tool results whole (a one-stop flight search can pass 25,000 characters).
    maxResultChars: 200_000,
    metadata: {
      description: `tau-bench ${domain}: help a simulated customer under the ${domain} policy; reward 1 when the final database equals the gold replay's and the required outputs were said`,
    },
    async open(task) {
      const user: UserSimulator = options.user === "llm" ? new LlmUser(task, options.userLlm) : new ScriptedUser(domain, task, base);
      const first = await user.start();
      return {
        state: { db: new TauDb(domain, base), calls: [], user },
        messages: [
          { role: "system", content: policy },
          { role: "user", content: first },
        ],
      };
    },
    async respond(episode, turn) {
      const reply = await episode.state.user.reply(turn.content, episode.state.calls);
      return { messages: [{ role: "user", content: reply }], done: reply.includes(STOP) };
    },
    async score(episode) {
      return scoreTau(episode.task, episode.state.db, episode.messages, options.dbDir);
    },
  });
}
