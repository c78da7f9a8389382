/**
 * The MINT-style env (`sinkflex/mint-v0`): solve a problem from the MINT benchmark subsets (math word
 * problems, competition math, TheoremQA, MMLU, HotpotQA) or HumanEval/MBPP with a Python execution
 * tool, then submit an answer or a function.
 *
 * Tools: `run_code({code})` runs Python (python3, in the episode's sandboxed workspace: no network,
 * 10 s by default, 32 KiB of output) and shows what it printed; `submit({answer})` for answer tasks,
 * `submit({code})` for code tasks (ends the episode). Reward: answer tasks by the task's check
 * (mint-check.ts); code tasks when the benchmark's tests pass on the submitted code, run in a fresh
 * sandbox. A turn without tool calls ends the episode; its text counts as the answer.
 */
import { z } from "zod";
import { functionTool } from "../../tools/index.js";
import { arrayTasks, ToolEnv } from "../../tools/index.js";
import { checkAnswer, checkProgram } from "./mint-check.js";
import { DEFAULT_MINT_SOURCES, loadMintTasks, MINT_SOURCES, type MintSource, type MintTask } from "./mint-tasks.js";
import { CODE_LIMITS, describeRun, Workspace } from "./workspace.js";

export const MINT_ENV_ID = "sinkflex/mint-v0";

export interface MintState {
  workspace: Workspace;
  runs: number;
  answer?: string;
  code?: string;
}


export const MINT_SYSTEM_PROMPT = [
  "You solve problems with the help of a Python interpreter. Call run_code with a Python program; you see what it prints",
  "(use print). Work step by step and check your results by running code.",
  "For a question, call submit with {\"answer\": ...}: only the final answer (a number, True/False, a list like [1, 2], an option letter, or a short phrase).",
  "For a programming task, call submit with {\"code\": ...}: the complete Python function(s), with any imports they need.",
].join(" ");

type Ctx = { state: MintState; finish(reason: string): void };

const runCode = functionTool({
  name: "run_code",
  description: "Runs a Python 3 program and returns what it printed (stdout and stderr) and its exit status. Each run starts fresh.",
  parameters: z.object({ code: z.string().min(1).max(20_000).describe("The Python program.") }),
  timeoutMs: 30_000,
  execute: async ({ code }, ctx: Ctx) => {
    ctx.state.runs++;
    const ws = ctx.state.workspace;
    return describeRun(await ws.exec("python3 -", { stdin: code }), ws.sandbox.limits);
  },
});

const submit = functionTool({
  name: "submit",
  description: "Submits the final answer ({answer}) or, for a programming task, the code ({code}). This ends the episode.",
  parameters: z.object({
    answer: z.string().max(2_000).optional().describe("The final answer, for a question."),
    code: z.string().max(20_000).optional().describe("The complete Python function(s), for a programming task."),
  }),
  execute: ({ answer, code }, ctx: Ctx) => {
    if (answer === undefined && code === undefined) throw new Error('give "answer" (for a question) or "code" (for a programming task)');
    if (answer !== undefined) ctx.state.answer = answer;
    if (code !== undefined) ctx.state.code = code;
    ctx.finish("submitted");
    return "Submitted.";
  },
});

export interface MintEnvOptions {
  /** Which subsets (default: gsm8k, math, theoremqa, mmlu, hotpotqa, mbpp, human-eval). */
  sources?: MintSource[];
  /** The data folder (default: $SINKFLEX_DATA_DIR or ../shared/data). */
  dataDir?: string;
  /** Only the first n tasks of each source. */
  perSource?: number;
  /** Time limit of one run_code call, in ms (10,000 by default). */
  runTimeoutMs?: number;
  /** Time limit of the benchmark's tests on a submission, in ms (20,000 by default). */
  checkTimeoutMs?: number;
}

const OPTION_KEYS = ["sources", "dataDir", "perSource", "runTimeoutMs", "checkTimeoutMs"];

