/**
 * Household progress (the `progress` evidence a reward rubric can use): 1 exactly when the goal holds,
 * rising along the scripted expert's play of every task type, and credit only for objects of the
 * goal's type.
 */
import { describe, expect, it } from "vitest";
import { make } from "../../../src/gym/registry.js";
import { unwrap } from "../../../src/gym/env.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { suiteForEnv } from "../../../src/envs/suite.js";
import { Simulator } from "../../../src/envs/household/game.js";
import { generateTask } from "../../../src/envs/household/generator.js";
import { ALFWORLD_GEN_ENV_ID } from "../../../src/envs/household/index.js";
import type { HouseholdEnv } from "../../../src/envs/household/env.js";
import { goalProgress } from "../../../src/envs/household/progress.js";
import { loadGame, TASK_TYPES } from "../../../src/envs/household/tasks.js";
import type { AgentTurn, ChatObservation } from "../../../src/core/index.js";
import type { Env } from "../../../src/gym/env.js";

registerBundledEnvs();

const progressOf = (sim: Simulator) => goalProgress(sim.state, sim.game.problem, sim.game.domain);

describe("household goal progress", () => {
  it("rises along the expert's play of each task type and is 1 only when the goal holds", async () => {
    const env = (await make(ALFWORLD_GEN_ENV_ID, { source: "generated", difficulty: 1, count: 12 })) as Env<ChatObservation, AgentTurn>;
    expect(env.metadata.reportsProgress).toBe(true);
    try {
      for (let k = 0; k < 12; k++) {
        const [first, opened] = await env.reset({ seed: k, options: { taskIndex: k } });
        let obs = first;
        const episode = (unwrap(env) as HouseholdEnv).current!;
        const sim = (episode.state as { sim: Simulator }).sim;
        const expert = suiteForEnv(ALFWORLD_GEN_ENV_ID).createExpert(ALFWORLD_GEN_ENV_ID, episode.task);
        const trace = [progressOf(sim)];
        expect(opened.progress).toBe(trace[0]);
        let done = false;
        let info: Record<string, unknown> = {};
        while (!done) {
          let reward: number, terminated: boolean, truncated: boolean;
          [obs, reward, terminated, truncated, info] = await env.step(await expert.act(obs));
          done = terminated || truncated;
          trace.push(progressOf(sim));
          expect(info.progress).toBe(trace.at(-1));
          if (done) expect(reward).toBe(1);
        }
        const type = (episode.task as { taskType: string }).taskType;
        expect(trace.at(-1), type).toBe(1);
        expect(trace.slice(0, -1).every((p) => p < 1), type).toBe(true);
        for (let i = 1; i < trace.length; i++) expect(trace[i]!, `${type} step ${i}`).toBeGreaterThanOrEqual(trace[i - 1]!);
        // The env reports the figure after every step, and at the reset.
        expect(info.progress).toBe(1);
      }
    } finally {
      await env.close();
    }
  });

  it("credits holding an object of the goal's type, not any object", () => {
    const task = generateTask({ seed: 5, difficulty: 1, types: TASK_TYPES }, 0); // pick_and_place_simple
    expect(task.taskType).toBe("pick_and_place_simple");
    const target = /put some (\w+) on/.exec(new Simulator(loadGame(task)).intro())![1]!;
    let credited = 0;
    let notCredited = 0;
    // Every object the agent can take: walk to each receptacle, take each object there, score, start over.
    const receptacles = new Simulator(loadGame(task)).admissibleCommands().filter((c) => c.startsWith("go to "));
    for (const go of receptacles) {
      const probe = new Simulator(loadGame(task));
      probe.step(go);
      for (const take of probe.admissibleCommands().filter((c) => c.startsWith("take "))) {
        const sim = new Simulator(loadGame(task));
        sim.step(go);
        expect(sim.step(take).valid).toBe(true);
        const p = progressOf(sim);
        if (take.startsWith(`take ${target} `)) {
          expect(p, take).toBeGreaterThan(0);
          credited++;
        } else {
          expect(p, take).toBe(0);
          notCredited++;
        }
      }
    }
    expect(credited).toBeGreaterThan(0);
    expect(notCredited).toBeGreaterThan(0);
  });
});
