/**
 * The household env (`sinkflex/alfworld-v0`, `sinkflex/alfworld-gen-v0`): a ToolEnv over ALFWorld
 * games. One tool, `act({command})`, runs an ALFWorld text command ("go to countertop 1", "take apple
 * 1 from countertop 1", "put apple 1 in/on fridge 1", "heat apple 1 with microwave 1", "look",
 * "inventory", ...) and returns the game's text; a command that is not admissible answers
 * "Nothing happens.". The episode ends as soon as the goal holds (reward 1), or when the agent answers
 * without a tool call (reward 1 only if the goal holds). `info.admissibleCommands` lists the commands
 * admissible after every reset and step.
 *
 * This file builds the env; the simulator is game.ts, the tasks tasks.ts, the registration index.ts.
 */
import { z } from "zod";
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import type { ResetArgs, ResetResult, StepResult } from "../../gym/index.js";
import { arrayTasks, ToolEnv, type TaskSet, type ToolEnvHooks } from "../../tools/index.js";
import { functionTool } from "../../tools/index.js";
import { Simulator } from "./game.js";
import { goalProgress } from "./progress.js";
import { generateTask } from "./generator.js";
import { defaultGamesDir, listGames, loadGame, TASK_TYPES, type HouseholdTask } from "./tasks.js";

export interface HouseholdState {
  sim: Simulator;
  steps: number;
  invalid: number;
}

export const HOUSEHOLD_SYSTEM_PROMPT = [
  "You are in a house and must complete a household task. Act with the `act` tool, one text command per call.",
  "Commands: look; inventory; go to <receptacle>; open <receptacle>; close <receptacle>;",
  "take <object> from <receptacle>; put <object> in/on <receptacle>; clean <object> with <receptacle>;",
  "heat <object> with <receptacle>; cool <object> with <receptacle>; use <object>; examine <something>.",
  'Name things exactly as the game does, e.g. "apple 1", "countertop 2". A command that cannot be done answers "Nothing happens.".',
  "The task ends as soon as its goal holds.",
].join("\n");

const act = functionTool({
  name: "act",
  description: 'Runs one ALFWorld text command, e.g. "go to countertop 1" or "take apple 1 from countertop 1", and returns what happens.',
  parameters: z.object({ command: z.string().min(1).max(200).describe("The text command.") }),
  execute: ({ command }, ctx: { state: HouseholdState; finish(reason: string): void }) => {
    const { sim } = ctx.state;
    ctx.state.steps++;
    const result = sim.step(command);
    if (!result.valid) ctx.state.invalid++;
    if (sim.won()) ctx.finish("goal_reached");
    return result.feedback;
  },
});

export interface HouseholdEnvOptions {
  /** "games" (ALFWorld games on disk, the default) or "generated". */
  source?: "games" | "generated";
  /** A folder of games laid out as `<task>/<trial>/game.tw-pddl` (default: the shared ALFWorld games). */
  games?: string;
  /** Only the games that have a gold trajectory (`gt_traj.txt`). */
  goldOnly?: boolean;
  /** Also the games whose file says `"solvable": false` (left out by default). */
  includeUnsolvable?: boolean;
  /** Generated games: how many, the generator's seed, the level (1-3; all levels when absent). */
  count?: number;
  taskSeed?: number;
  difficulty?: number;
}

function readTasks(options: Record<string, unknown>): TaskSet<HouseholdTask> {
  const source = options.source ?? "games";
  if (source === "games") {
    if (options.games !== undefined && typeof options.games !== "string") throw new TypeError("household: options.games must be a folder path");
    return arrayTasks(
      listGames((options.games as string | undefined) ?? defaultGamesDir(), { goldOnly: options.goldOnly === true, solvableOnly: options.includeUnsolvable !== true }),
    );
  }
  if (source === "generated") {
    const count = options.count ?? 200;
    const seed = options.taskSeed ?? 1;
    const difficulty = options.difficulty;
    if (!Number.isInteger(count) || (count as number) < 1) throw new RangeError(`household: options.count must be a positive integer, got ${JSON.stringify(count)}`);
    if (!Number.isInteger(seed)) throw new RangeError(`household: options.taskSeed must be an integer, got ${JSON.stringify(seed)}`);
    if (difficulty !== undefined && ![1, 2, 3].includes(difficulty as number)) {
      throw new RangeError(`household: options.difficulty must be 1, 2 or 3, got ${JSON.stringify(difficulty)}`);
    }
    // Generated lazily: a task is drawn (and checked solvable) when an episode first asks for it.
    const generated = new Map<number, HouseholdTask>();
    const genOptions = { seed: seed as number, difficulty: difficulty as 1 | 2 | 3 | undefined, types: TASK_TYPES };
    return {
      size: count as number,
      get(index) {
        if (!Number.isInteger(index) || index < 0 || index >= (count as number)) throw new RangeError(`task index ${index} is out of range [0, ${(count as number) - 1}]`);
        let task = generated.get(index);
        if (!task) generated.set(index, (task = generateTask(genOptions, index)));
        return task;
      },
    };
  }
  throw new RangeError(`household: options.source must be "games" or "generated", got ${JSON.stringify(source)}`);
}

/** The household ToolEnv; it adds `admissibleCommands` to the info of every reset and step. */
export class HouseholdEnv extends ToolEnv<HouseholdTask, HouseholdState> {
  override async reset(args?: ResetArgs): Promise<ResetResult<ChatObservation>> {
    const [obs, info] = await super.reset(args);
    return [obs, { ...info, taskId: this.current!.task.id, admissibleCommands: this.current!.state.sim.admissibleCommands() }];
  }

  override async step(action: AgentTurn): Promise<StepResult<ChatObservation>> {
    const [obs, reward, terminated, truncated, info] = await super.step(action);
    const sim = this.current?.state.sim;
    return [obs, reward, terminated, truncated, sim ? { ...info, admissibleCommands: sim.admissibleCommands() } : info];
  }
}

export function createHouseholdEnv(options: Record<string, unknown> = {}): HouseholdEnv {
  const tasks = readTasks(options);
  const hooks: ToolEnvHooks<HouseholdTask, HouseholdState> = {
    name: "HouseholdEnv",
    tasks,
    tools: [act],
    metadata: { description: "ALFWorld household tasks: text commands through act; reward 1 when the goal holds." },
    async open(task) {
      const sim = new Simulator(loadGame(task));
      return {
        state: { sim, steps: 0, invalid: 0 },
        messages: [
          { role: "system", content: HOUSEHOLD_SYSTEM_PROMPT },
          { role: "user", content: sim.intro() },
        ],
      };
    },
    async score(episode) {
      const { sim, steps, invalid } = episode.state;
      const won = sim.won();
      return { reward: won ? 1 : 0, evidence: { goalHolds: won, task: sim.game.taskText, taskId: episode.task.id, steps, invalidCommands: invalid } };
    },
    progress(episode) {
      const sim = episode.state.sim;
      return goalProgress(sim.state, sim.game.problem, sim.game.domain);
    },
  };
  return new HouseholdEnv(hooks);
}
