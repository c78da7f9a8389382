/**
 * `sinkflex envs replay`, `sinkflex envs conform` and `sinkflex envs export-sft`: subcommands of the
 * `envs` group. `replay` (and `replay --wrong`, which checks that verifiers reject wrong answers) and `export-sft` work for every suite (through `Suite.replay` and the suite's
 * scripted expert); `conform` checks the tau-bench tools against an expected-outputs file. Each command
 * has a function that does the work and returns its text and exit code, so tests can call it directly.
 */
import { createWriteStream } from "node:fs";
import type { Command } from "commander";
import type { AgentTurn, ChatObservation } from "../../gym/index.js";
import { make, registeredIds } from "../../gym/index.js";
import { registerBundledEnvs } from "../../envs/index.js";
import { hasExpert, replayWrong, runExpertEpisode, suiteForEnv, toOpenAIChatRecord, type ReplayReport, type WrongReport } from "../../envs/index.js";
import { conform, tauDomain } from "../../envs/index.js";
import { UsageError } from "../usage-error.js";
import { envsCommand } from "./envs.js";

export interface CommandResult {
  text: string;
  exitCode: number;
}

function knownEnv(id: string): void {
  registerBundledEnvs();
  if (!registeredIds().includes(id)) {
    throw new UsageError(`unknown env id "${id}". Registered ids: ${registeredIds().join(", ")}. Run \`sinkflex envs list\`.`);
  }
}

function positiveInt(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`${flag} must be a positive integer, got "${value}"`);
  return n;
}

function jsonOptions(value: string | undefined): Record<string, unknown> {
  if (value === undefined) return {};
  try {
    const parsed = JSON.parse(value);
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) return parsed;
  } catch {}
  throw new UsageError(`--options must be a JSON object, e.g. '{"taskSet":"generated","difficulty":"easy"}', got ${value}`);
}

function clip(text: unknown, max = 300): string {
  const s = typeof text === "string" ? text : JSON.stringify(text);
  return s === undefined ? "undefined" : s.length > max ? `${s.slice(0, max)}... (${s.length} chars)` : s;
}

/** The failures of a replay that the suite did not expect, where it says which tasks may fail (else none). */
function unexpectedFailures(report: ReplayReport): ReplayReport["failures"] {
  if (!report.expectedToFail) return [];
  const allowed = new Set(report.expectedToFail.map((e) => e.task));
  return report.failures.filter((f) => !allowed.has(f.task));
}

export function formatReplayReport(envId: string, report: ReplayReport, maxFailures = 20): string {
  const rate = report.total === 0 ? 0 : report.succeeded / report.total;
  const lines = [
    `${envId}: ${report.succeeded}/${report.total} succeeded (${(rate * 100).toFixed(1)}%); expected at least ${(report.expectedRate * 100).toFixed(1)}%`,
  ];
  if (report.expectedToFail) {
    // Judged by which tasks failed, not by how many: an unexpected failure fails the replay.
    const unexpected = unexpectedFailures(report);
    lines.push(`  ${unexpected.length} unexpected failures; ${report.expectedToFail.length} tasks may fail (${report.expectedToFail.map((e) => e.task).join(", ") || "none"})`);
    for (const f of unexpected.slice(0, maxFailures)) lines.push(`  unexpected: task ${f.task}: ${clip(f.reason)}`);
    if (unexpected.length > maxFailures) lines.push(`  ... and ${unexpected.length - maxFailures} more unexpected failures`);
    const expected = report.failures.filter((f) => !unexpected.includes(f));
    for (const f of expected.slice(0, maxFailures)) lines.push(`  expected: task ${f.task}: ${clip(f.reason)}`);
    return lines.join("\n");
  }
  for (const f of report.failures.slice(0, maxFailures)) lines.push(`  task ${f.task}: ${clip(f.reason)}`);
  if (report.failures.length > maxFailures) lines.push(`  ... and ${report.failures.length - maxFailures} more failures`);
  return lines.join("\n");
}

/** Whether a replay passes: every failure expected where the suite lists them, else the expected rate reached. */
export function replayPassed(report: ReplayReport): boolean {
  if (report.total === 0) return false;
  if (report.expectedToFail) return unexpectedFailures(report).length === 0;
  return report.succeeded / report.total >= report.expectedRate;
}

