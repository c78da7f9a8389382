/**
 * `sinkflex train --config FILE` (or one stage of a run: `--stage NAME --run FOLDER`) and
 * `sinkflex eval <checkpoint>`: the training pipeline and the evaluation table from the command line.
 */
import type { Command } from "commander";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { evaluate, policyEvalOptions, type SuiteEval } from "../../pipeline/index.js";
import { loadPolicy } from "../../pipeline/index.js";
import { planSuites } from "../../pipeline/index.js";
import { attentionOf, RunFolderError, runStage, STAGES, train, type StageName } from "../../pipeline/index.js";
import { registerBundledEnvs } from "../../envs/index.js";
import { ConfigError, loadConfigFile, validateConfig } from "../../pipeline/index.js";
import { setMatmulPrecision } from "../../kernels/index.js";
import { UsageError } from "../usage-error.js";
import { startDashboard } from "../../dashboard/index.js";
import { openInBrowser } from "./dashboard.js";
import { parseToolFormat, TOOL_FORMAT_HELP } from "./served-checkpoint.js";

/** Stops the run cleanly on the first Ctrl-C (after saving); a second one exits at once. */
export function installStopHandler(): { shouldStop: () => boolean; dispose: () => void } {
  let stop = false;
  const onSignal = () => {
    if (stop) process.exit(130);
    stop = true;
    process.stderr.write("\nstopping after the current step (saving a checkpoint); press Ctrl-C again to quit at once\n");
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return {
    shouldStop: () => stop,
    dispose: () => {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    },
  };
}

/** Serves the dashboard over the runs folder for the duration of a run (loopback, any free port). */
export async function dashboardForRun(runsDir: string, open: boolean): Promise<(() => void) | undefined> {
  try {
    const { server, url } = await startDashboard({ runsDir, port: 0 });
    process.stderr.write(`dashboard: ${url}\n`);
    if (open) openInBrowser(url);
    return () => server.close();
  } catch (err) {
    process.stderr.write(`dashboard not started: ${(err as Error).message}\n`);
    return undefined;
  }
}

/** One stage of a run; a run folder that lacks what the stage needs is a usage error (the message says which stage to run first). */
async function runStageOrExplain(...args: Parameters<typeof runStage>): ReturnType<typeof runStage> {
  try {
    return await runStage(...args);
  } catch (err) {
    if (err instanceof ConfigError || err instanceof RunFolderError) throw new UsageError(err.message);
    throw err;
  }
}

/** Whether the run in `runDir` trains with GRPO (its saved config: grpo enabled with steps). */
function ranGrpo(runDir: string): boolean {
  try {
    const saved = JSON.parse(readFileSync(join(runDir, "config.json"), "utf8")) as { grpo?: { enabled?: boolean; steps?: number } };
    return saved.grpo?.enabled !== false && (saved.grpo?.steps ?? 1) > 0;
  } catch {
    return true;
  }
}

export function formatEvalTable(table: Record<string, SuiteEval>): string {
  const rows = [["suite", "success", "95% CI", `pass@k`, "avg reward", "tasks", "tokens", "wall"]];
  for (const [suite, e] of Object.entries(table)) {
    rows.push([
      suite,
      `${(100 * e.rate).toFixed(1)}%`,
      `${(100 * e.ciLow).toFixed(0)}-${(100 * e.ciHigh).toFixed(0)}%`,
      `${(100 * e.passAtK).toFixed(1)}% (k=${e.k})`,
      e.avgReward.toFixed(3),
      String(e.trials),
      String(e.tokens),
      `${(e.wallMs / 1000).toFixed(1)}s`,
    ]);
  }
  return alignTable(rows);
}

export function alignTable(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? "").length)));
  return rows.map((r, i) => {
    const line = r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join("  ");
    return i === 0 ? `${line}\n${widths.map((w) => "-".repeat(w)).join("  ")}` : line;
  }).join("\n");
}

