/**
 * ToolEnv with function tools: every bad action becomes an error observation recorded in
 * `info.toolErrors`, never an exception, and good calls, finishing and scoring work.
 */
import { describe, expect, it } from "vitest";
import { z } from "zod";
import type { AgentTurn } from "../../src/core/index.js";
import { functionTool } from "../../src/tools/tool.js";
import { ToolEnv, arrayTasks } from "../../src/tools/tool-env.js";

interface Counter {
  total: number;
}

function counterEnv() {
  const add = functionTool({
    name: "add",
    description: "Add an amount to the counter",
    parameters: z.object({ amount: z.number().int().min(1).max(100), note: z.string().optional() }),
    execute: ({ amount }, ctx: { state: Counter }) => {
      ctx.state.total += amount;
      return { total: ctx.state.total };
    },
  });
  const even = functionTool({
    name: "even",
    description: "Accepts only even numbers (a refinement JSON Schema cannot express)",
    parameters: z.object({ n: z.number().refine((n) => n % 2 === 0, "n must be even") }),
    execute: ({ n }) => `ok ${n}`,
  });
  const boom = functionTool({ name: "boom", description: "Throws", parameters: z.object({}), execute: () => { throw new Error("the disk is on fire"); } });
  const hang = functionTool({ name: "hang", description: "Never answers", parameters: z.object({}), timeoutMs: 200, execute: () => new Promise(() => undefined) });
  const big = functionTool({ name: "big", description: "A long result", parameters: z.object({}), execute: () => "x".repeat(500) });
  const weird = functionTool({ name: "weird", description: "A result JSON cannot hold", parameters: z.object({}), execute: () => ({ n: 1n }) });
  const submit = functionTool({
    name: "submit",
    description: "Submit the final total",
    parameters: z.object({ total: z.number() }),
    execute: ({ total }, ctx) => {
      ctx.finish(`submitted ${total}`);
      return "submitted";
    },
  });
  return new ToolEnv<{ target: number }, Counter>({
    name: "CounterEnv",
    tasks: arrayTasks([{ target: 5 }, { target: 7 }]),
    tools: [add, even, boom, hang, big, weird, submit],
    maxResultChars: 100,
    open: async (task) => ({ state: { total: 0 }, messages: [{ role: "user", content: `Reach ${task.target}.` }] }),
    score: async (ep) => ({ reward: ep.state.total === ep.task.target ? 1 : 0, evidence: { total: ep.state.total } }),
  });
}

const turn = (...calls: [string, string][]): AgentTurn => ({ content: "", toolCalls: calls.map(([name, args], i) => ({ id: `c${i}`, name, arguments: args })) });

describe("ToolEnv with function tools", () => {
  it("derives the JSON Schema from zod and runs a good call", async () => {
    const env = counterEnv();
    const [obs] = await env.reset({ seed: 1, options: { taskIndex: 0 } });
    expect(obs.tools![0]).toEqual({
      name: "add",
      description: "Add an amount to the counter",
      parameters: expect.objectContaining({ type: "object", required: ["amount"], properties: expect.objectContaining({ amount: expect.objectContaining({ type: "integer", minimum: 1, maximum: 100 }) }) }),
    });
    const [o, r, term, trunc, info] = await env.step(turn(["add", '{"amount": 5}']));
    expect(o.messages).toEqual([{ role: "tool", toolCallId: "c0", name: "add", content: '{"total":5}' }]);
    expect([r, term, trunc, info.toolErrors]).toEqual([0, false, false, undefined]);
    const [, reward, done, , end] = await env.step(turn(["submit", '{"total": 5}']));
    expect([reward, done, end.finishReason, end.evidence]).toEqual([1, true, "submitted 5", { total: 5 }]);
    await expect(env.step(turn(["add", '{"amount": 1}']))).rejects.toThrow(/after the episode ended/);
    await env.close();
  });

  it("turns every kind of bad call into an error observation that says what is expected", async () => {
    const env = counterEnv();
    await env.reset({ seed: 2, options: { taskIndex: 1 } });
    const [obs, reward, terminated, , info] = await env.step(
      turn(
        ["add", '{"amount": 5'],
        ["nope", "{}"],
        ["add", '{"amount": "five"}'],
        ["add", "[1, 2]"],
        ["add", "null"],
        ["add", '{"amount": 2, "extra": true}'],
        ["even", '{"n": 3}'],
        ["boom", ""],
        ["hang", "{}"],
        ["weird", "{}"],
        ["big", "{}"],
        ["add", '{"amount": 2}'],
      ),
    );
    const texts = obs.messages.map((m) => m.content);
    expect(texts[0]).toMatch(/^Error: the arguments of "add" are not valid JSON \(.*\)\. Send a JSON object matching the tool's parameters: add\(\{amount: integer, note\?: string\}\)\.$/);
    expect(texts[1]).toBe("Error: unknown tool \"nope\". Available tools: add, even, boom, hang, big, weird, submit.");
    expect(texts[2]).toBe('Error: invalid arguments for "add": argument amount: must be integer. Expected: add({amount: integer, note?: string}).');
    expect(texts[3]).toMatch(/must be a JSON object, got an array\. Expected: add\(/);
    expect(texts[4]).toMatch(/must be a JSON object, got null\./);
    expect(texts[5]).toMatch(/unexpected property "extra"/);
    expect(texts[6]).toMatch(/^Error: "even" failed: invalid arguments: .*n must be even/);
    expect(texts[7]).toBe('Error: "boom" failed: the disk is on fire');
    expect(texts[8]).toMatch(/^Error: "hang" did not finish within 200 ms/);
    expect(texts[9]).toMatch(/^Error: "weird" failed: .*BigInt/);
    expect(texts[10]).toBe(`${"x".repeat(100)}\n[output truncated: 400 more characters]`);
    expect(texts[11]).toBe('{"total":2}');
    expect(obs.messages.slice(0, 10).every((m) => m.role === "tool" && m.isError)).toBe(true);
    expect((info.toolErrors as { kind: string }[]).map((e) => e.kind)).toEqual([
      "malformed_json",
      "unknown_tool",
      "invalid_arguments",
      "invalid_arguments",
      "invalid_arguments",
      "invalid_arguments",
      "tool_error",
      "tool_error",
      "timeout",
      "tool_error",
    ]);
    expect([reward, terminated]).toEqual([0, false]);
    // An action that is not a turn at all is an observation too.
    const [bad, , , , badInfo] = await env.step({ content: 42, toolCalls: "no" } as unknown as AgentTurn);
    expect(bad.messages[0]!.content).toMatch(/not a valid assistant turn/);
    expect(badInfo.toolErrors).toHaveLength(1);
    expect(env.current!.state.total).toBe(2);
    await env.close();
  });
});
