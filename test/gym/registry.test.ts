import { afterEach, describe, expect, it } from "vitest";
import { unwrap } from "../../src/gym/env.js";
import { DEFAULT_MAX_EPISODE_STEPS, make, makeUnwrapped, register, unregister } from "../../src/gym/registry.js";
import { TimeLimit } from "../../src/gym/wrappers/index.js";
import { WalkEnv } from "./helpers.js";

const ID = "test/walk-v0";

describe("make", () => {
  afterEach(() => unregister(ID));

  it("builds the standard, printable stack and names the base env", async () => {
    let received: Record<string, unknown> = {};
    register(ID, (options) => {
      received = options;
      return new WalkEnv(Number(options.size));
    }, { suite: "test", description: "walk", options: { size: 9, color: "red" }, maxEpisodeSteps: 5 });
    const env = await make(ID, { size: 11 });
    expect(env.toString()).toBe(`RecordEpisodeStatistics<OrderEnforcing<TimeLimit<WalkEnv<${ID}>>>>`);
    expect(received).toEqual({ size: 11, color: "red" });
    expect(env.metadata.id).toBe(ID);
    expect(env.metadata.suite).toBe("test");
    expect((unwrap(env) as WalkEnv).size).toBe(11);
    // The registered limit applies: 5 steps standing still on a long line.
    await env.reset({ seed: 1, options: { start: 0 } });
    let truncated = false;
    let n = 0;
    while (!truncated) {
      [, , , truncated] = await env.step(1);
      n++;
    }
    expect(n).toBe(5);
    await env.close();
  });

  it("adds TokenBudget only when a budget is set, and strips wrapper settings from the factory's options", async () => {
    let received: Record<string, unknown> = {};
    register(ID, (options) => ((received = options), new WalkEnv()), { suite: "test", description: "walk" });
    const plain = await make(ID);
    expect(plain.toString()).not.toContain("TokenBudget");
    let limit = plain as unknown as { env: unknown };
    while (!(limit instanceof TimeLimit)) limit = limit.env as { env: unknown };
    expect((limit as TimeLimit).maxEpisodeSteps).toBe(DEFAULT_MAX_EPISODE_STEPS);
    const budgeted = await make(ID, { tokenBudget: 100, maxEpisodeSteps: 3, seedless: true });
    expect(budgeted.toString()).toBe(`RecordEpisodeStatistics<OrderEnforcing<TimeLimit<TokenBudget<WalkEnv<${ID}>>>>>`);
    expect(received).toEqual({ seedless: true });
    await expect(make(ID, { maxEpisodeSteps: -1 })).rejects.toThrow(/maxEpisodeSteps must be a positive number/);
  });

  it("makeUnwrapped returns the bare env; unknown ids list the registered ones", async () => {
    register(ID, () => new WalkEnv(), { suite: "test", description: "walk" });
    const env = await makeUnwrapped(ID);
    expect(env.toString()).toBe(`WalkEnv<${ID}>`);
    await expect(make("test/nope-v0")).rejects.toThrow(/unknown env id "test\/nope-v0".*test\/walk-v0/);
  });
});
