/**
 * The bash env through its registration: the opening request, `run` and `submit`, escape attempts as
 * readable error observations, the reward against the reference on a fresh tree (output and tree), the
 * scripted expert over a sample of NL2Bash and generated tasks, and no temporary folder left behind.
 */
import { chmodSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { AgentTurn, ChatObservation } from "../../../src/core/index.js";
import type { Env } from "../../../src/gym/env.js";
import { make, registeredIds } from "../../../src/gym/registry.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { runExpertEpisode, suiteForEnv } from "../../../src/envs/suite.js";
import { generateBashTask } from "../../../src/envs/bash/generator.js";
import { NL2BASH_ENV_ID, NL2BASH_GEN_ENV_ID, registerBash } from "../../../src/envs/bash/index.js";
import { loadNl2BashTasks } from "../../../src/envs/bash/tasks.js";

registerBundledEnvs();
if (!registeredIds().includes(NL2BASH_ENV_ID)) registerBash();

const call = (name: string, command: string): AgentTurn => ({ content: "", toolCalls: [{ id: "c", name, arguments: JSON.stringify({ command }) }] });
const text = (obs: ChatObservation) => obs.messages.map((m) => m.content).join("\n");
// This file's own temporary folder, so that what other test files create at the same time is not counted.
const scratch = mkdtempSync(join(tmpdir(), "sinkflex-test-bash-"));
chmodSync(scratch, 0o755); // the sandbox's uid must reach the trees created inside
process.env.TMPDIR = scratch;
const tasks = loadNl2BashTasks();
const indexOf = (gold: string) => tasks.findIndex((t) => t.gold === gold);
afterAll(() => {
  const left = readdirSync(scratch);
  rmSync(scratch, { recursive: true, force: true });
  expect(left, "every episode's tree and sandbox folder must be removed").toEqual([]);
});

describe("sinkflex/nl2bash-v0", () => {
  it("loads the 173 NL2Bash execution tasks", () => {
    expect(tasks).toHaveLength(173);
    expect(new Set(tasks.map((t) => t.fs))).toEqual(new Set(["testbed", "system", "workspace"]));
  });

  it("runs commands in the task's tree, and reports escape attempts as errors the agent can read", async () => {
    const env: Env<ChatObservation, AgentTurn> = await make(NL2BASH_ENV_ID, { commandTimeoutMs: 1_000 });
    try {
      const [obs] = await env.reset({ seed: 1, options: { taskIndex: indexOf("find /testbed -name '*.php' -type f | xargs cat | wc -l") } });
      expect(obs.tools?.map((t) => t.name)).toEqual(["run", "submit"]);
      expect(obs.messages[1]!.content).toMatch(/php.*\n\n\(The files are in \/testbed, which is also the working directory\.\)$/s);
      let [o] = await env.step(call("run", "pwd; ls dir1"));
      expect(text(o)).toBe("/testbed\nFooBar\nREADME.md\nfoo01\nindex.php\nspecial.bin\nsubdir1\ntextfile1.txt");
      [o] = await env.step(call("run", "curl -s http://127.0.0.1:1/ || exec 3<>/dev/tcp/127.0.0.1/80"));
      expect(text(o)).toMatch(/Connection refused|Network is unreachable|not found/);
      [o] = await env.step(call("run", "echo x > /etc/hosts"));
      expect(text(o)).toMatch(/Read-only file system\n\[exit status 1\]$/);
      [o] = await env.step(call("run", "yes"));
      expect(text(o)).toMatch(/Error: the command printed more than \d+ bytes; it was stopped and its output cut\.$/);
      [o] = await env.step(call("run", "sleep 30"));
      expect(text(o)).toBe("Error: the command did not finish within 1 s and was stopped.");
      const [last, reward, terminated] = await env.step(call("run", ":(){ :|:& };:; sleep 0.5"));
      expect(text(last)).toMatch(/Error: the command hit the limit of \d+ processes/);
      expect([reward, terminated]).toEqual([0, false]);
    } finally {
      await env.close();
    }
  });

  it("rewards the reference's output and tree, and says why not", async () => {
    const env: Env<ChatObservation, AgentTurn> = await make(NL2BASH_ENV_ID);
    try {
      const phpLines = indexOf("find /testbed -name '*.php' -type f | xargs cat | wc -l");
      await env.reset({ seed: 2, options: { taskIndex: phpLines } });
      const [first, won, ended] = await env.step(call("submit", "cat $(find . -name '*.php') | wc -l"));
      expect(text(first)).toMatch(/^\d+\n\[submitted\]$/);
      expect([won, ended]).toEqual([1, true]);
      let reward: number;
      let info: Record<string, unknown>;

      await env.reset({ seed: 2, options: { taskIndex: phpLines } });
      [, reward, , , info] = await env.step(call("submit", "find . -name '*.php' | wc -l"));
      expect(reward).toBe(0);
      expect(info.evidence).toMatchObject({ outputEqual: false, treeDiff: [] });

      await env.reset({ seed: 3, options: { taskIndex: indexOf("find /system/folder1 -name '*.log' -print0 | xargs -0 rm") } });
      await env.step(call("run", "touch stray.txt"));
      [, reward, , , info] = await env.step(call("submit", "rm folder1/*.log"));
      expect(reward).toBe(0);
      expect(info.evidence).toMatchObject({ outputEqual: true, treeDiff: ["unexpected file /stray.txt"] });
    } finally {
      await env.close();
    }
  });

  it("the scripted expert's gold replay succeeds on a sample of tasks", async () => {
    const report = await suiteForEnv(NL2BASH_ENV_ID).replay!(NL2BASH_ENV_ID, { gold: true, limit: 8 });
    // The first 8 include one known-nondeterministic task (a search of the whole root); it may pass or not.
    expect(report.expectedRate).toBe(7 / 8);
    expect(report.failures.filter((f) => !f.reason.startsWith("expected: "))).toEqual([]);
    expect(report.succeeded / report.total).toBeGreaterThanOrEqual(report.expectedRate);
  }, 60_000);

  it("a turn without a tool call ends the episode unsubmitted", async () => {
    const env: Env<ChatObservation, AgentTurn> = await make(NL2BASH_ENV_ID);
    try {
      await env.reset({ seed: 4 });
      const [, reward, terminated, , info] = await env.step({ content: "I am done.", toolCalls: [] });
      expect([reward, terminated]).toEqual([0, true]);
      expect(info.evidence).toMatchObject({ submitted: false });
    } finally {
      await env.close();
    }
  });
});

describe("sinkflex/nl2bash-gen-v0", () => {
  it("generates the same task for the same seed and index, in three levels", () => {
    expect(generateBashTask({ seed: 5 }, 7)).toEqual(generateBashTask({ seed: 5 }, 7));
    expect(new Set([0, 1, 2].map((i) => generateBashTask({ seed: 5 }, i).difficulty))).toEqual(new Set([1, 2, 3]));
  });

  it("the expert solves generated tasks of every level and tree", async () => {
    const env = await make(NL2BASH_GEN_ENV_ID, { count: 9, taskSeed: 3 });
    try {
      for (let taskIndex = 0; taskIndex < 9; taskIndex++) {
        const episode = await runExpertEpisode(env, NL2BASH_GEN_ENV_ID, { taskIndex });
        expect(episode.reward, JSON.stringify(episode.info.evidence)).toBe(1);
      }
    } finally {
      await env.close();
    }
  }, 60_000);
});
