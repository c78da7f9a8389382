import { describe, expect, it } from "vitest";
import { EnvContractError, unwrap } from "../../src/gym/env.js";
import { OrderEnforcing, RecordEpisodeStatistics, TimeLimit, TokenBudget } from "../../src/gym/wrappers/index.js";
import { WalkEnv } from "./helpers.js";

describe("TimeLimit", () => {
  it("truncates at max steps and marks info.timeLimitReached", async () => {
    const env = new TimeLimit(new WalkEnv(50), 3);
    // Start far from the goal and stay put: only the limit can end the episode.
    await env.reset({ seed: 1, options: { start: 0 } });
    const [, , t1, tr1] = await env.step(1);
    const [, , t2, tr2] = await env.step(1);
    const [, , t3, tr3, info3] = await env.step(1);
    expect([t1, tr1, t2, tr2]).toEqual([false, false, false, false]);
    expect(t3).toBe(false);
    expect(tr3).toBe(true);
    expect(info3.timeLimitReached).toBe(true);
    expect(env.elapsedSteps).toBe(3);
    await env.reset({ seed: 1 });
    expect(env.elapsedSteps).toBe(0);
  });

  it("does not truncate an episode that terminated at the last step", async () => {
    const env = new TimeLimit(new WalkEnv(7), 1);
    const [obs] = await env.reset({ seed: 3 });
    const goal = Number(obs.match(/goal=(\d+)/)![1]);
    // Start next to the goal (same seed: same goal) and walk onto it.
    await env.reset({ seed: 3, options: { start: goal === 0 ? 1 : goal - 1 } });
    const [, reward, terminated, truncated, info] = await env.step(goal === 0 ? 0 : 2);
    expect([reward, terminated, truncated, info.timeLimitReached]).toEqual([1, true, false, undefined]);
  });

  it("rejects a non-positive limit", () => {
    expect(() => new TimeLimit(new WalkEnv(), 0)).toThrow(/positive/);
  });
});

describe("RecordEpisodeStatistics", () => {
  it("reports {r, l, t} only at the end of an episode", async () => {
    const env = new RecordEpisodeStatistics(new TimeLimit(new WalkEnv(50), 4));
    await env.reset({ seed: 1, options: { start: 0 } });
    for (let i = 0; i < 3; i++) {
      const [, , , , info] = await env.step(1);
      expect(info.episode).toBeUndefined();
    }
    const [, , , truncated, info] = await env.step(1);
    expect(truncated).toBe(true);
    const ep = info.episode as { r: number; l: number; t: number };
    expect(ep.l).toBe(4);
    expect(ep.r).toBeCloseTo(-0.04, 10);
    expect(ep.t).toBeGreaterThanOrEqual(0);
    expect(env.lengthQueue).toEqual([4]);
  });
});

describe("OrderEnforcing", () => {
  it("refuses step before reset, after the end and after close, with clear messages", async () => {
    const env = new OrderEnforcing(new TimeLimit(new WalkEnv(50), 1));
    await expect(env.step(1)).rejects.toThrow(EnvContractError);
    await expect(env.step(1)).rejects.toThrow(/step before reset; call reset\(\) first/);
    await env.reset({ seed: 1, options: { start: 0 } });
    const [, , , truncated] = await env.step(1);
    expect(truncated).toBe(true);
    await expect(env.step(1)).rejects.toThrow(/step after the episode ended.*call reset\(\)/);
    await env.reset({ seed: 2 });
    await env.close();
    await env.close();
    await expect(env.step(1)).rejects.toThrow(/after close/);
    await expect(env.reset()).rejects.toThrow(/reset after close/);
    expect((unwrap(env) as WalkEnv).closeCount).toBe(1);
  });
});

describe("TokenBudget", () => {
  it("truncates when observation characters exceed the budget", async () => {
    const env = new TokenBudget(new WalkEnv(50), 40);
    await env.reset({ seed: 1, options: { start: 0 } }); // "pos=0 goal=NN" is 13 or 12 characters
    let steps = 0;
    let truncated = false;
    let info: Record<string, unknown> = {};
    while (!truncated) {
      [, , , truncated, info] = await env.step(1);
      steps++;
    }
    expect(steps).toBe(3);
    expect(info.tokenBudgetExceeded).toEqual({ used: env.used, budget: 40 });
    expect(env.used).toBeGreaterThan(40);
  });

  it("uses a supplied token counter", async () => {
    const env = new TokenBudget(new WalkEnv(50), 2, () => 1);
    await env.reset({ seed: 1, options: { start: 0 } });
    expect((await env.step(1))[3]).toBe(false);
    const [, , , truncated, info] = await env.step(1);
    expect(truncated).toBe(true);
    expect(info.tokensUsed).toBe(3);
  });
});
