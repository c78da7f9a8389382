/**
 * `sinkflex demo`: the main job. Trains a small model across four suites on this machine's CPU and
 * prints the results table (see src/pipeline/demo.ts). The recipe is configs/demo.yaml
 * (configs/demo-quick.yaml with --quick), scaled for --minutes and --matmul as its `scale` section
 * says; this file reads the flags and runs it, and holds none of the recipe's values.
 */
import type { Command } from "commander";
import { MATMUL_PRECISIONS, type MatmulPrecision } from "../../kernels/index.js";
import { DEMO_NAIVE_STEPS, formatDemoTable, runDemo } from "../../pipeline/index.js";
import { writeJsonAtomic } from "../../pipeline/index.js";
import { UsageError } from "../usage-error.js";
import { dashboardForRun, installStopHandler } from "./train.js";

export function registerDemoCommands(program: Command): void {
  program
    .command("demo")
    .description("Build a small model, SFT it on expert trajectories, train it with GRPO on four suites, and print the before/after results table")
    .option("--runs <dir>", "folder for the run (metrics, checkpoints, trajectories)", "runs")
    .option("--json <file>", "also write the tables as JSON")
    .option("--quick", "a tiny smoke-test run (about a minute); its numbers mean nothing")
    .option("--naive-steps <n>", "GRPO steps replayed with the naive pipeline for the comparison (0 = skip)", String(DEMO_NAIVE_STEPS))
    .option("--seed <n>", "seed of everything", "0")
    .option("--minutes <m>", "time budget of the whole demo: a short calibration run measures this machine, then every stage is planned to fit (the recipe's counts where they fit; else smaller held-out sets, GRPO's minimum steps, SFT in the time left) and the plan is printed before training; the naive replay is skipped when what is left cannot hold it (docs/demo.md, Calibrate, then plan)", "20")
    .option("--matmul <precision>", "matrix products in bf16 (on CPUs with AMX or AVX512-BF16) or fp32 (default: bf16 where the CPU has either); bf16 gives SFT 1.4 times the episodes (configs/demo.yaml, scale)")
    .option("--quiet", "no progress lines")
    .option("--no-dashboard", "do not serve the dashboard during the run")
    .option("--no-open", "serve the dashboard but do not open a browser")
    .action(async (opts: { runs: string; json?: string; quick?: boolean; naiveSteps: string; seed: string; minutes: string; matmul?: string; quiet?: boolean; dashboard: boolean; open: boolean }) => {
      const minutes = Number(opts.minutes);
      if (!(minutes > 0)) throw new UsageError(`--minutes must be a positive number, got "${opts.minutes}"`);
      const naiveSteps = Number(opts.naiveSteps);
      if (!Number.isInteger(naiveSteps) || naiveSteps < 0) throw new UsageError(`--naive-steps must be a non-negative integer, got "${opts.naiveSteps}"`);
      const seed = Number(opts.seed);
      if (!Number.isInteger(seed)) throw new UsageError(`--seed must be an integer, got "${opts.seed}"`);
      if (opts.matmul !== undefined && !(MATMUL_PRECISIONS as readonly string[]).includes(opts.matmul)) {
        throw new UsageError(`--matmul must be ${MATMUL_PRECISIONS.map((p) => `"${p}"`).join(" or ")}, got "${opts.matmul}"`);
      }
      const matmul = opts.matmul as MatmulPrecision | undefined;
      const { mkdirSync, rmSync, existsSync } = await import("node:fs");
      mkdirSync(opts.runs, { recursive: true });
      // The demo always starts fresh: an earlier demo run in the same folder is replaced.
      for (const name of opts.quick ? ["demo-quick", "demo-quick-naive"] : ["demo", "demo-naive"]) {
        const dir = `${opts.runs}/${name}`;
        if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
      }
      const stopper = installStopHandler();
      const closeDashboard = opts.dashboard ? await dashboardForRun(opts.runs, opts.open) : undefined;
      try {
        const result = await runDemo({ runsDir: opts.runs, quick: opts.quick, naiveSteps, quiet: opts.quiet, shouldStop: stopper.shouldStop, seed, minutes, matmul });
        console.log(`\n${formatDemoTable(result)}`);
        if (opts.json) writeJsonAtomic(opts.json, result);
      } finally {
        stopper.dispose();
        closeDashboard?.();
      }
    });
}