/** Runs the benchmark's tests on `code` in a fresh sandbox. */
export async function checkCode(task: Extract<MintTask, { kind: "code" }>, code: string, timeoutMs = 20_000): Promise<{ passed: boolean; output: string }> {
  const ws = new Workspace({}, { ...CODE_LIMITS, timeoutMs });
  try {
    const r = await ws.exec("python3 -", { stdin: checkProgram(task, code) });
    return { passed: r.exitCode === 0, output: describeRun(r, ws.sandbox.limits) };
  } finally {
    ws.dispose();
  }
}

export function createMintEnv(options: MintEnvOptions = {}): ToolEnv<MintTask, MintState> {
  const unknown = Object.keys(options).filter((k) => !OPTION_KEYS.includes(k));
  if (unknown.length) throw new Error(`${MINT_ENV_ID}: unknown option(s) ${unknown.join(", ")}; the options are ${OPTION_KEYS.join(", ")}`);
  const sources = options.sources ?? DEFAULT_MINT_SOURCES;
  if (!Array.isArray(sources)) throw new Error(`${MINT_ENV_ID}: options.sources must be a list of ${MINT_SOURCES.join(", ")}`);
  const perSource = options.perSource;
  if (perSource !== undefined && (!Number.isInteger(perSource) || perSource < 1)) throw new Error(`${MINT_ENV_ID}: options.perSource must be a positive integer, got ${JSON.stringify(perSource)}`);
  const runTimeoutMs = options.runTimeoutMs ?? 10_000;
  const checkTimeoutMs = options.checkTimeoutMs ?? 20_000;
  for (const [key, v] of [["runTimeoutMs", runTimeoutMs], ["checkTimeoutMs", checkTimeoutMs]] as const) {
    if (!Number.isInteger(v) || v < 100 || v > 60_000) throw new Error(`${MINT_ENV_ID}: options.${key} must be an integer number of ms in [100, 60000], got ${JSON.stringify(v)}`);
  }
  const all = loadMintTasks(sources, options.dataDir);
  const tasks = perSource === undefined ? all : sources.flatMap((s) => all.filter((t) => t.source === s).slice(0, perSource));
  return new ToolEnv<MintTask, MintState>({
    name: "MintEnv",
    tasks: arrayTasks(tasks),
    tools: [runCode, submit],
    toolTimeoutMs: 30_000,
    metadata: { id: MINT_ENV_ID, description: "MINT problems (gsm8k, math, theoremqa, mmlu, hotpotqa, mbpp, HumanEval) with a sandboxed Python tool." },
    async open(task) {
      const what =
        task.kind === "code"
          ? `\n\nWrite the Python function \`${task.entryPoint}\`. Submit it with submit({"code": ...}).`
          : '\n\nSubmit the final answer with submit({"answer": ...}).';
      return {
        state: { workspace: new Workspace({}, { ...CODE_LIMITS, timeoutMs: runTimeoutMs }), runs: 0 },
        messages: [
          { role: "system", content: MINT_SYSTEM_PROMPT },
          { role: "user", content: `${task.prompt.trim()}${what}` },
        ],
      };
    },
    async score(episode) {
      const { task, state } = episode;
      const base = { taskId: task.id, source: task.source, kind: task.kind, runs: state.runs };
      if (task.kind === "code") {
        const code = state.code ?? state.answer;
        if (code === undefined) return { reward: 0, evidence: { ...base, reason: 'no code was submitted (call submit with {"code": ...})' } };
        const r = await checkCode(task, code, checkTimeoutMs);
        return { reward: r.passed ? 1 : 0, evidence: { ...base, passed: r.passed, output: r.output.slice(-2_000) } };
      }
      let given = state.answer;
      let via = "submit";
      if (given === undefined) {
        const last = [...episode.messages].reverse().find((m) => m.role === "assistant");
        given = last?.content;
        via = "text";
      }
      if (given === undefined || given.trim() === "") return { reward: 0, evidence: { ...base, expected: task.reference, reason: "no answer was submitted (call submit with {\"answer\": ...})" } };
      const { correct, read } = checkAnswer(task, given);
      return { reward: correct ? 1 : 0, evidence: { ...base, expected: task.reference, answerType: task.answerType, submitted: given, read, via, correct } };
    },
    dispose: (state) => state.workspace.dispose(),
  });
}
