/**
 * Generated houses: determinism per seed, the six task types at each level, levels that grow, and
 * the scripted expert winning every generated episode through the registered env.
 */
import { describe, expect, it } from "vitest";
import { make } from "../../../src/gym/registry.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import { generateTask, generateTasks } from "../../../src/envs/household/generator.js";
import { Simulator } from "../../../src/envs/household/game.js";
import { ALFWORLD_GEN_ENV_ID } from "../../../src/envs/household/index.js";
import { loadGame, TASK_TYPES } from "../../../src/envs/household/tasks.js";

registerBundledEnvs();

describe("household generator", () => {
  it("is deterministic per seed and differs across seeds", () => {
    const a = generateTask({ seed: 3 }, 4);
    expect(generateTask({ seed: 3 }, 4).data).toEqual(a.data);
    expect(generateTask({ seed: 4 }, 4).data!.pddl_problem).not.toBe(a.data!.pddl_problem);
  });

  it("makes all six task types at every level, unsolved at the start, with rooms growing with the level", () => {
    const receptacles: Record<number, number> = {};
    for (const difficulty of [1, 2, 3] as const) {
      const tasks = generateTasks({ count: 12, seed: 11, difficulty });
      expect(new Set(tasks.map((t) => t.taskType))).toEqual(new Set(TASK_TYPES));
      let total = 0;
      for (const task of tasks) {
        const sim = new Simulator(loadGame(task));
        expect(sim.won()).toBe(false);
        expect(sim.intro()).toMatch(/Your task is to: .+\.$/);
        total += sim.state.objectsOf("receptacle").length;
      }
      receptacles[difficulty] = total / tasks.length;
    }
    expect(receptacles[1]!).toBeLessThan(receptacles[2]!);
    expect(receptacles[2]!).toBeLessThan(receptacles[3]!);
  });

  it("the expert wins generated episodes through sinkflex/alfworld-gen-v0", async () => {
    const env = await make(ALFWORLD_GEN_ENV_ID, { count: 18, taskSeed: 5 });
    try {
      for (let taskIndex = 0; taskIndex < 18; taskIndex++) {
        const episode = await runExpertEpisode(env, ALFWORLD_GEN_ENV_ID, { taskIndex });
        expect(episode.reward, `task ${taskIndex}: ${JSON.stringify(episode.info)}`).toBe(1);
        expect(episode.terminated).toBe(true);
      }
    } finally {
      await env.close();
    }
  });
});
