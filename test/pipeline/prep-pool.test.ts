import { afterAll, describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { allSuites, registerSuite } from "../../src/envs/suite.js";
import { register, spec, unregister } from "../../src/gym/registry.js";
import { createPolicy } from "../../src/pipeline/policy.js";
import { PrepPool } from "../../src/pipeline/prep-pool.js";
import { conversationToExample } from "../../src/pipeline/sft-data.js";
import { expertEpisodes, makeChatEnv, planSuites, readTaskContents } from "../../src/pipeline/tasks.js";
import { validateConfig } from "../../src/pipeline/config.js";

registerBundledEnvs();
// A suite registered at run time, in this thread only: a worker thread cannot make it.
const LOCAL_ID = "test/arith-local-v0";
register(LOCAL_ID, (options) => spec("sinkflex/arith-v0").factory(options), { ...spec("sinkflex/arith-v0").defaults, suite: "arith-local" });
const arith = allSuites().find((s) => s.name === "arith")!;
registerSuite({ name: "arith-local", envIds: [LOCAL_ID], createExpert: (_id, task) => arith.createExpert("sinkflex/arith-v0", task) });
afterAll(() => unregister(LOCAL_ID));

const config = validateConfig(
  {
    name: "prep",
    runsDir: "/tmp/unused",
    suites: [
      { env: "sinkflex/arith-v0", options: { difficulty: 1, count: 200 } },
      { env: "sinkflex/alfworld-gen-v0", options: { source: "generated", difficulty: 1, count: 200 } },
      { env: "sinkflex/spider-sql-v0", options: { taskSource: "generated", levels: [1], count: 60 } },
      { env: LOCAL_ID, options: { difficulty: 1, count: 200 } },
    ],
    model: { init: { hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64 } },
    eval: { tasksPerSuite: 10 },
  },
  "the test config",
);

describe("data preparation on worker threads", () => {
  it("gives the same expert conversations and SFT examples as one thread, in the same order", async () => {
    const plans = await planSuites(config);
    const count = 60;
    const one = new PrepPool({ threads: 1 });
    const two = new PrepPool({ threads: 2, minParallelItems: 0 });
    try {
      let ticks = 0;
      const serial = await one.expertConversations(plans, count, 5);
      const parallel = await two.expertConversations(plans, count, 5, (n) => (ticks += n));
      // Every episode is reported, from the workers and from this thread (the run-time suite).
      expect(ticks).toBe(plans.reduce((n, p) => n + Math.min(count, p.trainTasks.length * 4), 0));
      expect(parallel).toEqual(serial);
      // And it is what expertEpisodes gives for each suite.
      const direct = await expertEpisodes(plans[1]!, count, 5);
      expect(serial[1]!.kept).toEqual(direct.kept.map((e) => ({ messages: e.messages, tools: e.tools })));
      expect(serial[1]!.kept.length).toBeGreaterThan(10);

      const conversations = serial.flatMap((s) => s.kept);
      const policy = createPolicy(config.model.init!, conversations, 0);
      const examples = await two.examples(policy, conversations);
      expect(examples).toHaveLength(conversations.length);
      examples.forEach((e, i) => {
        const want = conversationToExample(policy, conversations[i]!);
        expect(e.tokens).toEqual(want.tokens);
        expect([...e.lossMask]).toEqual([...want.lossMask]);
        expect(e.contextStart).toBe(want.contextStart);
        expect(e.drifted).toBe(want.drifted);
      });
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  }, 120_000);

  it("runs a suite's own sftEpisodes instead of the shared count, on the workers and on this thread", async () => {
    const own = validateConfig(
      {
        ...config,
        suites: config.suites.map((s) =>
          s.env === "sinkflex/arith-v0" ? { ...s, sftEpisodes: 25 } : s.env === LOCAL_ID ? { ...s, sftEpisodes: 7 } : s.env === "sinkflex/alfworld-gen-v0" ? { ...s, sftMistakes: 0.3 } : s,
        ),
      },
      "the test config",
    );
    const plans = await planSuites(own);
    expect(plans.map((p) => p.sftEpisodes)).toEqual([25, undefined, undefined, 7]);
    const two = new PrepPool({ threads: 2, minParallelItems: 0 });
    try {
      const out = await two.expertConversations(plans, 12, 5);
      expect(out.map((o) => o.kept.length + o.failed)).toEqual([25, 12, 12, 7]);
      // The same episodes as the suite's own count asked of expertEpisodes directly; household's with its mistakes.
      for (const suite of [0, 1]) {
        const direct = await expertEpisodes(plans[suite]!, 12, 5);
        expect(out[suite]!.kept).toEqual(direct.kept.map((e) => ({ messages: e.messages, tools: e.tools })));
      }
      expect(out[1]!.kept.some((c) => c.messages.some((m) => m.role === "assistant" && m.weight === 0))).toBe(true);
    } finally {
      await two.close();
    }
  }, 120_000);

  it("reads every task's contents on the workers as this thread does, in task order", async () => {
    const pool = new PrepPool({ threads: 2, minParallelItems: 0 });
    try {
      // The household set generates each task as it is first asked for; the run-time suite is read here.
      for (const s of [config.suites[1]!, config.suites[0]!, config.suites[3]!]) {
        const env = await makeChatEnv(s.env, s.options);
        try {
          const count = Number(env.metadata.taskCount);
          const serial = await readTaskContents(s.env, s.options, count, env);
          const parallel = await pool.taskContents(s.env, s.options, count, env);
          expect(parallel).toHaveLength(200);
          expect(parallel).toEqual(serial);
          expect(new Set(serial).size).toBeGreaterThan(50);
        } finally {
          await env.close();
        }
      }
    } finally {
      await pool.close();
    }
  }, 120_000);

  it("reports an error from a worker's job with its message, and can be used again", async () => {
    const plans = await planSuites(config);
    const pool = new PrepPool({ threads: 2, minParallelItems: 0 });
    try {
      // Task ids that do not exist: the env rejects them in the worker.
      const bad = [{ ...plans[0]!, sftTasks: [999_999] }];
      await expect(pool.expertConversations(bad, 4, 0)).rejects.toThrow(/data preparation failed in a worker thread: .*999999/);
      const good = await pool.expertConversations([plans[0]!], 4, 0);
      expect(good[0]!.kept.length + good[0]!.failed).toBe(4);
    } finally {
      await pool.close();
    }
  }, 60_000);

  it("rejects a thread count that is not a positive integer", () => {
    expect(() => new PrepPool({ threads: 0 })).toThrow(/threads must be an integer >= 1, got 0/);
  });
});
