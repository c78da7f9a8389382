/**
 * The SWE-style env over real sandboxed Python and JavaScript test runs: generated repositories
 * (deterministic, three levels), every bug template's hidden tests failing on the bug and passing on
 * the fix in both languages, the file tools and their errors (paths outside the repository refused,
 * symlinks included), the scripted expert, the reward on a fresh copy (edited tests do not count),
 * and a clean close.
 */
import { existsSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTurn } from "../../../src/core/index.js";
import type { ToolEnv } from "../../../src/tools/tool-env.js";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import {
  BUG_TEMPLATES,
  createSweEnv,
  generateSweTask,
  generateSweTasks,
  registerCodeSuite,
  replayCode,
  runHiddenTests,
  SWE_ENV_ID,
  type SweState,
  type SweTask,
} from "../../../src/envs/code/index.js";

registerCodeSuite();

const call = (name: string, args: Record<string, unknown> = {}): AgentTurn => ({ content: "", toolCalls: [{ id: "c1", name, arguments: JSON.stringify(args) }] });
const fixed = (task: SweTask): Record<string, string> => ({ ...task.files, [task.fix.path]: task.files[task.fix.path]!.replace(task.fix.search, task.fix.replace) });

describe("generated repositories", () => {
  it("are deterministic per seed, cycle levels and languages, and differ between seeds", () => {
    const a = generateSweTasks({ count: 12, seed: 4 });
    expect(generateSweTasks({ count: 12, seed: 4 })).toEqual(a);
    expect(generateSweTasks({ count: 12, seed: 5 }).map((t) => t.files)).not.toEqual(a.map((t) => t.files));
    expect(new Set(a.map((t) => t.level))).toEqual(new Set([1, 2, 3]));
    expect(new Set(a.map((t) => t.lang))).toEqual(new Set(["python", "javascript"]));
    expect(() => generateSweTasks({ count: 1, levels: [4] })).toThrow(/level 4/);
  });

  it("level 1 has one module; level 3 adds a dispatcher and tests only through it", () => {
    const one = generateSweTask(0, { seed: 1, level: 1, lang: "python" });
    expect(Object.keys(one.files).filter((p) => p.endsWith(".py") && !p.startsWith("tests/") && !p.endsWith("__init__.py"))).toHaveLength(1);
    expect(one.issue).toMatch(/does not return/);
    const three = generateSweTask(1, { seed: 1, level: 3, lang: "javascript" });
    expect(Object.keys(three.files)).toContain("src/api.js");
    expect(Object.keys(three.files).filter((p) => p.startsWith("tests/"))).toEqual(["tests/api.test.js"]);
    expect(three.issue).toMatch(/^`run\("/);
    expect(three.files[three.fix.path]!.split(three.fix.search)).toHaveLength(2);
  });

  it("every bug template in both languages: hidden tests fail on the bug and pass with the fix", async () => {
    // Two checks at a time (buggy and fixed), to keep the test short.
    for (const [i, template] of BUG_TEMPLATES.entries()) {
      for (const lang of ["python", "javascript"] as const) {
        const task = generateSweTask(i, { seed: 2, level: 1, lang, bug: template.id });
        const [broken, good] = await Promise.all([runHiddenTests(task, task.files), runHiddenTests(task, fixed(task))]);
        expect(broken.passed, `${template.id} ${lang}: hidden tests pass on the buggy code\n${broken.output}`).toBe(false);
        expect(good.passed, `${template.id} ${lang}: hidden tests fail with the fix\n${good.output}`).toBe(true);
      }
    }
  }, 60_000);
});

describe("the env", () => {
  let env: ToolEnv<SweTask, SweState>;
  beforeAll(() => {
    env = createSweEnv({ count: 6 });
  });
  afterAll(async () => {
    await env.close();
  });

  it("file tools: list, read with line numbers, search, edit; clear errors", async () => {
    await env.reset({ seed: 0, options: { taskIndex: 0 } });
    const task = env.current!.task;
    const step = async (turn: AgentTurn) => (await env.step(turn))[0].messages[0]!;
    expect(new Set((await step(call("list_files"))).content.split("\n"))).toEqual(new Set(Object.keys(task.files)));
    const read = await step(call("read_file", { path: task.fix.path, start_line: 1, end_line: 2 }));
    expect(read.content).toMatch(/^1 \| /);
    expect(read.content.split("\n")).toHaveLength(2);
    const hits = await step(call("search", { pattern: task.fix.search.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") }));
    expect(hits.content).toContain(`${task.fix.path}:`);
    expect((await step(call("search", { pattern: "(" }))).content).toMatch(/not a valid regular expression/);
    expect((await step(call("edit_file", { path: task.fix.path, search: "no such text", replace: "x" }))).content).toMatch(/does not occur/);
    expect((await step(call("edit_file", { path: task.fix.path, search: "\n", replace: "\n" }))).content).toMatch(/occurs \d+ times/);
    expect((await step(call("edit_file", { path: "notes/new.txt", search: "", replace: "hello\n" }))).content).toMatch(/Created notes\/new.txt/);
    expect((await step(call("read_file", { path: "notes/new.txt" }))).content).toBe("1 | hello");
    expect((await step(call("read_file", { path: "../../etc/passwd" }))).content).toMatch(/outside the repository/);
    expect((await step(call("read_file", { path: "/etc/passwd" }))).content).toMatch(/outside the repository/);
    symlinkSync("/etc", join(env.current!.state.workspace.dir, "escape"));
    expect((await step(call("read_file", { path: "escape/passwd" }))).content).toMatch(/leads outside the repository/);
    expect((await step(call("edit_file", { path: "escape/evil", search: "", replace: "x" }))).content).toMatch(/leads outside the repository/);
    expect((await step(call("read_file", { path: "missing.py" }))).content).toMatch(/no file "missing.py"/);
  });

  it("the scripted expert: tests fail, the fix makes them pass, the hidden tests decide 1", async () => {
    for (const taskIndex of [2, 3]) {
      const ep = await runExpertEpisode(env, SWE_ENV_ID, { taskIndex });
      const runs = ep.messages.filter((m) => m.role === "tool" && m.name === "run_tests").map((m) => m.content);
      expect(runs).toHaveLength(2);
      expect(runs[0]).toMatch(/\[exit status 1\]$/);
      expect(runs[1]).toMatch(/\[exit status 0\]$/);
      expect(runs[1]).not.toMatch(/\d+\.\d+ms|in \d+\.\d+s/);
      expect(ep.reward, JSON.stringify(ep.info.evidence)).toBe(1);
    }
  }, 30_000);

  it("no fix, or tests edited to pass, scores 0; the workspace is removed on reset", async () => {
    await env.reset({ seed: 0, options: { taskIndex: 0 } });
    const dir = env.current!.state.workspace.dir;
    const [, reward0, done0, , info0] = await env.step(call("submit"));
    expect([reward0, done0]).toEqual([0, true]);
    expect((info0.evidence as { hiddenTests: string }).hiddenTests).toMatch(/FAIL/);

    await env.reset({ seed: 0, options: { taskIndex: 0 } });
    expect(existsSync(dir)).toBe(false);
    const task = env.current!.task;
    const testFile = Object.keys(task.files).find((p) => p.startsWith("tests/test_"))!;
    await env.step(call("edit_file", { path: testFile, search: "import unittest\n", replace: "import unittest\nunittest.TestCase.assertEqual = lambda *args: None\n" }));
    const [tests] = await env.step(call("run_tests"));
    expect(tests.messages[0]!.content).toMatch(/\[exit status 0\]$/);
    const [, reward1] = await env.step(call("submit"));
    expect(reward1).toBe(0);
  }, 30_000);

  it("replay reports the expert's successes", async () => {
    const report = await replayCode(SWE_ENV_ID, { gold: false, limit: 2 });
    expect(report).toMatchObject({ total: 2, succeeded: 2, expectedRate: 1, failures: [] });
  }, 30_000);
});

describe("options and close", () => {
  it("unknown options are errors; close removes the workspace", async () => {
    expect(() => createSweEnv({ colour: 1 } as never)).toThrow(/unknown option\(s\) colour/);
    expect(() => createSweEnv({ languages: ["rust"] as never })).toThrow(/"rust" is not supported/);
    const env = createSweEnv({ count: 1 });
    await env.reset({ seed: 1 });
    const dir = env.current!.state.workspace.dir;
    expect(existsSync(dir)).toBe(true);
    await env.close();
    await env.close();
    expect(existsSync(dir)).toBe(false);
  });
});
