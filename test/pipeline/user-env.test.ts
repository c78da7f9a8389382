/**
 * A user's env in the pipeline: an env with no expert (SFT from sft.data alone, or a clear error when
 * there is no data at all), tasks that differ only in hidden state (taskKey) and the warning when a
 * held-out set is smaller than asked, sft.data checked against the env, and GRPO steps with no signal.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { toOpenAIChatRecord } from "../../src/envs/suite.js";
import { register, registeredIds } from "../../src/gym/registry.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { readSftData } from "../../src/pipeline/sft-data.js";
import { expertEpisodeCount, planSuites } from "../../src/pipeline/tasks.js";
import { train } from "../../src/pipeline/train.js";
import { arrayTasks, ToolEnv } from "../../src/tools/tool-env.js";
import { functionTool, toolSpec } from "../../src/tools/tool.js";

const scratch = mkdtempSync(join(tmpdir(), "user-env-pipeline-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** 90 tasks, 9 distinct prompts; the hidden stock differs. */
const TASKS = Array.from({ length: 90 }, (_, i) => ({ item: ["widget", "gadget", "sprocket"][i % 3]!, want: 1 + (Math.floor(i / 3) % 3), stock: i }));
type Task = (typeof TASKS)[number];
const lookup = functionTool({ name: "get_stock", description: "Units in stock.", parameters: z.object({ item: z.string() }), execute: () => "3" });
const reserve = functionTool({ name: "reserve", description: "Reserve and finish.", parameters: z.object({ item: z.string(), qty: z.number() }), execute: (_a, ctx) => (ctx.finish("done"), "ok") });

function registerInventory(id: string, hooks: { taskKey?: boolean; reward?: number }): string {
  if (registeredIds().includes(id)) return id;
  register(id, () => new ToolEnv<Task, null>({
    name: "Inventory",
    tasks: arrayTasks(TASKS),
    tools: [lookup, reserve],
    open: async (t) => ({ state: null, messages: [{ role: "system", content: "Inventory desk." }, { role: "user", content: `Reserve ${t.want} ${t.item}.` }] }),
    score: async () => ({ reward: hooks.reward ?? 1, evidence: {} }),
    ...(hooks.taskKey ? { taskKey: (t: Task) => t } : {}),
  }), { suite: id.split("/")[1]!.replace(/-v\d+$/, ""), description: "test inventory", maxEpisodeSteps: 4 });
  return id;
}

/** One demonstration per task index, in OpenAI chat format with the env's tools. */
function demonstrations(file: string, indices: number[]): string {
  const tools = [lookup, reserve].map(toolSpec);
  writeFileSync(file, indices.map((i) => {
    const t = TASKS[i]!;
    return JSON.stringify(toOpenAIChatRecord([
      { role: "system", content: "Inventory desk." },
      { role: "user", content: `Reserve ${t.want} ${t.item}.` },
      { role: "assistant", content: "", toolCalls: [{ id: "c1", name: "reserve", arguments: JSON.stringify({ item: t.item, qty: t.want }) }] },
      { role: "tool", toolCallId: "c1", name: "reserve", content: "ok" },
    ], tools));
  }).join("\n") + "\n");
  return file;
}

const tiny = { init: { hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64, maxPositions: 1024 } };

describe("an env without an expert", () => {
  it("plays no expert episodes, trains from sft.data alone, and without sft.data names the fix", async () => {
    const id = registerInventory("test/inv-noexpert-v0", { taskKey: true });
    const cfg = (data: string[], name: string) => validateConfig({ name, runsDir: join(scratch, "runs"), suites: [{ env: id }], model: tiny, sft: { data, epochs: 1, batchSize: 4 }, grpo: { enabled: false }, eval: { tasksPerSuite: 3 } });
    const [plan] = await planSuites(cfg([], "plan"));
    expect(plan!.hasExpert).toBe(false);
    expect(expertEpisodeCount(plan!, 64)).toBe(0);

    const run = await train(cfg([demonstrations(join(scratch, "demos.jsonl"), [0, 1, 2, 3, 4, 5])], "data-only"), { quiet: true });
    const setup = readFileSync(join(run.runDir, "metrics.jsonl"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)).find((r) => r.stage === "setup");
    expect(setup.sftConversations).toBe(6);

    await expect(train(cfg([], "no-data"), { quiet: true })).rejects.toThrow(/SFT has no data: test\/inv-noexpert-v0 has no expert and sft.data names no files\. Add demonstrations .* `expert` hook .* sft.enabled: false/);
  }, 120_000);
});

describe("held-out tasks that differ in hidden state", () => {
  it("are told apart by taskKey; without it, a held-out set smaller than asked carries a warning that says why and what to do", async () => {
    const keyed = registerInventory("test/inv-keyed-v0", { taskKey: true });
    const plain = registerInventory("test/inv-plain-v0", {});
    const cfg = (env: string) => validateConfig({ suites: [{ env }], model: tiny, eval: { tasksPerSuite: 20 }, sft: { enabled: false } });
    const [withKey] = await planSuites(cfg(keyed));
    expect(withKey!.evalTasks).toHaveLength(20);
    expect(withKey!.heldOutWarning).toBeUndefined();
    const [withoutKey] = await planSuites(cfg(plain));
    expect(withoutKey!.evalTasks).toHaveLength(3);
    expect(withoutKey!.heldOutWarning).toMatch(/^3 held-out tasks, not the 20 asked for \(eval.tasksPerSuite\): its 90 tasks are 9 distinct ones by their opening messages and tools.*`taskKey` hook/);
  }, 60_000);
});