export function formatWrongReport(envId: string, report: WrongReport, maxListed = 20): string {
  const lines = [`${envId}: ${report.scoredAboveZero.length} of ${report.total} wrong answers scored above 0 (expected 0)`];
  for (const w of report.scoredAboveZero.slice(0, maxListed)) lines.push(`  task ${w.task}: reward ${w.reward} for ${clip(w.answer)}`);
  if (report.scoredAboveZero.length > maxListed) lines.push(`  ... and ${report.scoredAboveZero.length - maxListed} more`);
  if (report.skipped.length > 0) {
    const whys = [...new Set(report.skipped.map((s) => s.why))];
    lines.push(`  ${report.skipped.length} tasks have no well-defined wrong answer: ${whys.join("; ")}`);
  }
  return lines.join("\n");
}

/** `envs replay <id> --wrong`: every task played to a plausible wrong answer; exit 0 only when all score 0. */
export async function wrongReplayCommand(envId: string, opts: { tasks?: string; tree?: string; dbDir?: string; games?: string; gold?: boolean; limit?: string }): Promise<CommandResult> {
  knownEnv(envId);
  const suite = suiteForEnv(envId);
  if (!suite.wrongAnswer) throw new UsageError(`the ${suite.name} suite has no wrong-answer maker; --wrong covers the bundled suites`);
  if (opts.gold) throw new UsageError("--wrong and --gold exclude each other: --wrong submits wrong answers, --gold the gold ones");
  if (opts.dbDir || opts.games) throw new UsageError("--wrong plays the bundled tasks and databases; leave out --db-dir and --games (bash takes --tasks FILE --tree NAME)");
  if ((opts.tasks || opts.tree) && suite.name !== "bash") throw new UsageError("--wrong takes --tasks and --tree for the bash suite only");
  const envOptions = { ...(opts.tasks ? { tasks: opts.tasks } : {}), ...(opts.tree ? { tree: opts.tree } : {}) };
  const report = await replayWrong(envId, envOptions, positiveInt("--limit", opts.limit));
  return { text: formatWrongReport(envId, report), exitCode: report.total > 0 && report.scoredAboveZero.length === 0 ? 0 : 1 };
}

export async function replayCommand(
  envId: string,
  opts: { gold?: boolean; tasks?: string; dbDir?: string; games?: string; limit?: string; tree?: string; wrong?: boolean },
): Promise<CommandResult> {
  if (opts.wrong) return wrongReplayCommand(envId, opts);
  knownEnv(envId);
  const suite = suiteForEnv(envId);
  if (!suite.replay) throw new UsageError(`the ${suite.name} suite has no replay; try \`sinkflex envs check ${envId}\``);
  const report = await suite.replay(envId, {
    gold: Boolean(opts.gold),
    tasks: opts.tasks,
    dbDir: opts.dbDir,
    games: opts.games,
    limit: positiveInt("--limit", opts.limit),
    ...(opts.tree !== undefined ? { tree: opts.tree } : {}),
  });
  return { text: formatReplayReport(envId, report), exitCode: replayPassed(report) ? 0 : 1 };
}

export function conformCommand(envId: string, opts: { tasks?: string; expected?: string; dbDir?: string }): CommandResult {
  let domain;
  try {
    domain = tauDomain(envId);
  } catch (err) {
    throw new UsageError(`${(err as Error).message}: conform checks the tau-bench tools only`);
  }
  if (!opts.tasks || !opts.expected) throw new UsageError("conform needs --tasks FILE and --expected FILE (e.g. tasks_dev.json and expected_dev.json)");
  const report = conform(opts.tasks, opts.expected, { domain, dbDir: opts.dbDir });
  const lines: string[] = [];
  for (const m of report.mismatches.slice(0, 30)) {
    lines.push(`task ${m.task}: ${m.detail}`);
    if (m.where !== "records") lines.push(`  expected: ${clip(m.expected)}`, `  actual:   ${clip(m.actual)}`);
  }
  if (report.mismatches.length > 30) lines.push(`... and ${report.mismatches.length - 30} more mismatches`);
  lines.push(`${envId}: ${report.matched}/${report.total} tasks match ${opts.expected}`);
  return { text: lines.join("\n"), exitCode: report.mismatches.length === 0 && report.matched === report.total ? 0 : 1 };
}

