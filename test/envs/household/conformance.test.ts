/**
 * Household conformance: every public gold trajectory (`gt_traj.txt`) of the ALFWorld games reaches
 * its goal in our simulator, and every observation it recorded is the one our grammar derives (the
 * recorded texts drop ALFWorld's "You arrive at loc N." prefix, so we drop it too before comparing).
 * The suite's `replay` (gold commands through the registered env) is checked on a sample of them; the
 * whole set is `sinkflex envs replay sinkflex/alfworld-v0 --gold`.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { suiteForEnv } from "../../../src/envs/suite.js";
import { Simulator } from "../../../src/envs/household/game.js";
import { parseGoldTrajectory } from "../../../src/envs/household/gold.js";
import { ALFWORLD_ENV_ID } from "../../../src/envs/household/index.js";
import { defaultGamesDir, listGames, loadGame } from "../../../src/envs/household/tasks.js";

registerBundledEnvs();

describe("ALFWorld gold trajectories", () => {
  const tasks = listGames(defaultGamesDir(), { goldOnly: true });

  it("finds the 101 public gold trajectories", () => {
    expect(tasks).toHaveLength(101);
  });

  it("reaches every goal, with the recorded observation after every command", () => {
    const mismatches: string[] = [];
    let won = 0;
    let compared = 0;
    for (const task of tasks) {
      const sim = new Simulator(loadGame(task));
      expect(sim.won(), `${task.id} must not start won`).toBe(false);
      for (const step of parseGoldTrajectory(readFileSync(task.goldFile!, "utf8"))) {
        const { feedback, valid } = sim.step(step.command);
        if (!valid) mismatches.push(`${task.id}: "${step.command}" was not admissible`);
        if (step.observation !== undefined) {
          compared++;
          const shown = feedback.replace(/^You arrive at loc \d+\. /, "");
          if (shown !== step.observation) mismatches.push(`${task.id}: "${step.command}" gave "${shown}", recorded "${step.observation}"`);
        }
      }
      if (sim.won()) won++;
    }
    expect(mismatches.slice(0, 5)).toEqual([]);
    expect(compared).toBeGreaterThan(1500);
    expect(won).toBe(101);
  });

  it("Suite.replay with gold plays them through the env and wins", async () => {
    const report = await suiteForEnv(ALFWORLD_ENV_ID).replay!(ALFWORLD_ENV_ID, { gold: true, games: defaultGamesDir(), limit: 20 });
    expect(report.failures).toEqual([]);
    expect(report).toMatchObject({ total: 20, succeeded: 20, expectedRate: 1 });
  }, 60_000);
});
