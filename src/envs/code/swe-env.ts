/**
 * The SWE-style env (`sinkflex/swe-v0`): fix a planted bug in a small generated repository (Python or
 * JavaScript) so that its tests pass.
 *
 * Each episode copies the task's repository into a fresh workspace (workspace.ts: a temporary folder
 * in its own sandbox, mounted at /repo). Tools: `list_files`, `read_file` (with line numbers),
 * `search` (a regular expression over the files), `edit_file` (replace one exact, unique occurrence
 * of a text), `run_tests` (the visible tests, in the sandbox) and `submit` (ends the episode). Reward:
 * 1 when the hidden tests pass on a fresh copy of the repository holding the agent's source files and
 * the original visible tests (changes to tests do not count), else 0; evidence has the hidden run's
 * output. A turn without tool calls ends the episode and is scored the same way.
 */
import { z } from "zod";
import { functionTool } from "../../tools/index.js";
import { arrayTasks, ToolEnv } from "../../tools/index.js";
import { generateSweTasks, type SweTask } from "./swe-tasks.js";
import { CODE_LIMITS, describeRun, MOUNT_POINT, Workspace } from "./workspace.js";

export const SWE_ENV_ID = "sinkflex/swe-v0";

export interface SweState {
  workspace: Workspace;
  /** The command that runs the visible tests. */
  testCommand: string;
  testRuns: number;
  edits: number;
  submitted: boolean;
}

export const SWE_SYSTEM_PROMPT = [
  `You are a software engineer working in a repository at ${MOUNT_POINT}. Fix the problem the user reports.`,
  "Use list_files, read_file and search to find the code, edit_file to change it (an exact text and its replacement),",
  "and run_tests to run the test suite. When the tests pass, call submit. Your fix is checked with further tests you cannot see.",
].join(" ");

type Ctx = { state: SweState; finish(reason: string): void };

/**
 * Test-runner output without what changes from run to run (durations) or says nothing about the
 * repository (Node's internal stack frames), so that the same repository gives the same observation.
 */
