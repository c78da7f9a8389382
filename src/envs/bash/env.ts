/**
 * The bash env (`sinkflex/nl2bash-v0`, `sinkflex/nl2bash-gen-v0`): a ToolEnv over a sandboxed shell.
 * Each episode builds a fresh tree of its task's file system (`/testbed`, `/system` or `/workspace`,
 * the working directory) in its own sandbox.
 *
 * Tools: `run({command})` runs a command and returns its output (stdout, stderr, exit status, and any
 * limit it hit); `submit({command})` runs the final command and ends the episode. Reward 1 when the
 * submitted command's stdout equals the reference command's on a fresh identical tree and the trees
 * then match (see episode.ts); a turn without a tool call ends the episode with reward 0.
 *
 * This file builds the env; trees are fixtures.ts, tasks tasks.ts and generator.ts, the registration index.ts.
 */
import { z } from "zod";
import { arrayTasks, ToolEnv, type TaskSet } from "../../tools/index.js";
import { functionTool } from "../../tools/index.js";
import { BASH_LIMITS, compareOutcomes, formatResult, runOnFreshTree, TreeSession, type CommandOutcome } from "./episode.js";
import { fileSystem } from "./fixtures.js";
import { generateBashTask } from "./generator.js";
import { loadNl2BashTasks, parseTreeName, type BashTask } from "./tasks.js";

export interface BashState {
  session: TreeSession;
  runs: number;
  submitted?: CommandOutcome;
}

export const BASH_SYSTEM_PROMPT = [
  "You are working in a Linux shell (bash) inside a sandbox with no network. Use the `run` tool to run commands and look around;",
  "when you are ready, call `submit` with the single command that does what the user asks. It is run in the current file tree,",
  "and you succeed when its output and the resulting files are exactly those of the reference solution. Commands that change",
  "files before the submission change the tree the submitted command sees.",
].join(" ");

const commandShape = z.object({ command: z.string().min(1).max(4_000).describe("A bash command line.") });
/** Above the longest command time allowed (60 s), so the sandbox, not the tool runner, stops commands. */
const TOOL_TIMEOUT_MS = 75_000;

const run = functionTool({
  name: "run",
  description: "Runs a bash command in the sandbox (working directory: the task's folder) and returns its output and exit status.",
  parameters: commandShape,
  timeoutMs: TOOL_TIMEOUT_MS,
  execute: async ({ command }, ctx: { state: BashState }) => {
    ctx.state.runs++;
    return formatResult(await ctx.state.session.run(command), ctx.state.session.sandbox.limits);
  },
});

const submit = functionTool({
  name: "submit",
  description: "Runs your final command (the answer) and ends the task. Its output and the resulting files are compared with the reference.",
  parameters: commandShape,
  timeoutMs: TOOL_TIMEOUT_MS,
  execute: async ({ command }, ctx: { state: BashState; finish(reason: string): void }) => {
    const r = await ctx.state.session.run(command);
    ctx.state.submitted = { command, stdout: r.stdout, exitCode: r.exitCode, ...(r.limit ? { limit: r.limit } : {}), tree: ctx.state.session.snapshot() };
    ctx.finish("submitted");
    return `${formatResult(r, ctx.state.session.sandbox.limits)}\n[submitted]`;
  },
});

