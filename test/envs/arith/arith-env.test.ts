import { describe, expect, it } from "vitest";
import type { AgentTurn, ChatObservation } from "../../../src/core/index.js";
import { make } from "../../../src/gym/registry.js";
import { evaluateExpression } from "../../../src/envs/arith/calculator.js";
import { ARITH_ENV_ID } from "../../../src/envs/arith/index.js";
import { generateArithTasks } from "../../../src/envs/arith/tasks.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { runExpertEpisode, suiteForEnv } from "../../../src/envs/suite.js";

registerBundledEnvs();

const call = (name: string, args: unknown, id = "c1"): AgentTurn => ({ content: "", toolCalls: [{ id, name, arguments: JSON.stringify(args) }] });

describe("arith calculator", () => {
  it("evaluates with precedence, parentheses and unary minus, and explains bad input", () => {
    expect(evaluateExpression("2 + 3 * 4")).toBe(14);
    expect(evaluateExpression("(2 + 3) * -4 / 2")).toBe(-10);
    expect(evaluateExpression(" 1.5e2 - .5 ")).toBe(149.5);
    expect(() => evaluateExpression("2 +")).toThrow(/unexpected end of expression at position 3/);
    expect(() => evaluateExpression("process.exit()")).toThrow(/unexpected "p"/);
    expect(() => evaluateExpression("1/0")).toThrow(/division by zero/);
  });
});

describe("arith tasks", () => {
  it("are deterministic in the seed, cover three levels, and their expressions give their answers", () => {
    const a = generateArithTasks({ count: 60, seed: 3 });
    expect(generateArithTasks({ count: 60, seed: 3 })).toEqual(a);
    expect(generateArithTasks({ count: 60, seed: 4 })).not.toEqual(a);
    expect(new Set(a.map((t) => t.difficulty))).toEqual(new Set([1, 2, 3]));
    for (const t of a) expect(evaluateExpression(t.expression)).toBe(t.answer);
  });
});

describe(ARITH_ENV_ID, () => {
  it("rewards the right submitted answer and not a wrong one", async () => {
    const env = await make<ChatObservation, AgentTurn>(ARITH_ENV_ID);
    expect(env.toString()).toBe(`RecordEpisodeStatistics<OrderEnforcing<TimeLimit<ArithEnv<${ARITH_ENV_ID}>>>>`);
    const [obs, info] = await env.reset({ seed: 1, options: { taskIndex: 4 } });
    expect(info.taskIndex).toBe(4);
    expect(obs.tools!.map((t) => t.name)).toEqual(["calculate", "submit_answer"]);
    const task = generateArithTasks()[4]!;
    expect(obs.messages[1]!.content).toBe(task.question);

    const [calc, r0, done0] = await env.step(call("calculate", { expression: task.expression }));
    expect([calc.messages[0]!.content, r0, done0]).toEqual([String(task.answer), 0, false]);
    const [, r1, done1, , info1] = await env.step(call("submit_answer", { answer: task.answer }));
    expect([r1, done1]).toEqual([1, true]);
    expect(info1.evidence).toMatchObject({ expected: task.answer, given: task.answer, via: "submit_answer" });

    await env.reset({ seed: 1, options: { taskIndex: 4 } });
    const [bad] = await env.step(call("calculate", { expression: "2 +* 3" }));
    expect(bad.messages[0]).toMatchObject({ isError: true });
    const [, r2, done2] = await env.step({ content: `I think it is ${task.answer + 1}.`, toolCalls: [] });
    expect([r2, done2]).toEqual([0, true]);
    await env.close();
  });

  it("is solved by its scripted expert on every level", async () => {
    const env = await make<ChatObservation, AgentTurn>(ARITH_ENV_ID);
    for (const taskIndex of [0, 1, 2, 10, 11, 12]) {
      const episode = await runExpertEpisode(env, ARITH_ENV_ID, { taskIndex });
      expect(episode.reward, JSON.stringify(episode.info)).toBe(1);
      expect(episode.turns).toBe(2);
    }
    await env.close();
    const report = await suiteForEnv(ARITH_ENV_ID).replay!(ARITH_ENV_ID, { gold: false, limit: 30 });
    expect(report).toMatchObject({ total: 30, succeeded: 30, failures: [] });
  });
});
