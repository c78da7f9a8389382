/**
 * Which bash tasks may fail in `envs replay --gold` is known by what the tasks are (their tree and
 * reference command), never by a task file's name or a count of failures: a user's file named like
 * a bundled one (`*_1.json`) inherits nothing, a real failure is reported by name and fails the
 * replay, and a bundled nondeterministic task copied into another file stays allowed to fail there.
 * `--tree` names the tree of a user's file whatever its name.
 */
import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { replayCommand } from "../../../src/cli/commands/envs-replay.js";
import { NL2BASH_ENV_ID, NONDETERMINISTIC_GOLD } from "../../../src/envs/bash/index.js";
import { bashTaskKey, loadNl2BashTasks } from "../../../src/envs/bash/tasks.js";

const scratch = mkdtempSync(join(tmpdir(), "sinkflex-test-bash-replay-"));
chmodSync(scratch, 0o755); // the sandbox's uid must reach the trees created inside
process.env.TMPDIR = scratch;
const files = mkdtempSync(join(tmpdir(), "sinkflex-test-bash-tasks-"));
afterAll(() => {
  rmSync(files, { recursive: true, force: true });
  const left = readdirSync(scratch);
  rmSync(scratch, { recursive: true, force: true });
  expect(left).toEqual([]);
});

/** Twelve quick tasks; `at` maps an index to another reference command. */
function taskFile(name: string, at: Record<number, string>): string {
  const path = join(files, name);
  const tasks = Array.from({ length: 12 }, (_, i) => ({ query: `Task ${i}.`, gold: at[i] ?? `ls dir1 | head -${i + 1}` }));
  writeFileSync(path, JSON.stringify(tasks));
  return path;
}

describe("bash replay: expected failures by task content", () => {
  it("keys every listed nondeterministic task by its bundled tree and command", () => {
    const bundled = loadNl2BashTasks();
    for (const [key, { task }] of Object.entries(NONDETERMINISTIC_GOLD)) {
      const t = bundled.find((b) => b.id === task);
      expect(t && bashTaskKey(t.fs, t.gold), task).toBe(key);
    }
  });

  it("a user's *_1.json inherits no expected failures: a real failure at a bundled failing position fails the replay, listed", async () => {
    // Positions 6 and 11 are fs_1's nondeterministic tasks; here 11 is a command that never repeats itself.
    const file = taskFile("mine_1.json", { 11: "date +%s%N" });
    const r = await replayCommand(NL2BASH_ENV_ID, { gold: true, tasks: file });
    expect(r.text).toMatch(/11\/12 succeeded/);
    expect(r.text).toMatch(/1 unexpected failures; 0 tasks may fail/);
    expect(r.text).toMatch(/unexpected: task mine_1\.json\/11: /);
    expect(r.exitCode).toBe(1);
  }, 180_000);

  it("--tree names a user's file's tree; a bundled nondeterministic task keeps its allowance in any file and position", async () => {
    const gold = loadNl2BashTasks().find((t) => t.id === "nl2bash/fs_2/42")!.gold;
    const file = taskFile("held-out.json", { 3: gold });
    await expect(replayCommand(NL2BASH_ENV_ID, { gold: true, tasks: file })).rejects.toThrow(/--tree testbed\|system\|workspace/);
    await expect(replayCommand(NL2BASH_ENV_ID, { gold: true, tasks: file, tree: "home" })).rejects.toThrow(/--tree must be one of testbed, system, workspace/);
    // On /system the ls of a missing dir1 fails the same way in both runs, so only task 3 may differ.
    const r = await replayCommand(NL2BASH_ENV_ID, { gold: true, tasks: file, tree: "system", limit: "4" });
    expect(r.text).toMatch(/0 unexpected failures; 1 tasks may fail \(held-out\.json\/3\)/);
    expect(r.exitCode).toBe(0);
  }, 180_000);
});
