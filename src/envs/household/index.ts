/**
 * The household suite (ALFWorld): registers `sinkflex/alfworld-v0` (the benchmark's games) and
 * `sinkflex/alfworld-gen-v0` (generated houses and tasks, levels 1-3) with the gym registry, and the
 * suite (scripted expert, gold replay) with the suite list. Called once from src/envs/index.ts.
 */
import type { AgentTurn } from "../../core/index.js";
import { make, register } from "../../gym/index.js";
import { SEED_RULE, TASK_INDEX_RESET_OPTIONS, type ClientOptionRules } from "../../gym/index.js";
import { registerSuite, runExpertEpisode, type ReplayOptions, type ReplayReport } from "../suite.js";
import { createHouseholdEnv } from "./env.js";
import { actTurn, HouseholdExpert, plan, wrongActions } from "./expert.js";
import { parseGoldTrajectory } from "./gold.js";
import { defaultGamesDir, listGames, loadGame, type HouseholdTask } from "./tasks.js";
import { readFileSync } from "node:fs";

export const ALFWORLD_ENV_ID = "sinkflex/alfworld-v0";
export const ALFWORLD_GEN_ENV_ID = "sinkflex/alfworld-gen-v0";
const GENERATED_COUNT = 300;

/** What a remote client of `envs serve` may set (see docs/remote-protocol.md): never the games folder. */
const CLIENT_OPTIONS: ClientOptionRules = {
  session: {
    source: { type: "enum", values: ["games", "generated"] },
    goldOnly: { type: "boolean" },
    includeUnsolvable: { type: "boolean" },
    // The demo's recipe asks for 12,000 tasks; at 20,000 a session's task set takes under 0.5 s and a few MB.
    count: { type: "integer", min: 1, max: 20_000 },
    taskSeed: SEED_RULE,
    difficulty: { type: "enum", values: [1, 2, 3] },
  },
  reset: TASK_INDEX_RESET_OPTIONS,
};

export function registerHousehold(): void {
  register(ALFWORLD_ENV_ID, (options) => createHouseholdEnv(options), {
    suite: "household",
    description: "ALFWorld household games (TextWorld-PDDL; the solvable ones unless includeUnsolvable): text commands through act; reward 1 when the goal holds.",
    maxEpisodeSteps: 50,
    options: { source: "games" },
    clientOptions: CLIENT_OPTIONS,
  });
  register(ALFWORLD_GEN_ENV_ID, (options) => createHouseholdEnv(options), {
    suite: "household",
    description: "Generated ALFWorld-style houses, six task types, levels 1-3 (option difficulty); reward 1 when the goal holds.",
    taskCount: GENERATED_COUNT,
    maxEpisodeSteps: 50,
    options: { source: "generated", count: GENERATED_COUNT, taskSeed: 1 },
    clientOptions: CLIENT_OPTIONS,
  });
  registerSuite({
    name: "household",
    envIds: [ALFWORLD_ENV_ID, ALFWORLD_GEN_ENV_ID],
    createExpert: (_envId, task) => {
      const game = loadGame(task as HouseholdTask);
      return new HouseholdExpert(plan(game), game);
    },
    wrongAnswer: (_envId, task) => wrongActions(loadGame(task as HouseholdTask)),
    replay: replayHousehold,
  });
}

/** Plays fixed commands through `act`, one per turn. */
class ScriptedCommands {
  private next = 0;
  constructor(private readonly commands: string[]) {}
  act(): AgentTurn {
    const command = this.commands[this.next++];
    if (command === undefined) return { content: "I have no further actions.", toolCalls: [] };
    return actTurn(command, `gold_${this.next}`);
  }
}

/**
 * `envs replay`. With `gold`: every game under `games` (or the bundled ones) that has a `gt_traj.txt`
 * is played with its gold commands through the env; every one must reach its goal. Without: the
 * scripted expert plays the games marked `solvable: true` (or the generated tasks); every one must succeed.
 */
async function replayHousehold(envId: string, options: ReplayOptions): Promise<ReplayReport> {
  if (options.tasks || options.dbDir) throw new Error("household: replay takes --games DIR (a folder of games), not --tasks or --db-dir");
  const generated = envId === ALFWORLD_GEN_ENV_ID;
  if (generated && (options.gold || options.games)) {
    throw new Error(`household: ${ALFWORLD_GEN_ENV_ID} has no gold trajectories or game folder; replay it without --gold/--games, or replay ${ALFWORLD_ENV_ID}`);
  }
  const gamesDir = options.games ?? defaultGamesDir();
  // Gold: every game with a gt_traj.txt; expert: every game marked solvable (the env's default set).
  const listing = options.gold ? { goldOnly: true } : { solvableOnly: true };
  const env = await make(envId, generated ? { maxEpisodeSteps: 1000 } : { games: gamesDir, goldOnly: options.gold === true, includeUnsolvable: options.gold === true, maxEpisodeSteps: 1000 });
  const failures: ReplayReport["failures"] = [];
  let indices: number[];
  let tasks: HouseholdTask[] = [];
  if (generated) {
    indices = Array.from({ length: Math.min(options.limit ?? GENERATED_COUNT, GENERATED_COUNT) }, (_, i) => i);
  } else {
    tasks = listGames(gamesDir, listing);
    indices = tasks.map((_, i) => i);
    if (options.limit !== undefined) indices = indices.slice(0, options.limit);
  }
  try {
    let done = 0;
    for (const taskIndex of indices) {
      const label = generated ? String(taskIndex) : tasks[taskIndex]!.id;
      try {
        if (options.gold) {
          const commands = parseGoldTrajectory(readFileSync(tasks[taskIndex]!.goldFile!, "utf8")).map((s) => s.command);
          const player = new ScriptedCommands(commands);
          await env.reset({ seed: taskIndex, options: { taskIndex } });
          let reward = 0;
          let ended = false;
          let info: Record<string, unknown> = {};
          while (!ended) {
            const [, r, terminated, truncated, i] = await env.step(player.act());
            reward = r;
            info = i;
            ended = terminated || truncated;
          }
          if (reward !== 1) failures.push({ task: label, reason: `the gold commands did not reach the goal: ${JSON.stringify(info.evidence ?? info)}` });
        } else {
          const episode = await runExpertEpisode(env, envId, { taskIndex, maxTurns: 1000 });
          if (episode.reward !== 1) failures.push({ task: label, reason: JSON.stringify(episode.info.evidence ?? episode.info) });
        }
      } catch (err) {
        failures.push({ task: label, reason: err instanceof Error ? err.message : String(err) });
      }
      options.onProgress?.(++done, indices.length);
    }
  } finally {
    await env.close();
  }
  return { total: indices.length, succeeded: indices.length - failures.length, expectedRate: 1, failures };
}
