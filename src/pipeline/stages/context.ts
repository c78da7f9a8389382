/**
 * What every stage of a training run shares: the run folder, the config, the trainer's state as its
 * checkpoints carry it, and the small services the stages report through (log, metrics, status,
 * checkpoints). It also says where a run stands: which checkpoint it continues from, with the metrics
 * and half-written checkpoints of anything after it removed.
 *
 * It trains nothing and decides no order: `train.ts` sequences the stages, each in its own file.
 */
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { SinkWindow, WeightDtype } from "../../model/index.js";
import type { TrainConfig } from "../config.js";
import type { TimeBudget } from "../budget.js";
import type { SuiteEval } from "../evaluate.js";
import { savePolicy, type Policy } from "../policy.js";
import { RunDir, type RunStatus } from "../run-dir.js";

export interface TrainOptions extends TimeBudget {
  resume?: boolean;
  quiet?: boolean;
  /** Checked between steps: when it returns true the run saves a checkpoint and stops. */
  shouldStop?: () => boolean;
  /**
   * Rollout mode: "incremental" (default: KV cache kept, prompt prefills shared by the group and the
   * suite) or "recompute" (the naive baseline: the whole context re-encoded every turn, nothing shared).
   */
  rolloutMode?: "incremental" | "recompute";
  /** Skip both evaluations (a baseline run that only measures GRPO). */
  skipEval?: boolean;
  /** Called with each metrics record as it is written. */
  onMetrics?: (record: Record<string, unknown>) => void;
  /**
   * Run the policy and its reference with this mask whatever their checkpoints were trained with (for a
   * deliberate comparison, such as the demo's naive replay with full attention). Without it a loader
   * uses the checkpoint's mask and refuses a config whose mask differs.
   */
  attentionOverride?: SinkWindow;
}

export interface PhaseTotals {
  /** Model tokens processed: prefill + sampled (rollouts) and trained (forward/backward). */
  rolloutTokens: number;
  trainTokens: number;
  rolloutMs: number;
  trainMs: number;
}

export interface TrainResult {
  runDir: string;
  stopped: boolean;
  evalBefore?: Record<string, SuiteEval>;
  evalAfter?: Record<string, SuiteEval>;
  /** GRPO totals (rollouts and updates), for the naive-vs-sinkflex comparison. */
  grpo: PhaseTotals;
  /** Mean training reward per GRPO step, in order. */
  rewardCurve: number[];
  sftMs: number;
  /** SFT's optimizer steps taken, of every epoch's (fewer where a time budget ended it). */
  sft?: { steps: number; allSteps: number };
  totalMs: number;
  checkpoint?: string;
}

/** The trainer's state, saved as trainer.json in every checkpoint. */
export interface TrainerState {
  stage: "sft" | "grpo";
  step: number;
  sftSteps: number;
  grpo: PhaseTotals;
  rewardCurve: number[];
  sftMs: number;
  /** The SFT steps the schedule is planned over, when a time budget cut them below every epoch's (without the drill's extension). */
  sftPlanned?: number;
  /** The SFT steps taken (set when SFT ends). */
  sftDone?: number;
  /** The copy drill's losses step by step, and the steps of its extension so far (sft.copyDrill.untilLoss). */
  drill?: { losses: number[]; extended: number };
}

export function initialState(): TrainerState {
  return { stage: "sft", step: 0, sftSteps: 0, grpo: { rolloutTokens: 0, trainTokens: 0, rolloutMs: 0, trainMs: 0 }, rewardCurve: [], sftMs: 0 };
}

/** The run as the stages see it. */
export interface RunContext {
  cfg: TrainConfig;
  options: TrainOptions;
  run: RunDir;
  /** `performance.now()` at the run's start (metrics' `time` counts from it). */
  t0: number;
  log(msg: string): void;
  metrics(record: Record<string, unknown>): void;
  status(s: Partial<RunStatus>): void;
}

/**
 * Opens the run folder: a new run writes its config; a continued one (`resume`) must have the same
 * config as the one it started with. `existing`: the folder of a started run, whose own config `cfg` is
 * (a stage run on its own), used wherever it now lies.
 */