export function registerTrainCommands(program: Command): void {
  program
    .command("train")
    .description("Train a policy: SFT -> GRPO -> evaluation, from one config file (YAML or JSON)")
    .option("--config <file>", "the training config (see docs/training.md for every field); with --stage, it names the run folder (<runsDir>/<name>)")
    .option("--resume", "continue the run in the config's run folder from its latest checkpoint")
    .option("--stage <stage>", `run one stage of a run, from its run folder (its saved config and the latest checkpoint of the stage before): ${STAGES.join(", ")}; a whole run is prepare, sft, evaluate, grpo, evaluate`)
    .option("--run <folder>", "with --stage: the run folder (default: the one --config names)")
    .option("--name <name>", "run name (overrides the config's name; the run folder is <runsDir>/<name>)")
    .option("--tool-format <format>", `${TOOL_FORMAT_HELP}; overrides the config's rollout.toolFormat`, parseToolFormat)
    .option("--quiet", "no progress lines")
    .option("--no-dashboard", "do not serve the dashboard during the run")
    .option("--no-open", "serve the dashboard but do not open a browser")
    .action(async (opts: { config?: string; resume?: boolean; stage?: string; run?: string; name?: string; toolFormat?: string; quiet?: boolean; dashboard: boolean; open: boolean }) => {
      if (opts.stage !== undefined && !(STAGES as readonly string[]).includes(opts.stage)) throw new UsageError(`--stage must be one of ${STAGES.join(", ")}, got ${JSON.stringify(opts.stage)}`);
      if (opts.run !== undefined && opts.stage === undefined) throw new UsageError("--run names the run folder of --stage; pass --stage too (a whole run takes --config alone)");
      if (opts.stage !== undefined && opts.resume) throw new UsageError("--stage always continues the stage from the run's latest checkpoint; drop --resume");
      if (opts.config === undefined && opts.run === undefined) throw new UsageError(opts.stage ? "--stage needs the run folder: pass --run FOLDER (or --config FILE, whose runsDir and name give it)" : "pass --config FILE (the training config)");
      if (opts.config !== undefined && !existsSync(opts.config)) throw new UsageError(`no config file at ${opts.config}`);
      if (opts.run !== undefined && !existsSync(opts.run)) throw new UsageError(`no run folder at ${opts.run}`);
      if (opts.toolFormat !== undefined && opts.stage !== undefined) {
        throw new UsageError("--stage runs with the run folder's saved config; drop --tool-format (set rollout.toolFormat in the config of a new run)");
      }
      let cfg;
      try {
        if (opts.config !== undefined) {
          cfg = loadConfigFile(opts.config);
          if (opts.name) cfg = validateConfig({ ...cfg, name: opts.name }, opts.config);
          if (opts.toolFormat) cfg = validateConfig({ ...cfg, rollout: { ...cfg.rollout, toolFormat: opts.toolFormat } }, opts.config);
        }
      } catch (err) {
        if (err instanceof ConfigError) throw new UsageError(err.message);
        throw err;
      }
      const stopper = installStopHandler();
      const runsDir = opts.run !== undefined ? dirname(resolve(opts.run)) : cfg!.runsDir;
      const closeDashboard = opts.dashboard ? await dashboardForRun(runsDir, opts.open) : undefined;
      try {
        const options = { quiet: opts.quiet, shouldStop: stopper.shouldStop };
        const result = opts.stage !== undefined
          ? await runStageOrExplain(opts.stage as StageName, { runDir: opts.run, cfg }, options)
          : await train(cfg!, { ...options, resume: opts.resume });
        if (result.evalBefore && !ranGrpo(result.runDir)) {
          // Without GRPO the policy after "RL" is the one before it: one table, said plainly.
          console.log(`\nevaluation (after SFT; GRPO is disabled or has 0 steps, so there is no "after RL"):\n${formatEvalTable(result.evalBefore)}`);
        } else if (result.evalBefore && result.evalAfter) {
          console.log(`\nbefore RL (after SFT):\n${formatEvalTable(result.evalBefore)}\n\nafter RL:\n${formatEvalTable(result.evalAfter)}`);
        } else if (opts.stage === "evaluate" && result.evalBefore) {
          console.log(`\nbefore RL (after SFT):\n${formatEvalTable(result.evalBefore)}`);
        }
        console.log(`\nrun folder: ${result.runDir}${result.checkpoint ? `\ncheckpoint: ${result.checkpoint}` : ""}`);
        if (result.stopped) process.exitCode = 130;
      } finally {
        stopper.dispose();
        closeDashboard?.();
      }
    });

  program
    .command("eval")
    .description("Evaluate a checkpoint on held-out tasks: success per suite with 95% intervals, pass@k, reward, tokens")
    .argument("<checkpoint>", "a checkpoint folder (Hugging Face layout, as written by sinkflex)")
    .option("--suites <ids...>", "env ids to evaluate", ["sinkflex/arith-v0"])
    .option("--tasks <n>", "tasks per suite", "50")
    .option("--samples <k>", "samples per task (for pass@k; needs --temperature > 0 when k > 1)", "1")
    .option("--temperature <t>", "sampling temperature (0 = greedy)", "0")
    .option("--seed <n>", "seed of the task split and the sampling", "0")
    .option("--max-turns <n>", "turns per episode", "20")
    .option("--json <file>", "also write the table as JSON")
    .option("--config <file>", "evaluate as a training config does (a run's config.json): its suites with their options and held-out tasks, its eval settings, turn limits, attention and seed")
    .option("--tool-format <format>", `${TOOL_FORMAT_HELP}; overrides --config's rollout.toolFormat`, parseToolFormat)
    .action(async (checkpoint: string, opts: Record<string, string | string[]>, command: Command) => {
      registerBundledEnvs();
      let cfg;
      try {
        if (opts.config) {
          const given = ["suites", "tasks", "samples", "temperature", "seed", "maxTurns"].filter((o) => command.getOptionValueSource(o) === "cli");
          if (given.length) throw new UsageError(`--config takes the suites and evaluation settings from ${opts.config as string}; drop ${given.map((o) => `--${o.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`).join(", ")}`);
          if (!existsSync(opts.config as string)) throw new UsageError(`no config file at ${opts.config as string}`);
          cfg = loadConfigFile(opts.config as string);
          if (opts.toolFormat) cfg = validateConfig({ ...cfg, rollout: { ...cfg.rollout, toolFormat: opts.toolFormat } }, opts.config as string);
        } else {
          cfg = validateConfig({
            seed: Number(opts.seed),
            suites: (opts.suites as string[]).map((env) => ({ env })),
            model: { checkpoint },
            eval: { tasksPerSuite: Number(opts.tasks), samples: Number(opts.samples), temperature: Number(opts.temperature) },
            grpo: { maxTurns: Number(opts.maxTurns) },
            ...(opts.toolFormat ? { rollout: { toolFormat: opts.toolFormat } } : {}),
          }, "the eval options");
        }
      } catch (err) {
        if (err instanceof ConfigError) throw new UsageError(opts.config ? err.message : err.message.replace("is not a valid training config", "are not valid"));
        throw err;
      }
      // The config's matrix products, as its run evaluated with (fp32 where the CPU has no bf16 unit).
      if (opts.config) setMatmulPrecision(cfg.model.matmul);
      const plans = await planSuites(cfg);
      const policy = loadPolicy(checkpoint, attentionOf(cfg));
      const table = await evaluate(policy, plans, { ...policyEvalOptions(cfg, policy), vocabNotice: true });
      console.log(formatEvalTable(table));
      for (const p of plans) if (p.heldOutWarning) console.error(`warning: ${p.name}: ${p.heldOutWarning}`);
      if (opts.json) {
        const { writeJsonAtomic } = await import("../../pipeline/index.js");
        writeJsonAtomic(opts.json as string, { checkpoint, suites: table });
      }
    });
}
