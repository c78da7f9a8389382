/**
 * The household suite's task sets: the ALFWorld games on disk (`<games>/<task>/<trial>/game.tw-pddl`,
 * with `gt_traj.txt` where a gold trajectory exists) and generated games, and the cache of parsed games.
 *
 * The data folder is `../shared/data` next to the repository (resolved from this file's location), or
 * `SINKFLEX_DATA_DIR` when set. This file does not simulate anything (see game.ts).
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { Game, type GameData } from "./game.js";
import { benchmarkDataDir } from "../data-dir.js";

export const TASK_TYPES = [
  "pick_and_place_simple",
  "pick_clean_then_place_in_recep",
  "pick_heat_then_place_in_recep",
  "pick_cool_then_place_in_recep",
  "look_at_obj_in_light",
  "pick_two_obj_and_place",
] as const;
export type TaskType = (typeof TASK_TYPES)[number] | "pick_and_place_with_movable_recep";

export interface HouseholdTask {
  /** Stable id: `<task folder>/<trial folder>` for games on disk, `gen/<seed>/<index>` for generated ones. */
  id: string;
  taskType: TaskType;
  /** The game file, for games on disk. */
  gameFile?: string;
  /** The gold trajectory file, when the game has one. */
  goldFile?: string;
  /** The game itself, for generated games. */
  data?: GameData;
  /** 1 (easy) to 3 (hard), for generated games. */
  difficulty?: number;
}

/** The shared benchmark data folder. */
export function dataDir(): string {
  return benchmarkDataDir();
}

export function defaultGamesDir(): string {
  return join(dataDir(), "alfworld", "games");
}

export function taskTypeOf(folder: string): TaskType {
  const prefix = folder.split("-")[0]!;
  if ((TASK_TYPES as readonly string[]).includes(prefix) || prefix === "pick_and_place_with_movable_recep") return prefix as TaskType;
  throw new Error(`household: cannot tell the task type of the game folder "${folder}"; folders are named like pick_and_place_simple-Book-None-Desk-308`);
}

/**
 * Every game under `dir` laid out as `<task>/<trial>/game.tw-pddl`, sorted by id; with `goldOnly`, only
 * those with a `gt_traj.txt`; with `solvableOnly`, only those whose file says `"solvable": true`.
 */
export function listGames(dir: string, options: { goldOnly?: boolean; solvableOnly?: boolean } = {}): HouseholdTask[] {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) {
    throw new Error(`household: the games folder ${dir} does not exist; pass a folder laid out as <task>/<trial>/game.tw-pddl (or set SINKFLEX_DATA_DIR)`);
  }
  const tasks: HouseholdTask[] = [];
  for (const folder of readdirSync(dir).sort()) {
    const taskDir = join(dir, folder);
    if (!statSync(taskDir).isDirectory()) continue;
    for (const trial of readdirSync(taskDir).sort()) {
      const gameFile = join(taskDir, trial, "game.tw-pddl");
      if (!existsSync(gameFile)) continue;
      const goldFile = join(taskDir, trial, "gt_traj.txt");
      const hasGold = existsSync(goldFile);
      if (options.goldOnly && !hasGold) continue;
      if (options.solvableOnly && !/"solvable"\s*:\s*true/.test(readFileSync(gameFile, "utf8"))) continue;
      tasks.push({ id: `${folder}/${trial}`, taskType: taskTypeOf(folder), gameFile, ...(hasGold ? { goldFile } : {}) });
    }
  }
  if (tasks.length === 0) throw new Error(`household: no game.tw-pddl files under ${dir} (expected <task>/<trial>/game.tw-pddl)`);
  return tasks;
}

const cache = new Map<string, Game>();
const CACHE_SIZE = 64;

function remember(key: string, game: Game): void {
  cache.set(key, game);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value!);
}

/**
 * Keeps the game a generator parsed to check a task: the episode that asked for the task loads it next
 * (by `loadGame(task)`), and would otherwise parse the same text again.
 */
export function rememberGame(task: HouseholdTask, game: Game): void {
  if (game.data !== task.data) throw new Error(`household: the game remembered for task ${task.id} is not parsed from its data`);
  remember(task.gameFile ?? task.id, game);
}

/** The parsed game of a task (parsed games are cached; a Game is immutable). */
export function loadGame(task: HouseholdTask): Game {
  const key = task.gameFile ?? task.id;
  const hit = cache.get(key);
  if (hit) {
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  let data: GameData;
  if (task.data) data = task.data;
  else if (task.gameFile) {
    try {
      data = JSON.parse(readFileSync(task.gameFile, "utf8")) as GameData;
    } catch (err) {
      throw new Error(`household: cannot read the game ${task.gameFile}: ${(err as Error).message}`);
    }
  } else throw new Error(`household: task ${task.id} has neither a game file nor game data`);
  const game = new Game(data, task.gameFile ?? task.id);
  remember(key, game);
  return game;
}
