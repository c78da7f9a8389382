/**
 * The MINT-style env over the shared benchmark data and real sandboxed Python: every source loads
 * (HumanEval from its .gz), the data folder can be moved with SINKFLEX_DATA_DIR, the answer checks
 * (numbers, fractions, booleans, lists, options, text) accept right and refuse wrong answers,
 * run_code runs in the sandbox, code submissions are judged by the benchmark's tests, and the gold
 * replay succeeds on a sample of every source.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTurn } from "../../../src/core/index.js";
import type { ToolEnv } from "../../../src/tools/tool-env.js";
import { runExpertEpisode } from "../../../src/envs/suite.js";
import {
  checkAnswer,
  createMintEnv,
  dataDir,
  DEFAULT_MINT_SOURCES,
  loadMintSource,
  loadMintTasks,
  MINT_ENV_ID,
  registerCodeSuite,
  replayCode,
  type MintState,
  type MintTask,
} from "../../../src/envs/code/index.js";

registerCodeSuite();

const call = (name: string, args: Record<string, unknown>): AgentTurn => ({ content: "", toolCalls: [{ id: "c1", name, arguments: JSON.stringify(args) }] });
type AnswerTask = Extract<MintTask, { kind: "answer" }>;
const answerTask = (answerType: AnswerTask["answerType"], reference: AnswerTask["reference"], tolerance = 1e-6): AnswerTask => ({
  id: "t",
  source: "theoremqa",
  prompt: "",
  kind: "answer",
  answerType,
  reference,
  tolerance,
});

describe("data", () => {
  it("loads every source, HumanEval from its gzip file", () => {
    const counts = Object.fromEntries(["gsm8k", "math", "theoremqa", "mmlu", "hotpotqa", "mbpp", "humaneval", "human-eval"].map((s) => [s, loadMintSource(s as never).length]));
    expect(counts).toEqual({ gsm8k: 48, math: 100, theoremqa: 49, mmlu: 76, hotpotqa: 43, mbpp: 91, humaneval: 45, "human-eval": 164 });
    expect(loadMintTasks(DEFAULT_MINT_SOURCES)).toHaveLength(571);
    const he = loadMintSource("human-eval")[0]!;
    expect(he).toMatchObject({ id: "HumanEval/0", kind: "code", entryPoint: "has_close_elements" });
    expect(dataDir()).toMatch(/shared[/\\]data$/);
  });

  it("reads from SINKFLEX_DATA_DIR, and says what to do when a file is missing", () => {
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-mint-data-"));
    const saved = process.env.SINKFLEX_DATA_DIR;
    try {
      mkdirSync(join(dir, "mint"));
      writeFileSync(join(dir, "mint", "gsm8k.jsonl"), '{"id": 7, "prompt": "What is 6 times 7?", "reference": "42"}\n');
      process.env.SINKFLEX_DATA_DIR = dir;
      expect(loadMintTasks(["gsm8k"])).toEqual([expect.objectContaining({ id: "gsm8k-7", answerType: "integer", reference: 42 })]);
      expect(() => loadMintTasks(["math"])).toThrow(/not found; set SINKFLEX_DATA_DIR/);
    } finally {
      if (saved === undefined) delete process.env.SINKFLEX_DATA_DIR;
      else process.env.SINKFLEX_DATA_DIR = saved;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("answer checks", () => {
  it("accept the right answer in its usual forms and refuse wrong ones", () => {
    const num = answerTask("float", 0.75, 1e-4);
    for (const ok of ["0.75", "3/4", "\\frac{3}{4}", "$0.75$", "\\boxed{0.75}", "The answer is 0.75"]) expect(checkAnswer(num, ok).correct, ok).toBe(true);
    for (const bad of ["0.8", "", "none"]) expect(checkAnswer(num, bad).correct, bad).toBe(false);
    expect(checkAnswer(answerTask("integer", 1234), "1,234").correct).toBe(true);
    expect(checkAnswer(answerTask("float", 1.12, 1e-2), "1.125").correct).toBe(true);
    expect(checkAnswer(answerTask("float", 1.12, 1e-2), "1.2").correct).toBe(false);
    expect(checkAnswer(answerTask("bool", false), "False").correct).toBe(true);
    expect(checkAnswer(answerTask("bool", false), "yes").correct).toBe(false);
    expect(checkAnswer(answerTask("list", [0, 5]), "[0, 5]").correct).toBe(true);
    expect(checkAnswer(answerTask("list", [0, 5]), "[5, 0]").correct).toBe(false);
    expect(checkAnswer(answerTask("option", "c"), "(C) 18107").correct).toBe(true);
    expect(checkAnswer(answerTask("option", "c"), "B").correct).toBe(false);
    expect(checkAnswer(answerTask("text", "Robert Erskine Childers DSC"), "robert erskine childers, DSC.").correct).toBe(true);
    expect(checkAnswer(answerTask("text", "the late 12th Century"), "late 12th century").correct).toBe(true);
    expect(checkAnswer(answerTask("text", "yes"), "no").correct).toBe(false);
  });
});

describe("the env", () => {
  let env: ToolEnv<MintTask, MintState>;
  beforeAll(() => {
    env = createMintEnv({ sources: ["gsm8k", "human-eval", "mbpp"], perSource: 2, checkTimeoutMs: 3_000 });
  });
  afterAll(async () => {
    await env.close();
  });

  it("run_code runs Python in the sandbox: output, errors, no network", async () => {
    await env.reset({ seed: 0, options: { taskIndex: 0 } });
    const run = async (code: string) => (await env.step(call("run_code", { code })))[0].messages[0]!.content;
    expect(await run("print(sum(range(10)))")).toBe("45\n[exit status 0]");
    expect(await run("1/0")).toMatch(/ZeroDivisionError[\s\S]*\[exit status 1\]$/);
    expect(await run("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)")).toMatch(/(unreachable|refused|OSError)[\s\S]*\[exit status 1\]$/i);
    expect(await run("open('/usr/evil', 'w')")).toMatch(/(Read-only|Permission denied)/);
  });

  it("answers: right 1, wrong 0, a final text turn counts as the answer", async () => {
    const task = env.hooks.tasks.get(0) as AnswerTask;
    const play = async (turn: AgentTurn) => {
      await env.reset({ seed: 0, options: { taskIndex: 0 } });
      const [, reward, terminated, , info] = await env.step(turn);
      expect(terminated).toBe(true);
      return { reward, evidence: info.evidence as Record<string, unknown> };
    };
    expect((await play(call("submit", { answer: String(task.reference) }))).reward).toBe(1);
    expect((await play(call("submit", { answer: String(Number(task.reference) + 1) }))).reward).toBe(0);
    const text = await play({ content: `So the answer is ${task.reference}.`, toolCalls: [] });
    expect(text.reward).toBe(1);
    expect(text.evidence.via).toBe("text");
  });

  it("code: the canonical solution passes, a wrong one fails, a body-only completion gets the prompt", async () => {
    const index = 2; // HumanEval/0
    const task = env.hooks.tasks.get(index) as Extract<MintTask, { kind: "code" }>;
    expect(task.id).toBe("HumanEval/0");
    const submitCode = async (code: string) => {
      await env.reset({ seed: 0, options: { taskIndex: index } });
      const [, reward, , , info] = await env.step(call("submit", { code }));
      return { reward, evidence: info.evidence as Record<string, unknown> };
    };
    expect((await submitCode(task.gold)).reward).toBe(1);
    const wrong = await submitCode(`def ${task.entryPoint}(numbers, threshold):\n    return False\n`);
    expect(wrong.reward).toBe(0);
    expect(wrong.evidence.output).toMatch(/AssertionError/);
    expect((await submitCode(task.gold.slice(task.prompt.length))).reward).toBe(1);
    const stuck = await submitCode(`def ${task.entryPoint}(numbers, threshold):\n    while True:\n        pass\n`);
    expect(stuck.reward).toBe(0);
    expect(stuck.evidence.output).toMatch(/no result within 3000 ms/);
  }, 40_000);

  it("the gold replay succeeds on a sample of every default source", async () => {
    const sample = createMintEnv({ perSource: 2 });
    try {
      expect(sample.hooks.tasks.size).toBe(14);
      for (let i = 0; i < sample.hooks.tasks.size; i++) {
        const ep = await runExpertEpisode(sample, MINT_ENV_ID, { taskIndex: i });
        expect(ep.reward, JSON.stringify(ep.info.evidence)).toBe(1);
      }
    } finally {
      await sample.close();
    }
    const report = await replayCode(MINT_ENV_ID, { gold: true, limit: 3 });
    expect(report).toMatchObject({ total: 3, succeeded: 3, expectedRate: 1 });
  }, 40_000);

  it("unknown options and sources are errors", () => {
    expect(() => createMintEnv({ colour: 1 } as never)).toThrow(/unknown option\(s\) colour/);
    expect(() => createMintEnv({ sources: ["trivia"] as never })).toThrow(/unknown source "trivia"/);
  });
});