function readTasks(options: Record<string, unknown>): TaskSet<BashTask> {
  const source = options.source ?? "nl2bash";
  if (source === "nl2bash") {
    if (options.tasks !== undefined && typeof options.tasks !== "string") throw new TypeError("bash: options.tasks must be a file path");
    if (options.tree !== undefined && (typeof options.tree !== "string" || options.tasks === undefined)) {
      throw new TypeError(`bash: options.tree names the tree of a task file given in options.tasks ("testbed", "system" or "workspace"), got ${JSON.stringify(options.tree)}`);
    }
    const fs = options.tree === undefined ? undefined : parseTreeName(options.tree as string, "options.tree");
    return arrayTasks(loadNl2BashTasks({ file: options.tasks as string | undefined, ...(fs ? { fs } : {}) }));
  }
  if (source === "generated") {
    const count = options.count ?? 300;
    const seed = options.taskSeed ?? 1;
    const difficulty = options.difficulty;
    if (!Number.isInteger(count) || (count as number) < 1) throw new RangeError(`bash: options.count must be a positive integer, got ${JSON.stringify(count)}`);
    if (!Number.isInteger(seed)) throw new RangeError(`bash: options.taskSeed must be an integer, got ${JSON.stringify(seed)}`);
    if (difficulty !== undefined && ![1, 2, 3].includes(difficulty as number)) throw new RangeError(`bash: options.difficulty must be 1, 2 or 3, got ${JSON.stringify(difficulty)}`);
    const made = new Map<number, BashTask>();
    return {
      size: count as number,
      get(index) {
        if (!Number.isInteger(index) || index < 0 || index >= (count as number)) throw new RangeError(`task index ${index} is out of range [0, ${(count as number) - 1}]`);
        let task = made.get(index);
        if (!task) made.set(index, (task = generateBashTask({ seed: seed as number, difficulty: difficulty as 1 | 2 | 3 | undefined }, index)));
        return task;
      },
    };
  }
  throw new RangeError(`bash: options.source must be "nl2bash" or "generated", got ${JSON.stringify(source)}`);
}

export function createBashEnv(options: Record<string, unknown> = {}): ToolEnv<BashTask, BashState> {
  const timeoutMs = options.commandTimeoutMs ?? BASH_LIMITS.timeoutMs;
  if (typeof timeoutMs !== "number" || !(timeoutMs > 0) || timeoutMs > 60_000) {
    throw new RangeError(`bash: options.commandTimeoutMs must be a number of ms in (0, 60000], got ${JSON.stringify(options.commandTimeoutMs)}`);
  }
  const limits = { ...BASH_LIMITS, timeoutMs };
  const isolation = options.isolation ?? "auto";
  if (isolation !== "auto" && isolation !== "bwrap" && isolation !== "unshare") {
    throw new RangeError(`bash: options.isolation must be "auto", "bwrap" or "unshare", got ${JSON.stringify(options.isolation)}`);
  }
  return new ToolEnv<BashTask, BashState>({
    name: "BashEnv",
    tasks: readTasks(options),
    tools: [run, submit],
    toolTimeoutMs: TOOL_TIMEOUT_MS,
    metadata: { description: "NL2Bash: a sandboxed shell over a per-episode file tree; run, then submit the final command." },
    async open(task) {
      const session = new TreeSession(task.fs, { limits, isolation });
      const mount = fileSystem(task.fs).mountPoint;
      return {
        state: { session, runs: 0 },
        messages: [
          { role: "system", content: BASH_SYSTEM_PROMPT },
          { role: "user", content: `${task.query}\n\n(The files are in ${mount}, which is also the working directory.)` },
        ],
      };
    },
    async score(episode) {
      const { submitted, runs } = episode.state;
      const task = episode.task;
      if (!submitted) return { reward: 0, evidence: { submitted: false, gold: task.gold, runs } };
      const reference = await runOnFreshTree(task.fs, task.gold, { now: episode.state.session.builtAt, isolation });
      const cmp = compareOutcomes(reference, submitted);
      const clip = (s: string) => (s.length > 2_000 ? `${s.slice(0, 2_000)}...` : s);
      return {
        reward: cmp.equal ? 1 : 0,
        evidence: {
          submitted: submitted.command,
          gold: task.gold,
          outputEqual: cmp.outputEqual,
          treeDiff: cmp.treeDiff,
          expectedOutput: clip(reference.stdout),
          output: clip(submitted.stdout),
          runs,
        },
      };
    },
    dispose(state) {
      state.session.dispose();
    },
  });
}
