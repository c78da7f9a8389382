/**
 * The env contract over every registered env: each bundled suite's envs (whatever has been added
 * to src/envs/index.ts) are made in the standard stack and must pass checkEnv. The budget per env
 * is small: two seeds, each played twice, episodes cut at a few steps by TimeLimit; tool envs get a
 * turn without tool calls from the third step on (see `sampledActions`).
 */
import { describe, expect, it } from "vitest";
import { CHECK_NAMES, checkEnv, formatCheckReport, sampledActions } from "../../src/gym/check.js";
import { make, registeredIds } from "../../src/gym/registry.js";
import { registerBundledEnvs } from "../../src/envs/index.js";

registerBundledEnvs();
const ids = registeredIds();

describe("every registered env passes checkEnv", () => {
  it("has at least the built-in env registered", () => {
    expect(ids).toContain("sinkflex/arith-v0");
  });

  for (const id of ids) {
    it(id, async () => {
      const env = await make(id, { maxEpisodeSteps: 4 });
      const report = await checkEnv(env, { seed: 11, episodes: 2, maxSteps: 6, actions: sampledActions(env) });
      expect(report.passed, formatCheckReport(report)).toBe(true);
      const afterEnd = report.checks.find((c) => c.name === CHECK_NAMES.stepAfterEnd)!;
      expect(afterEnd.status, formatCheckReport(report)).toBe("passed");
    });
  }
});
