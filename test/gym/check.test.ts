import { describe, expect, it } from "vitest";
import { assertEnv, CHECK_NAMES, checkEnv, EnvCheckError, formatCheckReport, type CheckReport } from "../../src/gym/check.js";
import type { Env } from "../../src/gym/env.js";
import { wrapStandard } from "../../src/gym/registry.js";
import { DriftingRewardWalkEnv, EndlessWalkEnv, FragileCloseWalkEnv, OutOfSpaceWalkEnv, UnseededWalkEnv, WalkEnv } from "./helpers.js";

/** Walks toward the goal read from the observation. */
const towardGoal = ({ obs }: { obs: string }) => {
  const [, pos, goal] = obs.match(/pos=(\d+) goal=(\d+)/)!.map(Number);
  return goal! > pos! ? 2 : 0;
};

const status = (report: CheckReport, name: string) => report.checks.find((c) => c.name === name)?.status;
const failed = (report: CheckReport) => report.checks.filter((c) => c.status === "failed").map((c) => c.name);

describe("checkEnv", () => {
  it("passes a correct env driven by a caller's actions, and closes it", async () => {
    const env = new WalkEnv();
    const report = await checkEnv(env, { actions: towardGoal, episodes: 3 });
    expect(failed(report)).toEqual([]);
    expect(report.checks.map((c) => c.status)).not.toContain("skipped");
    expect(report.checks.map((c) => c.name)).toEqual(Object.values(CHECK_NAMES));
    expect(env.closeCount).toBe(2);
  });

  it("passes a correct env in the standard stack with sampled actions", async () => {
    const report = await assertEnv(wrapStandard(new WalkEnv(30), { maxEpisodeSteps: 5 }));
    expect(report.passed).toBe(true);
    expect(status(report, CHECK_NAMES.stepAfterEnd)).toBe("passed");
    expect(formatCheckReport(report)).toMatch(/passed\n {2}ok {3}spaces are declared/);
  });

  it("skips the step-after-end check when no episode ends, and says what to do", async () => {
    const report = await checkEnv(new WalkEnv(1000), { actions: () => 1, maxSteps: 3 });
    expect(report.passed).toBe(true);
    const c = report.checks.find((x) => x.name === CHECK_NAMES.stepAfterEnd)!;
    expect(c.status).toBe("skipped");
    expect(c.message).toMatch(/maxEpisodeSteps/);
  });

  const broken: [string, () => Env<string, number>, string][] = [
    ["ignores the seed", () => new UnseededWalkEnv(50), CHECK_NAMES.resetRepeatable],
    ["rewards drift", () => new DriftingRewardWalkEnv(), CHECK_NAMES.trajectory],
    ["observations leave the space", () => new OutOfSpaceWalkEnv(), CHECK_NAMES.inSpace],
    ["steps after the end", () => new EndlessWalkEnv(), CHECK_NAMES.stepAfterEnd],
    ["close twice throws", () => new FragileCloseWalkEnv(), CHECK_NAMES.closeTwice],
  ];
  for (const [what, create, check] of broken) {
    it(`fails "${check}" for an env that ${what}`, async () => {
      const report = await checkEnv(create(), { actions: towardGoal, episodes: 3 });
      expect(report.passed).toBe(false);
      expect(failed(report)).toContain(check);
      await expect(assertEnv(create(), { actions: towardGoal, episodes: 3 })).rejects.toThrow(EnvCheckError);
    });
  }

  it("reports a bad step result and a missing space instead of throwing", async () => {
    const env = new WalkEnv();
    (env as unknown as { step: () => Promise<unknown> }).step = async () => [ "pos=0 goal=1", Number.NaN, "no", false, {} ];
    const report = await checkEnv(env, { actions: () => 1 });
    expect(failed(report)).toContain(CHECK_NAMES.stepShape);
    expect(report.checks.find((c) => c.name === CHECK_NAMES.stepShape)!.message).toMatch(/reward NaN/);

    const failingReset = new WalkEnv();
    failingReset.reset = async () => {
      throw new Error("database is down");
    };
    const r1 = await checkEnv(failingReset);
    expect(failed(r1)).toContain(CHECK_NAMES.resetRepeatable);
    expect(r1.checks.find((c) => c.name === CHECK_NAMES.resetRepeatable)!.message).toMatch(/reset\(\{seed: 0\}\) threw: Error: database is down/);

    const spaceless = new WalkEnv();
    (spaceless as { actionSpace: unknown }).actionSpace = undefined;
    const r2 = await checkEnv(spaceless);
    expect(failed(r2)).toEqual([CHECK_NAMES.spaces]);
  });
});