export function openRun(cfg: TrainConfig, options: TrainOptions, existing?: string): RunContext {
  const t0 = performance.now();
  const run = existing ? new RunDir(existing) : RunDir.create(cfg.runsDir, cfg.name, { resume: options.resume ?? false });
  const startedAt = new Date().toISOString();
  if (!existing && options.resume) {
    const saved = JSON.parse(readFileSync(run.file("config.json"), "utf8")) as TrainConfig;
    if (JSON.stringify(saved) !== JSON.stringify(cfg)) {
      throw new Error(`cannot resume ${run.path}: the config differs from the one the run started with (${run.file("config.json")})`);
    }
  } else if (!existing) {
    run.writeConfig(cfg);
  }
  const ctx: RunContext = {
    cfg,
    options,
    run,
    t0,
    log: (msg) => {
      if (!options.quiet) process.stderr.write(`${msg}\n`);
    },
    metrics: (record) => {
      const full = { ...record, time: Math.round(performance.now() - t0) / 1000 };
      run.appendMetrics(full);
      options.onMetrics?.(full);
    },
    status: (s) => run.writeStatus({ state: "running", stage: "setup", step: 0, totalSteps: 0, startedAt, updatedAt: new Date().toISOString(), ...s, ...endReasonOf(s) }),
  };
  ctx.status({ stage: "setup" });
  return ctx;
}

/** Why a run ended, for a status that ends it: "done" is "completed" unless the caller says (a time budget). */
function endReasonOf(s: Partial<RunStatus>): { endReason?: string } {
  if (s.state === "done") return { endReason: s.endReason ?? "completed" };
  if (s.state === "stopped") return { endReason: "stopped by the user" };
  if (s.state === "failed") return { endReason: `failed: ${s.error ?? "unknown error"}` };
  return {};
}

/** The attention a config's policy runs with: its sink window, or full attention (undefined). */
export function attentionOf(cfg: TrainConfig): SinkWindow | undefined {
  return cfg.attention.mode === "sink-window" ? { window: cfg.attention.window, sinks: cfg.attention.sinks } : undefined;
}

/** The mask a run loads its checkpoints with (the options' override, else the config's: see `attentionOf`), and how their weights are held (model.dtype). */
export function loadMaskOf(ctx: Pick<RunContext, "cfg" | "options">): { attention?: SinkWindow; override: boolean; dtype: WeightDtype } {
  const override = ctx.options.attentionOverride;
  const dtype = ctx.cfg.model.dtype; // how the loaded weights are held (model.dtype)
  return override ? { attention: override, override: true, dtype } : { attention: attentionOf(ctx.cfg), override: false, dtype };
}

/** A checkpoint's folder name: "sft-00040", "grpo-00003". */
export function checkpointName(stage: TrainerState["stage"], step: number): string {
  return `${stage}-${String(step).padStart(5, "0")}`;
}

/** Saves the policy (with its optimizer state) and the trainer's state as a checkpoint; returns its folder. */
export async function saveCheckpoint(ctx: RunContext, policy: Policy, state: TrainerState): Promise<string> {
  return ctx.run.saveCheckpoint(
    checkpointName(state.stage, state.step),
    async (dir) => {
      await savePolicy(policy, dir, { optimizer: true });
      writeFileSync(join(dir, "trainer.json"), JSON.stringify(state, null, 2));
    },
    ctx.cfg.keepCheckpoints,
  );
}

/** Where a record of metrics.jsonl falls in the run: setup, SFT steps, evaluation before RL, GRPO steps, evaluation after RL. */
function metricsOrder(r: Record<string, unknown>): [number, number] {
  const rank = ["setup", "sft", "eval-before", "grpo", "eval-after"].indexOf(r.stage as string);
  return [rank < 0 ? Infinity : rank, typeof r.step === "number" ? r.step : 0];
}

/**
 * The point a continued run starts from: the latest complete checkpoint and its state (undefined when
 * there is none). Everything the run wrote after that point is removed, so that the steps it repeats
 * are written once: metrics records past the checkpoint's (stage, step), and checkpoint folders a kill
 * left half-written (`.<name>.partial-<pid>`).
 */
export function resumePoint(run: RunDir): { dir: string; state: TrainerState } | undefined {
  const root = join(run.path, "checkpoints");
  if (existsSync(root)) {
    for (const name of readdirSync(root)) {
      if (/^\..+\.partial-\d+$/.test(name)) rmSync(join(root, name), { recursive: true, force: true });
    }
  }
  const dir = run.latestCheckpoint();
  const state = dir ? (JSON.parse(readFileSync(join(dir, "trainer.json"), "utf8")) as TrainerState) : undefined;
  // The checkpoint's place: (sft, k) keeps setup and SFT's steps to k; (grpo, k) keeps every SFT step,
  // the evaluation before RL and GRPO's steps to k. No checkpoint keeps nothing.
  const [rank, step] = state ? metricsOrder({ stage: state.stage, step: state.step }) : [-1, 0];
  run.truncateMetrics((r) => {
    const [rr, rs] = metricsOrder(r);
    return rr === rank ? rs <= step : rr < rank;
  });
  return dir && state ? { dir, state } : undefined;
}
