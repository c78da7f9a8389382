import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { expertEpisodeCount, expertEpisodes, makeChatEnv, planSuites } from "../../src/pipeline/tasks.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { generateRestTasks, restTaskKinds } from "../../src/envs/restapi/tasks.js";
import { RestWorld } from "../../src/envs/restapi/world.js";

registerBundledEnvs();

const config = (suite: Record<string, unknown>, tasksPerSuite = 50) =>
  validateConfig({ suites: [{ env: "sinkflex/arith-v0", options: { difficulty: 1, count: 600 }, ...suite }], model: { init: {} }, eval: { tasksPerSuite } });

/** What a reset of each of the 600 arith tasks shows, as JSON (the generator repeats some). */
async function arithContents(): Promise<string[]> {
  const env = await makeChatEnv("sinkflex/arith-v0", { difficulty: 1, count: 600 });
  const all: string[] = [];
  for (let t = 0; t < 600; t++) all.push(JSON.stringify((await env.reset({ seed: 0, options: { taskIndex: t } }))[0]));
  await env.close();
  return all;
}

/** The first of each distinct contents among `tasks`, in their order. */
const firstOfEach = (tasks: number[], all: string[]) => tasks.filter((t, k) => tasks.findIndex((u) => all[u] === all[t]) === k);