describe("sft.data checked against the env", () => {
  it("names every problem with its file and line, converts object arguments (said once), and reports demonstrations of held-out tasks", async () => {
    const id = registerInventory("test/inv-data-v0", {});
    const [plan] = await planSuites(validateConfig({ suites: [{ env: id }], model: tiny, eval: { tasksPerSuite: 3 } }));
    const good = JSON.parse(readFileSync(demonstrations(join(scratch, "one.jsonl"), [0]), "utf8"));
    const bad = join(scratch, "bad.jsonl");
    const noTools = { messages: good.messages };
    const unknownTool = structuredClone(good);
    unknownTool.messages[2].tool_calls[0].function.name = "cancel";
    const dangling = structuredClone(good);
    dangling.messages[3].tool_call_id = "c9";
    const badArgs = structuredClone(good);
    badArgs.messages[2].tool_calls[0].function.arguments = "{item:";
    const wrongTools = structuredClone(good);
    wrongTools.tools[0].function.description = "Something else.";
    writeFileSync(bad, [good, noTools, unknownTool, dangling, badArgs, wrongTools].map((r) => JSON.stringify(r)).join("\n"));
    const err = await readSftData([bad], [plan!], () => undefined).then(() => undefined, (e: Error) => e.message);
    expect(err).toMatch(/^sft.data: \d+ problems in .*bad.jsonl; fix them and run again:/);
    expect(err).toMatch(/bad\.jsonl:2: no "tools"/);
    expect(err).toMatch(/bad\.jsonl:3: message 2: tool_calls\[0\]: calls "cancel", which is not one of the env's tools \(get_stock, reserve\)/);
    expect(err).toMatch(/bad\.jsonl:4: message 3: tool_call_id "c9" answers no unanswered call/);
    expect(err).toMatch(/bad\.jsonl:4: message 2: the call "c1" has no tool result/);
    expect(err).toMatch(/bad\.jsonl:5: message 2: tool_calls\[0\]: arguments are not valid JSON/);
    expect(err).toMatch(/bad\.jsonl:6: "tools" differ from the tools of inv-data .*description or parameters differ: get_stock/);
    expect(err).not.toMatch(/bad\.jsonl:1:/);

    // Object arguments are converted, said once; demonstrations of held-out tasks are reported.
    const objects = join(scratch, "objects.jsonl");
    const recs = plan!.evalTasks.map((t) => {
      const r = JSON.parse(readFileSync(demonstrations(join(scratch, "tmp.jsonl"), [t]), "utf8"));
      r.messages[2].tool_calls[0].function.arguments = JSON.parse(r.messages[2].tool_calls[0].function.arguments);
      return JSON.stringify(r);
    });
    writeFileSync(objects, recs.join("\n"));
    const warnings: string[] = [];
    const [read] = await readSftData([objects], [plan!], (m) => warnings.push(m));
    expect(read!.conversations).toHaveLength(3);
    expect(read!.conversations[0]!.messages[2]).toMatchObject({ toolCalls: [{ arguments: expect.stringMatching(/^\{"item":/) }] });
    expect(warnings.filter((w) => /arguments as a JSON object/.test(w))).toHaveLength(1);
    expect(warnings.some((w) => /3 conversations of .*objects\.jsonl open exactly as 3 of the 3 held-out tasks of inv-data/.test(w))).toBe(true);
  }, 60_000);
});

describe("GRPO with no learning signal", () => {
  it("a step whose groups all have equal rewards says so in the log and the metrics", async () => {
    const id = registerInventory("test/inv-flat-v0", { taskKey: true, reward: 0 });
    const cfg = validateConfig({
      name: "flat", runsDir: join(scratch, "runs"), suites: [{ env: id }], model: tiny,
      sft: { data: [demonstrations(join(scratch, "flat.jsonl"), [0, 1, 2, 3])], epochs: 1, batchSize: 4 },
      grpo: { steps: 2, batchTasks: 2, groupSize: 2, maxTurns: 1, maxTokensPerTurn: 4, maxContextTokens: 512, concurrency: 4 },
      eval: { tasksPerSuite: 2 },
    });
    const lines: string[] = [];
    const spy = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => (lines.push(String(chunk)), true));
    try {
      await train(cfg, { quiet: false });
    } finally {
      spy.mockRestore();
    }
    const log = lines.join("");
    expect(log).toMatch(/GRPO step 1: no learning signal: all 2 groups had equal rewards within the group \(every reward 0\.000\)/);
    expect(log).toMatch(/GRPO learned nothing: in all 2 steps/);
    const grpo = readFileSync(join(scratch, "runs/flat/metrics.jsonl"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)).filter((r) => r.stage === "grpo");
    expect(grpo.map((r) => r.noSignal)).toEqual([true, true]);
  }, 120_000);
});
