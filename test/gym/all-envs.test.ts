/**
 * The env contract over every registered env: each bundled suite's envs (whatever has been added
 * to src/envs/index.ts) are made in the standard stack and must pass checkEnv. The budget per env
 * is small: two seeds, each played twice, episodes cut at a few steps by TimeLimit.
 */
import { describe, expect, it } from "vitest";
import type { AgentTurn } from "../../src/gym/chat.js";
import { CHECK_NAMES, checkEnv, formatCheckReport, type ActionSource } from "../../src/gym/check.js";
import type { Env } from "../../src/gym/env.js";
import { make, registeredIds } from "../../src/gym/registry.js";
import { registerBundledEnvs } from "../../src/envs/index.js";

registerBundledEnvs();
const ids = registeredIds();

/**
 * Actions for any env: samples from the action space; for tool envs, a turn without tool calls at the
 * third step (it ends the episode unless the env has a user simulator, then TimeLimit ends it).
 */
function mixedActions(env: Env<unknown, unknown>): ActionSource<unknown, unknown> {
  return (ctx) => {
    if (env.actionSpace.kind === "tool-call" && ctx.step >= 2) {
      return { content: `My answer is ${ctx.step}.`, toolCalls: [] } satisfies AgentTurn;
    }
    return env.actionSpace.sample(ctx.rng);
  };
}

describe("every registered env passes checkEnv", () => {
  it("has at least the built-in env registered", () => {
    expect(ids).toContain("sinkflex/arith-v0");
  });

  for (const id of ids) {
    it(id, async () => {
      const env = await make(id, { maxEpisodeSteps: 4 });
      const report = await checkEnv(env, { seed: 11, episodes: 2, maxSteps: 6, actions: mixedActions(env) });
      expect(report.passed, formatCheckReport(report)).toBe(true);
      const afterEnd = report.checks.find((c) => c.name === CHECK_NAMES.stepAfterEnd)!;
      expect(afterEnd.status, formatCheckReport(report)).toBe("passed");
    });
  }
});