describe("planSuites", () => {
  it("holds out a suite's own evalTasks count, else eval.tasksPerSuite, at most a third of the tasks", async () => {
    expect((await planSuites(config({})))[0]!.evalTasks).toHaveLength(50);
    expect((await planSuites(config({ evalTasks: 120 })))[0]!.evalTasks).toHaveLength(120);
      });

  it("keeps the training tasks' order whatever number is held out, and never trains on a held-out task or its contents", async () => {
    const [small] = await planSuites(config({ evalTasks: 20 }));
    const [large] = await planSuites(config({ evalTasks: 150 }));
    // A larger held-out set only removes tasks from the training order.
    const largeHeld = new Set(large!.evalTasks);
    const all = await arithContents();
    const largeHeldContents = new Set(large!.evalTasks.map((t) => all[t]));
    expect(large!.trainTasks).toEqual(small!.trainTasks.filter((t) => !largeHeld.has(t) && !largeHeldContents.has(all[t])));
    for (const p of [small!, large!]) {
      const heldContents = p.evalTasks.map((t) => all[t]!);
      // Held-out tasks differ from each other, and no training task repeats one (this generator does repeat tasks).
      expect(new Set(heldContents).size).toBe(p.evalTasks.length);
      expect(p.trainTasks.some((t) => heldContents.includes(all[t]!))).toBe(false);
      expect(p.trainTasks.length + p.evalTasks.length).toBeLessThan(600);
      expect(new Set(p.trainTasks).size).toBe(p.trainTasks.length);
    }
    // One training task per distinct training contents: the first of each in the training order.
    for (const p of [small!, large!]) {
      expect(p.trainContents).toEqual(firstOfEach(p.trainTasks, all));
      expect(new Set(p.trainContents.map((t) => all[t])).size).toBe(p.trainContents.length);
      expect(p.trainContents.length).toBeLessThan(p.trainTasks.length);
    }
    // The larger held-out set contains the smaller one.
    expect(new Set(large!.evalTasks)).toEqual(new Set([...large!.evalTasks, ...small!.evalTasks]));
  });

  it("keeps rlTasks distinct training contents apart for GRPO alone: SFT's tasks and the held-out ones never share their contents", async () => {
    const [plain] = await planSuites(config({ evalTasks: 50 }));
    const [rl] = await planSuites(config({ evalTasks: 50, rlTasks: 40 }));
    const all = await arithContents();
    expect(plain!.rlTasks).toBeUndefined();
    expect(rl!.evalTasks).toEqual(plain!.evalTasks);
    const rlContents = new Set(rl!.rlTasks!.map((t) => all[t]));
    expect(rlContents.size).toBe(40);
    expect(rl!.rlTasks).toHaveLength(40);
    // SFT's tasks are the plain plan's less every task with a GRPO-only contents; none is held out.
    expect(rl!.trainTasks).toEqual(plain!.trainTasks.filter((t) => !rlContents.has(all[t])));
    expect(rl!.trainContents).toEqual(firstOfEach(rl!.trainTasks, all));
    expect(rl!.evalTasks.some((t) => rlContents.has(all[t]))).toBe(false);
    expect(rl!.trainContents.length).toBe(plain!.trainContents.length - 40);
    await expect(planSuites(config({ evalTasks: 50, rlTasks: 5000 }))).rejects.toThrow(/rlTasks is 5000, but it has \d+ distinct training tasks and SFT keeps at least half of them; ask for at most \d+/);
    const separate = { env: "sinkflex/arith-v0", options: { difficulty: 1, count: 600 }, evalOptions: { difficulty: 1, count: 100, taskSeed: 5 }, rlTasks: 10 };
    await expect(planSuites(validateConfig({ suites: [separate], model: { init: {} } }))).rejects.toThrow(/does not combine with evalOptions/);
  });

  it("with separate eval options, reads the training contents only for GRPO's or SFT's taskSampling \"content\"", async () => {
    const suite = { env: "sinkflex/arith-v0", options: { difficulty: 1, count: 600 }, evalOptions: { difficulty: 1, count: 100, taskSeed: 5 } };
    const [byTask] = await planSuites(validateConfig({ suites: [suite], model: { init: {} } }));
    expect(byTask!.trainContents).toEqual(byTask!.trainTasks);
    const [byContent] = await planSuites(validateConfig({ suites: [suite], model: { init: {} }, grpo: { taskSampling: "content" } }));
    const all = await arithContents();
    expect(byContent!.trainTasks).toEqual(byTask!.trainTasks);
    expect(byContent!.trainContents).toEqual(firstOfEach(byTask!.trainTasks, all));
    expect(byContent!.trainContents.length).toBeLessThan(600);
    // And for SFT's expert drawing by contents.
    const [sftByContent] = await planSuites(validateConfig({ suites: [suite], model: { init: {} }, sft: { taskSampling: "content" } }));
    expect(sftByContent!.sftTasks).toEqual(byContent!.trainContents);
  });

  it("gives SFT's expert the training tasks, or with sft.taskSampling \"content\" one task per distinct training contents", async () => {
    const [byTask] = await planSuites(config({ evalTasks: 50 }));
    expect(byTask!.sftTasks).toEqual(byTask!.trainTasks);
    const [byContent] = await planSuites(validateConfig({ suites: [{ env: "sinkflex/arith-v0", options: { difficulty: 1, count: 600 }, evalTasks: 50 }], model: { init: {} }, sft: { taskSampling: "content" } }));
    expect(byContent!.trainTasks).toEqual(byTask!.trainTasks);
    expect(byContent!.sftTasks).toEqual(byTask!.trainContents);
    // The expert plays them in turn, each at most 4 times.
    const all = await arithContents();
    const n = byContent!.sftTasks.length;
    const { kept } = await expertEpisodes(byContent!, n + 3, 0);
    const question = (t: number) => (JSON.parse(all[t]!) as { messages: { role: string; content: string }[] }).messages.find((m) => m.role === "user")!.content;
    const played = kept.map((e) => e.messages.find((m) => m.role === "user")!.content);
    expect(played).toEqual([...byContent!.sftTasks, ...byContent!.sftTasks.slice(0, 3)].map(question));
    expect(new Set(played.slice(0, n)).size).toBe(n);
    expect(expertEpisodeCount(byContent!, 10_000)).toBe(4 * n);
    expect(() => validateConfig({ suites: [{ env: "sinkflex/arith-v0" }], model: { init: {} }, sft: { taskSampling: "by-suite" } })).toThrow(/taskSampling/);
  });

  it("holds out at most a third of the distinct tasks", async () => {
    // 600 tasks drawn from fewer distinct ones (small sums repeat).
    const [plan] = await planSuites(config({ evalTasks: 5000 }));
    const distinct = new Set(await arithContents());
    expect(plan!.evalTasks).toHaveLength(Math.floor(distinct.size / 3));
  });

  it("holds out a uniform sample of the distinct contents, so a template with few distinct tasks still trains", async () => {
    // Level 1 of restapi cycles six templates; some have a handful of distinct questions repeated
    // hundreds of times (14 stock symbols), others hundreds (730 dates). Holding out the first distinct
    // contents met would take every stock question and leave the template no training task.
    const suite = { env: "sinkflex/restapi-v0", options: { levels: [1], count: 3000 }, evalTasks: 200 };
    const [plan] = await planSuites(validateConfig({ suites: [suite], model: { init: {} } }));
    const kinds = restTaskKinds()[1];
    // The env's own tasks (world seed 0, the default), so the template of each index is the generator's.
    const tasks = generateRestTasks(new RestWorld(0), { levels: [1], count: 3000 });
    const kindOf = (t: number) => tasks[t]!.kind;
    for (const kind of kinds) {
      const trained = plan!.trainTasks.filter((t) => kindOf(t) === kind).length;
      // 3000 / 6 tasks of each template; about a quarter of the distinct contents are held out.
      expect(trained, kind).toBeGreaterThan(250);
    }
    expect(plan!.evalTasks).toHaveLength(200);
  });

  it("when one suite fails, rejects only after every other suite has finished its planning", async () => {
    // The failing suite (an env id that does not exist) fails at once; the other still reads its contents.
    const cfg = validateConfig({
      suites: [
        // Options no other test uses: contents already read in this process are not read again.
        { env: "sinkflex/arith-v0", options: { difficulty: 1, count: 601 } },
        { env: "sinkflex/arith-v9" },
      ],
      model: { init: {} },
      eval: { tasksPerSuite: 50 },
    });
    let readsDone = 0;
    const slowReader = async (_id: string, _options: Record<string, unknown>, count: number) => {
      await new Promise((r) => setTimeout(r, 200));
      readsDone++;
      return Array.from({ length: count }, (_, t) => String(t));
    };
    await expect(planSuites(cfg, { contents: slowReader })).rejects.toThrow(/unknown env id "sinkflex\/arith-v9"/);
    // Nothing was still reading when the error came back (a caller stops its workers then).
    expect(readsDone).toBe(1);
  });

  it("rejects a count that is not a positive integer, naming the field", () => {
    expect(() => config({ evalTasks: 0 })).toThrow(/suites\.0\.evalTasks/);
    expect(() => config({ evalTasks: 2.5 })).toThrow(/suites\.0\.evalTasks/);
  });
});