export function stableTestOutput(text: string): string {
  return text
    .replace(/ \(\d+(?:\.\d+)?ms\)/g, "")
    .replace(/^Ran (\d+) tests? in [\d.]+s$/gm, (_m, n: string) => `Ran ${n} test${n === "1" ? "" : "s"}`)
    .split("\n")
    .filter((line) => !/^\s*ℹ duration_ms /.test(line) && !/^\s+at (?:async )?(?:\S+ \()?node:/.test(line))
    .join("\n");
}

const listFiles = functionTool({
  name: "list_files",
  description: "Lists the files of the repository (or of one folder of it), one path per line.",
  parameters: z.object({ path: z.string().optional().describe("A folder relative to the repository root; the whole repository by default.") }),
  execute: ({ path }, ctx: Ctx) => ctx.state.workspace.list(path ?? ".").join("\n") || "(no files)",
});

const readFile = functionTool({
  name: "read_file",
  description: "Shows a file with line numbers (optionally only lines start_line to end_line).",
  parameters: z.object({
    path: z.string().min(1).describe("The file, relative to the repository root."),
    start_line: z.number().int().min(1).optional().describe("First line to show (1-based)."),
    end_line: z.number().int().min(1).optional().describe("Last line to show."),
  }),
  execute: ({ path, start_line, end_line }, ctx: Ctx) => {
    const lines = ctx.state.workspace.read(path).split("\n");
    if (lines[lines.length - 1] === "") lines.pop();
    const from = start_line ?? 1;
    const to = Math.min(end_line ?? lines.length, lines.length);
    if (from > Math.max(lines.length, 1)) throw new Error(`${path} has ${lines.length} lines; start_line ${from} is past the end`);
    const width = String(to).length;
    const shown = lines.slice(from - 1, to).map((l, i) => `${String(from + i).padStart(width)} | ${l}`);
    return shown.length ? shown.join("\n") : "(empty file)";
  },
});

const search = functionTool({
  name: "search",
  description: "Searches the repository's files for a regular expression (JavaScript syntax) and shows the matching lines as path:line: text.",
  parameters: z.object({
    pattern: z.string().min(1).max(500).describe("A regular expression, e.g. def \\w+ or mean\\("),
    path: z.string().optional().describe("Only under this folder or file."),
  }),
  execute: ({ pattern, path }, ctx: Ctx) => {
    let re: RegExp;
    try {
      re = new RegExp(pattern);
    } catch (err) {
      throw new Error(`the pattern is not a valid regular expression (${(err as Error).message}); escape special characters such as ( with \\(`);
    }
    const ws = ctx.state.workspace;
    const hits: string[] = [];
    for (const file of ws.list(path ?? ".")) {
      ws.read(file)
        .split("\n")
        .forEach((line, i) => {
          if (re.test(line)) hits.push(`${file}:${i + 1}: ${line}`);
        });
      if (hits.length > 200) break;
    }
    return hits.length ? hits.slice(0, 200).join("\n") + (hits.length > 200 ? "\n[more matches not shown]" : "") : "(no matches)";
  },
});

const editFile = functionTool({
  name: "edit_file",
  description: "Replaces the one occurrence of `search` in a file with `replace` (exact text, whitespace included). To create a file, give an empty `search` and a new path.",
  parameters: z.object({
    path: z.string().min(1).describe("The file, relative to the repository root."),
    search: z.string().describe("The exact text to replace; it must occur exactly once (empty: create a new file)."),
    replace: z.string().describe("The new text."),
  }),
  execute: ({ path, search: find, replace }, ctx: Ctx) => {
    const ws = ctx.state.workspace;
    if (find === "") {
      let exists = true;
      try {
        ws.read(path);
      } catch {
        exists = false;
      }
      if (exists) throw new Error(`${path} already exists; give the text to replace in \`search\``);
      ws.write(path, replace);
      ctx.state.edits++;
      return `Created ${path} (${replace.split("\n").length} lines).`;
    }
    const text = ws.read(path);
    const n = text.split(find).length - 1;
    if (n === 0) throw new Error(`the search text does not occur in ${path}; read the file and copy the text exactly, whitespace included`);
    if (n > 1) throw new Error(`the search text occurs ${n} times in ${path}; include more surrounding lines so that it occurs once`);
    const at = text.indexOf(find);
    ws.write(path, text.slice(0, at) + replace + text.slice(at + find.length));
    ctx.state.edits++;
    const line = text.slice(0, at).split("\n").length;
    return `Edited ${path} at line ${line}.`;
  },
});

const runTests = functionTool({
  name: "run_tests",
  description: "Runs the repository's test suite and shows its output and exit status.",
  parameters: z.object({}),
  timeoutMs: 60_000,
  execute: async (_args, ctx: Ctx) => {
    ctx.state.testRuns++;
    const { workspace: ws, testCommand } = ctx.state;
    return `$ ${testCommand}\n${stableTestOutput(describeRun(await ws.exec(`${testCommand} 2>&1`), ws.sandbox.limits))}`;
  },
});

const submit = functionTool({
  name: "submit",
  description: "Submits the repository as it is now. This ends the episode; the fix is checked with hidden tests.",
  parameters: z.object({}),
  execute: (_args, ctx: Ctx) => {
    ctx.state.submitted = true;
    ctx.finish("submitted");
    return "Submitted. The hidden tests will decide.";
  },
});

export interface SweEnvOptions {
  /** Number of generated tasks (48 by default). */
  count?: number;
  /** Generator seed (1 by default). */
  taskSeed?: number;
  /** Levels 1-3 (all by default). */
  levels?: number[];
  /** "python" and/or "javascript" (both by default). */
  languages?: ("python" | "javascript")[];
}

const OPTION_KEYS = ["count", "taskSeed", "levels", "languages"];

/** Runs the hidden tests on a fresh copy of the repository with the agent's source files. */
export async function runHiddenTests(task: SweTask, agentFiles: Record<string, string>): Promise<{ passed: boolean; output: string; exitCode: number | null }> {
  const files: Record<string, string> = {};
  for (const [path, content] of Object.entries(agentFiles)) if (!path.startsWith("tests/") && !path.startsWith("hidden_tests/")) files[path] = content;
  for (const [path, content] of Object.entries(task.files)) if (path.startsWith("tests/")) files[path] = content;
  Object.assign(files, task.hiddenTests);
  const ws = new Workspace(files, CODE_LIMITS);
  try {
    const r = await ws.exec(`${task.hiddenTestCommand} 2>&1`);
    return { passed: r.exitCode === 0, output: stableTestOutput(describeRun(r, ws.sandbox.limits)), exitCode: r.exitCode };
  } finally {
    ws.dispose();
  }
}

export function createSweEnv(options: SweEnvOptions = {}): ToolEnv<SweTask, SweState> {
  const unknown = Object.keys(options).filter((k) => !OPTION_KEYS.includes(k));
  if (unknown.length) throw new Error(`${SWE_ENV_ID}: unknown option(s) ${unknown.join(", ")}; the options are ${OPTION_KEYS.join(", ")}`);
  const count = options.count ?? 48;
  if (!Number.isInteger(count) || count < 1) throw new Error(`${SWE_ENV_ID}: options.count must be a positive integer, got ${JSON.stringify(count)}`);
  const tasks = generateSweTasks({ count, seed: options.taskSeed ?? 1, levels: options.levels, languages: options.languages });
  return new ToolEnv<SweTask, SweState>({
    name: "SweEnv",
    tasks: arrayTasks(tasks),
    tools: [listFiles, readFile, search, editFile, runTests, submit],
    toolTimeoutMs: 30_000,
    metadata: { id: SWE_ENV_ID, description: "SWE-style bug fixing in small generated Python and JavaScript repositories; hidden tests decide." },
    async open(task) {
      return {
        state: { workspace: new Workspace(task.files), testCommand: task.testCommand, testRuns: 0, edits: 0, submitted: false },
        messages: [
          { role: "system", content: SWE_SYSTEM_PROMPT },
          { role: "user", content: task.issue },
        ],
      };
    },
    async score(episode) {
      const { task, state } = episode;
      const hidden = await runHiddenTests(task, state.workspace.files());
      return {
        reward: hidden.passed ? 1 : 0,
        evidence: { taskId: task.id, lang: task.lang, level: task.level, bug: task.bug, submitted: state.submitted, edits: state.edits, testRuns: state.testRuns, hiddenTests: hidden.output.slice(-3_000) },
      };
    },
    dispose: (state) => state.workspace.dispose(),
  });
}
