import { describe, expect, it } from "vitest";
import { cachedTasks } from "../../src/envs/task-cache.js";
import { createArithEnv } from "../../src/envs/arith/env.js";

describe("the generated-task cache", () => {
  it("generates a suite's tasks once per options and hands every env the same frozen copy", () => {
    let calls = 0;
    const make = () => {
      calls++;
      return [{ question: "1 + 1", answer: 2, parts: [1, 1] }];
    };
    const a = cachedTasks("test-suite", { count: 1, seed: 3 }, make);
    const b = cachedTasks("test-suite", { count: 1, seed: 3 }, make);
    expect(b).toBe(a);
    expect(calls).toBe(1);
    // Other options, or another suite with the same options, generate their own.
    expect(cachedTasks("test-suite", { count: 1, seed: 4 }, make)).not.toBe(a);
    expect(cachedTasks("other-suite", { count: 1, seed: 3 }, make)).not.toBe(a);
    expect(calls).toBe(3);
    // A task cannot be changed behind the next episode's back.
    expect(() => {
      (a[0] as { answer: number }).answer = 3;
    }).toThrow(TypeError);
    expect(() => {
      (a[0] as { parts: number[] }).parts.push(2);
    }).toThrow(TypeError);
  });

  it("keeps the 32 most recently used lists", () => {
    let calls = 0;
    const make = () => {
      calls++;
      return [calls];
    };
    const first = cachedTasks("lru", 0, make);
    for (let i = 1; i <= 32; i++) cachedTasks("lru", i, make);
    expect(calls).toBe(33);
    expect(cachedTasks("lru", 0, make)).not.toBe(first); // evicted, generated again
    expect(calls).toBe(34);
    expect(cachedTasks("lru", 32, make)).toEqual([33]); // still cached
    expect(calls).toBe(34);
  });

  it("two arith envs with the same options play the same tasks", async () => {
    const e1 = createArithEnv({ count: 50, difficulty: 1 });
    const e2 = createArithEnv({ count: 50, difficulty: 1 });
    const [o1] = await e1.reset({ seed: 1, options: { taskIndex: 7 } });
    const [o2] = await e2.reset({ seed: 1, options: { taskIndex: 7 } });
    expect(o2).toEqual(o1);
    await e1.close();
    await e2.close();
  });
});
