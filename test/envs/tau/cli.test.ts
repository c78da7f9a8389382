// The envs subcommands owned by the tau suite: conform, replay (gold and expert), export-sft and the
// interactive play loop, run on the real data and real files.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { conformCommand, exportSftCommand, replayCommand } from "../../../src/cli/commands/envs-replay.js";
import { parseLine, playInteractive } from "../../../src/cli/commands/envs-play.js";
import type { AgentTurn, ChatObservation } from "../../../src/core/index.js";
import { make } from "../../../src/gym/registry.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { TAU_AIRLINE_ID, TAU_RETAIL_ID } from "../../../src/envs/tau/index.js";
import { expectedFile, taskFile } from "../../../src/envs/tau/tasks.js";

registerBundledEnvs();
const dir = mkdtempSync(join(tmpdir(), "tau-cli-"));

describe("envs conform", () => {
  it("passes on the bundled airline files and fails, naming the task, on a wrong expected file", () => {
    const ok = conformCommand(TAU_AIRLINE_ID, { tasks: taskFile("airline", "dev"), expected: expectedFile("airline", "dev") });
    expect(ok.exitCode).toBe(0);
    expect(ok.text).toContain("25/25 tasks match");
    const expected = JSON.parse(readFileSync(expectedFile("airline", "dev"), "utf8"));
    expected.tasks[0].changed_records.reservations.HATHAT.insurance = "yes";
    writeFileSync(join(dir, "bad.json"), JSON.stringify(expected));
    const bad = conformCommand(TAU_AIRLINE_ID, { tasks: taskFile("airline", "dev"), expected: join(dir, "bad.json") });
    expect(bad.exitCode).toBe(1);
    expect(bad.text).toContain("task 0: changed records differ at .reservations.HATHAT.insurance");
    expect(bad.text).toContain("24/25 tasks match");
  });

  it("refuses a non-tau env and missing flags with what to do", () => {
    expect(() => conformCommand("sinkflex/arith-v0", { tasks: "a", expected: "b" })).toThrow(/retail|airline/);
    expect(() => conformCommand(TAU_RETAIL_ID, {})).toThrow(/--tasks FILE and --expected FILE/);
  });
});

describe("the sinkflex binary", () => {
  it("runs envs conform as a subcommand, with its exit codes", () => {
    const run = (...args: string[]) => spawnSync(process.execPath, ["bin/sinkflex.mjs", "envs", ...args], { encoding: "utf8", timeout: 60_000 });
    const ok = run("conform", TAU_AIRLINE_ID, "--tasks", taskFile("airline", "dev"), "--expected", expectedFile("airline", "dev"));
    expect(ok.stdout).toContain("25/25 tasks match");
    expect(ok.status).toBe(0);
    const usage = run("conform", TAU_AIRLINE_ID);
    expect(usage.stderr).toContain("--tasks FILE and --expected FILE");
    expect(usage.status).toBe(2);
  });
});

describe("envs replay", () => {
  it("gold replay of the airline tasks succeeds on all; the expert on the first retail tasks of a task file", async () => {
    const gold = await replayCommand(TAU_AIRLINE_ID, { gold: true });
    expect(gold.text).toMatch(/25\/25 succeeded \(100\.0%\); expected at least 100\.0%/);
    expect(gold.exitCode).toBe(0);
    const expert = await replayCommand(TAU_RETAIL_ID, { tasks: taskFile("retail", "dev"), limit: "10" });
    expect(expert.text).toMatch(/10\/10 succeeded/);
    expect(expert.exitCode).toBe(0);
  });

  it("exits 1 when the rate is not reached (a task whose user the database does not know)", async () => {
    const tasks = JSON.parse(readFileSync(taskFile("retail", "dev"), "utf8")).slice(0, 3);
    // A user who is not in the database: the expert cannot identify them, so nothing is changed.
    tasks[0].instruction = tasks[0].instruction.replace(/Your name is [^.]*\./, "Your name is Nobody Atall and your zip code is 00000.");
    tasks[0].instruction = tasks[0].instruction.replace(/your email is \S+/, "your email is nobody@nowhere.example.");
    writeFileSync(join(dir, "tasks.json"), JSON.stringify(tasks));
    const result = await replayCommand(TAU_RETAIL_ID, { tasks: join(dir, "tasks.json") });
    expect(result.text).toMatch(/2\/3 succeeded/);
    expect(result.text).toContain("task 0:");
    expect(result.exitCode).toBe(1);
  });
});

describe("envs export-sft", () => {
  it("writes OpenAI chat JSONL with tools and tool_calls", async () => {
    const out = join(dir, "sft.jsonl");
    const result = await exportSftCommand(TAU_AIRLINE_ID, { out, limit: "3" });
    expect(result.exitCode).toBe(0);
    const lines = readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(lines).toHaveLength(3);
    const rec = lines[0];
    expect(rec.tools).toHaveLength(14);
    expect(rec.tools[0].type).toBe("function");
    expect(rec.messages[0].role).toBe("system");
    const withCall = rec.messages.find((m: any) => m.tool_calls);
    expect(withCall.tool_calls[0]).toMatchObject({ type: "function", function: { name: "get_user_details" } });
    const toolMsg = rec.messages.find((m: any) => m.role === "tool");
    expect(toolMsg.tool_call_id).toBe(withCall.tool_calls[0].id);
    expect(rec.metadata).toEqual({ env: TAU_AIRLINE_ID, taskIndex: 0, reward: 1 });
  });
});

describe("envs play", () => {
  it("parses messages, tool calls and commands", () => {
    expect(parseLine("hello there", 1)).toEqual({ turn: { content: "hello there", toolCalls: [] } });
    expect(parseLine('/call get_user_details {"user_id": "x"}', 2)).toEqual({
      turn: { content: "", toolCalls: [{ id: "call_2", name: "get_user_details", arguments: '{"user_id": "x"}' }] },
    });
    expect(parseLine("/tools", 1)).toEqual({ command: "tools" });
    expect(parseLine("/oops", 1)).toMatchObject({ error: expect.stringContaining("unknown command") });
    expect(parseLine("   ", 1)).toBeUndefined();
  });

  it("plays an episode typed on a stream to the end and shows the reward", async () => {
    const env = await make<ChatObservation, AgentTurn>(TAU_RETAIL_ID, { taskSet: "dev" });
    const input = new PassThrough();
    const output = new PassThrough();
    let shown = "";
    output.on("data", (c) => (shown += c));
    input.end(
      [
        "/tools",
        "Hello, could you tell me your email or your name and zip code?",
        '/call transfer_to_human_agents {"summary": "test"}',
        "never read",
      ].join("\n") + "\n",
    );
    const result = await playInteractive(env, { input, output }, { taskIndex: 0, seed: 1 });
    expect(result).toEqual({ reward: 0, ended: true, steps: 2 });
    expect(shown).toContain("[system] # Retail agent policy");
    expect(shown).toContain("find_user_id_by_email(email: string)");
    expect(shown).toMatch(/\[user\] My (name|email) is/);
    expect(shown).toContain("[tool transfer_to_human_agents] Transfer successful");
    expect(shown).toContain("reward 0 (transfer_to_human_agents)");
    await env.close();
  });
});