export async function exportSftCommand(
  envId: string,
  opts: { out?: string; limit?: string; options?: string; includeFailed?: boolean },
): Promise<CommandResult> {
  knownEnv(envId);
  if (!opts.out) throw new UsageError("export-sft needs --out FILE (a .jsonl file to write)");
  const env = await make<ChatObservation, AgentTurn>(envId, jsonOptions(opts.options));
  if (!hasExpert(env, envId)) {
    await env.close();
    throw new UsageError(`${envId} has no expert to export: give its ToolEnv an \`expert\` hook (docs/your-env.md)`);
  }
  const size = env.metadata.taskCount ?? 0;
  const total = Math.min(positiveInt("--limit", opts.limit) ?? size, size);
  const out = createWriteStream(opts.out);
  let written = 0;
  let failed = 0;
  try {
    for (let taskIndex = 0; taskIndex < total; taskIndex++) {
      const episode = await runExpertEpisode(env, envId, { taskIndex, maxTurns: 200 });
      if (episode.reward !== 1) failed++;
      if (episode.reward !== 1 && !opts.includeFailed) continue;
      const record = { ...toOpenAIChatRecord(episode.messages, episode.tools), metadata: { env: envId, taskIndex, reward: episode.reward } };
      out.write(`${JSON.stringify(record)}\n`);
      written++;
    }
  } finally {
    await env.close();
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  }
  const skipped = opts.includeFailed ? "" : `; ${failed} unsolved episodes left out (--include-failed keeps them)`;
  return { text: `${envId}: wrote ${written} expert trajectories to ${opts.out}${skipped}`, exitCode: written > 0 ? 0 : 1 };
}

function print(result: CommandResult): void {
  console.log(result.text);
  if (result.exitCode !== 0) process.exitCode = result.exitCode;
}

/** Adds `replay`, `conform` and `export-sft` to the `envs` command group of `program`. */
export function registerEnvsReplayCommands(program: Command): void {
  const envs = envsCommand(program);
  envs
    .command("replay <id>")
    .description("Replay a suite's task set (the gold actions with --gold, else the scripted expert); prints the success rate and the failures; exit 0 only when the expected rate is reached")
    .option("--gold", "replay the benchmark's gold actions / gold SQL where the suite has them, instead of the scripted expert")
    .option("--tasks <file>", "a task file in the suite's format instead of the bundled one")
    .option("--db-dir <dir>", "a folder of databases (sql: DIR/<db>.sqlite; tau: DIR/<collection>.json)")
    .option("--games <dir>", "a folder of games (household)")
    .option("--limit <n>", "only the first n tasks")
    .option("--wrong", "submit a plausible wrong answer for every task instead (a changed literal, value, argument or command; one step short); exit 0 only when every one scores 0")
    .option("--tree <name>", "bash: the file tree a --tasks file runs on (testbed, system or workspace); without it, taken from a name ending _1/_2/_3.json")
    .action(async (id: string, opts) => print(await replayCommand(id, opts)));
  envs
    .command("conform <id>")
    .description("Check the tau-bench tools (retail or airline id): replay every task's gold actions and compare each output and the changed records with an expected file; exit 0 only when all match")
    .option("--tasks <file>", "the task file (e.g. tasks_dev.json)")
    .option("--expected <file>", "the expected outputs file (e.g. expected_dev.json)")
    .option("--db-dir <dir>", "a folder with the domain's <collection>.json files instead of the bundled database")
    .action((id: string, opts) => print(conformCommand(id, opts)));
  envs
    .command("export-sft <id>")
    .description("Write the scripted expert's trajectories as OpenAI chat JSONL (messages with tool_calls, and tools), one line per solved task")
    .option("--out <file>", "the .jsonl file to write")
    .option("--limit <n>", "only the first n tasks")
    .option("--options <json>", "env options as JSON, e.g. '{\"taskSet\":\"generated\",\"difficulty\":\"easy\"}'")
    .option("--include-failed", "also write episodes the expert did not solve")
    .action(async (id: string, opts) => print(await exportSftCommand(id, opts)));
}
