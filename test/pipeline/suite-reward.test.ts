/**
 * A suite's reward rubric (`suites[].reward`): the default is the verifier alone (the env's reward,
 * unchanged); other weights mix in the env's progress and well-formed calls, while success stays the
 * verifier's; a component that cannot score marks the trajectory instead of scoring it 0; and the
 * config refuses weights that cannot work, naming the field.
 */
import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { scoreTrajectory, suiteRubric } from "../../src/pipeline/suite-reward.js";
import { planSuites } from "../../src/pipeline/tasks.js";
import type { Trajectory } from "../../src/rollout/trajectory.js";
import { validateConfig } from "../../src/pipeline/config.js";

registerBundledEnvs();

/** A finished episode as the rollout records it: one tool call, the env's reward and last info. */
function trajectory(reward: number, info: Record<string, unknown>, callArguments = '{"answer": 3}'): Trajectory {
  return {
    reward,
    info,
    prompt: [{ role: "user", content: "What is 1 + 2?" }],
    turns: [
      {
        content: "",
        toolCalls: [{ id: "c0", name: "submit_answer", arguments: callArguments }],
        observation: [{ role: "tool", toolCallId: "c0", name: "submit_answer", content: callArguments.startsWith("{\"") ? "Answer recorded." : "Error: the arguments are not valid JSON", isError: !callArguments.startsWith("{\"") }],
      },
    ],
  } as unknown as Trajectory;
}

describe("suite rewards", () => {
  it("the default rubric is the env's reward itself", async () => {
    expect(suiteRubric(undefined)).toBeUndefined();
    expect(suiteRubric({ verifier: 1, progress: 0, format: 0 })).toBeUndefined();
    expect(await scoreTrajectory(undefined, trajectory(1, {}))).toEqual({ reward: 1, success: true });
    expect(await scoreTrajectory(undefined, trajectory(0, { progress: 0.5 }))).toEqual({ reward: 0, success: false });
  });

  it("mixes in progress and format by weight; success stays the verifier's", async () => {
    const rubric = suiteRubric({ verifier: 1, progress: 1, format: 0 });
    const closer = await scoreTrajectory(rubric, trajectory(0, { progress: 0.5 }));
    expect(closer).toMatchObject({ reward: 0.25, success: false });
    expect(closer.components!.progress).toMatchObject({ weight: 1, score: 0.5 });
    expect(await scoreTrajectory(rubric, trajectory(1, { progress: 1 }))).toMatchObject({ reward: 1, success: true });

    const format = suiteRubric({ verifier: 3, progress: 0, format: 1 });
    expect((await scoreTrajectory(format, trajectory(0, {}))).reward).toBeCloseTo(0.25);
    expect((await scoreTrajectory(format, trajectory(0, {}, "{answer: 3"))).reward).toBe(0);
  });

  it("an env that reports no progress marks the trajectory with an error instead of scoring it 0", async () => {
    const rubric = suiteRubric({ verifier: 1, progress: 1, format: 0 });
    expect((await scoreTrajectory(rubric, trajectory(0, {}))).error).toMatch(/no progress/);
    expect((await scoreTrajectory(rubric, trajectory(0, { progressError: "the goal could not be read" }))).error).toMatch(/progress failed: the goal could not be read/);
  });

  it("a judge needs a URL, a model and a rubric, and its key variable set when one is named", () => {
    const judge = { weight: 1, baseUrl: "http://127.0.0.1:9/v1", model: "m", rubric: "Be helpful." };
    const config = (j: unknown) => validateConfig({ suites: [{ env: "sinkflex/arith-v0", reward: { judge: j } }], model: { init: {} } });
    expect(() => config({ ...judge, baseUrl: "localhost" })).toThrow(/suites\.0\.reward\.judge\.baseUrl: a URL/);
    expect(() => config({ ...judge, rubric: "" })).toThrow(/suites\.0\.reward\.judge\.rubric/);
    expect(() => config({ ...judge, apiKey: "sk-123" })).toThrow(/unknown field\(s\) "apiKey"/);
    const weights = config(judge).suites[0]!.reward!;
    expect(suiteRubric(weights)!.components.map((c) => c.name)).toEqual(["verifier", "judge"]);
    delete process.env.SINKFLEX_TEST_JUDGE_KEY;
    expect(() => suiteRubric({ ...weights, judge: { ...weights.judge!, apiKeyEnv: "SINKFLEX_TEST_JUDGE_KEY" } })).toThrow(/SINKFLEX_TEST_JUDGE_KEY is not set/);
  });

  it("the config names bad weights, and a progress weight on an env without progress", async () => {
    const config = (reward: unknown, env = "sinkflex/arith-v0") =>
      validateConfig({ suites: [{ env, options: env.includes("alfworld") ? { source: "generated", difficulty: 1, count: 60 } : { difficulty: 1, count: 60 }, reward }], model: { init: {} }, eval: { tasksPerSuite: 10 } });
    expect(() => config({ verifier: 0 })).toThrow(/suites\.0\.reward: at least one reward weight/);
    expect(() => config({ verifier: -1 })).toThrow(/suites\.0\.reward\.verifier/);
    expect(() => config({ verifier: 1, bonus: 1 })).toThrow(/suites\.0\.reward: unknown field\(s\) "bonus"/);
    await expect(planSuites(config({ progress: 1 }))).rejects.toThrow(/suites\.0\.reward\.progress is 1, but this env reports no partial progress/);
    expect((await planSuites(config({ progress: 0.5, format: 0.1 })).catch((e: Error) => e.message))).toMatch(/reports no partial progress/);
    const [plan] = await planSuites(config({ format: 0.1 }));
    expect(plan!.reward).toEqual({ verifier: 1, progress: 0, format: 0.1 });
    const [household] = await planSuites(config({ progress: 1 }, "sinkflex/alfworld-gen-v0"));
    expect(household!.reward).toEqual({ verifier: 1, progress: 1, format: 0 });
  });
});
