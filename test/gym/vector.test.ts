import { describe, expect, it } from "vitest";
import { EnvContractError, type StepResult } from "../../src/gym/env.js";
import { register, unregister } from "../../src/gym/registry.js";
import { VectorEnv } from "../../src/gym/vector.js";
import { TimeLimit } from "../../src/gym/wrappers/index.js";
import { WalkEnv } from "./helpers.js";

/** A walk whose steps take a few milliseconds and that counts how many of its kind step at once. */
class SlowWalkEnv extends WalkEnv {
  static inFlight = 0;
  static maxInFlight = 0;
  async step(action: number): Promise<StepResult<string>> {
    SlowWalkEnv.inFlight++;
    SlowWalkEnv.maxInFlight = Math.max(SlowWalkEnv.maxInFlight, SlowWalkEnv.inFlight);
    await new Promise((r) => setTimeout(r, 20));
    SlowWalkEnv.inFlight--;
    return super.step(action);
  }
}

/** Three walks on a long line that only the 2-step time limit ends when standing still. */
const envs = () => [0, 1, 2].map(() => new TimeLimit(new WalkEnv(100), 2));
const stay = [1, 1, 1];

describe("VectorEnv", () => {
  it("steps its envs concurrently and batches the results", async () => {
    const vec = new VectorEnv([0, 1, 2, 3].map(() => new SlowWalkEnv(100)));
    const [obs, infos] = await vec.reset({ seed: 5 });
    expect(obs).toHaveLength(4);
    expect(infos.map((i) => i.seed)).toEqual([5, 6, 7, 8]);
    const [o, r, te, tr, inf] = await vec.step([1, 1, 1, 1]);
    expect(SlowWalkEnv.maxInFlight).toBe(4);
    expect([o.length, r.length, te.length, tr.length, inf.length]).toEqual([4, 4, 4, 4, 4]);
    await vec.close();
    await expect(vec.step([1, 1, 1, 1])).rejects.toThrow(/after close/);
  });

  it('"next-step": the step after the end resets, ignoring the action', async () => {
    const vec = new VectorEnv(envs(), { autoresetMode: "next-step" });
    const [first] = await vec.reset({ seed: 1, options: { start: 50 } });
    await vec.step(stay);
    const [o2, , te2, tr2, i2] = await vec.step(stay);
    expect(tr2).toEqual([true, true, true]);
    expect(te2).toEqual([false, false, false]);
    expect(o2).toEqual(first); // standing still: the ending observation is the start
    expect(i2[0]!.timeLimitReached).toBe(true);
    const [o3, r3, te3, tr3, i3] = await vec.step(stay);
    expect([r3, te3, tr3]).toEqual([[0, 0, 0], [false, false, false], [false, false, false]]);
    expect(i3.every((i) => i.autoreset === true)).toBe(true);
    expect(o3).not.toEqual(first); // new episodes (no start option): new positions
    const [, r4] = await vec.step(stay);
    expect(r4).toEqual([-0.01, -0.01, -0.01]);
  });

  it('"same-step": the ending step already returns the new episode, with the final observation in info', async () => {
    const vec = new VectorEnv(envs(), { autoresetMode: "same-step" });
    const [first] = await vec.reset({ seed: 1, options: { start: 50 } });
    await vec.step(stay);
    const [o2, r2, , tr2, i2] = await vec.step(stay);
    expect(tr2).toEqual([true, true, true]);
    expect(r2).toEqual([-0.01, -0.01, -0.01]);
    expect(i2.map((i) => i.finalObservation)).toEqual(first);
    expect((i2[0]!.finalInfo as Record<string, unknown>).timeLimitReached).toBe(true);
    expect(o2).not.toEqual(first);
    const [, r3, , tr3] = await vec.step(stay);
    expect([r3, tr3]).toEqual([[-0.01, -0.01, -0.01], [false, false, false]]);
  });

  it('"disabled": stepping an ended env is an error until reset({ mask })', async () => {
    const vec = new VectorEnv(envs(), { autoresetMode: "disabled" });
    await vec.reset({ seed: 1, options: { start: 50 } });
    await vec.step(stay);
    await vec.step(stay);
    await expect(vec.step(stay)).rejects.toThrow(EnvContractError);
    await expect(vec.step(stay)).rejects.toThrow(/sub-env 0 has ended; call reset\(\{ mask \}\)/);
    const [obs] = await vec.reset({ mask: [true, true, true], seed: 9 });
    expect(obs).toHaveLength(3);
    const [, r] = await vec.step(stay);
    expect(r).toEqual([-0.01, -0.01, -0.01]);
  });

  it("is repeatable with a seed, autoresets included, and checks its arguments", async () => {
    const run = async () => {
      const vec = new VectorEnv(envs(), { autoresetMode: "next-step" });
      const out = [await vec.reset({ seed: 3 })];
      for (let i = 0; i < 5; i++) out.push(await vec.step(stay) as never);
      return out;
    };
    expect(await run()).toEqual(await run());
    const vec = new VectorEnv(envs());
    await expect(vec.step(stay)).rejects.toThrow(/never reset/);
    await vec.reset();
    await expect(vec.step([1])).rejects.toThrow(/expected 3 actions, got 1/);
    expect(() => new VectorEnv(envs(), { autoresetMode: "sometimes" as never })).toThrow(/autoresetMode must be one of/);
  });

  it("makes N copies of a registered env", async () => {
    register("test/vwalk-v0", () => new WalkEnv(), { suite: "test", description: "walk" });
    try {
      const vec = await VectorEnv.make("test/vwalk-v0", 2, { maxEpisodeSteps: 3 });
      expect(vec.toString()).toBe("VectorEnv<2x RecordEpisodeStatistics<OrderEnforcing<TimeLimit<WalkEnv<test/vwalk-v0>>>>, autoreset=next-step>");
      await vec.close();
    } finally {
      unregister("test/vwalk-v0");
    }
  });
});
