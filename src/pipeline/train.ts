/**
 * The training pipeline: prepare -> SFT -> evaluation -> GRPO -> evaluation, from one validated config,
 * with metrics, trajectories and atomic checkpoints in a run folder, exact resume, and a clean stop.
 * This file only sequences the stages, each in its own file under stages/:
 *   1. prepare  (stages/prepare.ts): suites, expert episodes -> SFT examples, the starting policy;
 *   2. sft      (stages/sft.ts): SFT with periodic checkpoints; hands over to RL (the frozen reference);
 *   3. evaluate (stages/evaluate.ts): held-out tasks before RL;
 *   4. grpo     (stages/grpo.ts): sample groups -> score -> advantages and update -> record;
 *   5. evaluate again, after RL; the final policy.
 * Time budgets (deadlines, re-planning) are budget.ts's. Every step is seeded from (config seed, step),
 * so a resumed run repeats an uninterrupted one.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { registerBundledEnvs } from "../envs/index.js";
import { validateConfig, type TrainConfig } from "./config.js";
import { openPolicy, savePolicy, type Policy } from "./policy.js";
import { PrepPool } from "./prep-pool.js";
import { writeJsonAtomic } from "./run-dir.js";
import { checkpointName, loadMaskOf, openRun, resumePoint, type RunContext, type TrainerState, type TrainOptions, type TrainResult } from "./stages/context.js";
import { readEvalTables, runEvaluation } from "./stages/evaluate.js";
import { runGrpo } from "./stages/grpo.js";
import { prepareData, preparePolicy, savePrepared, sftExamples, type RunData } from "./stages/prepare.js";
import { referenceDir, runSft } from "./stages/sft.js";

export { attentionOf, type PhaseTotals, type TrainOptions, type TrainResult } from "./stages/context.js";
export { stepTasks } from "./stages/grpo.js";
export { policyEvalOptions } from "./stages/evaluate.js";

/** The stages `sinkflex train --stage` runs one at a time, in the order a whole run runs them. */
export const STAGES = ["prepare", "sft", "grpo", "evaluate"] as const;
export type StageName = (typeof STAGES)[number];

export async function train(cfg: TrainConfig, options: TrainOptions = {}): Promise<TrainResult> {
  registerBundledEnvs();
  const ctx = openRun(cfg, options);
  // Task contents, expert episodes and SFT examples are prepared on worker threads (stopped once the data is ready).
  const prep = new PrepPool();
  let policy: Policy | undefined;
  try {
    // 1. Prepare.
    const data = await prepareData(ctx, prep);
    const start = await preparePolicy(ctx, data, options.resume ? resumePoint(ctx.run) : undefined);
    policy = start.policy;
    await savePrepared(ctx, start);
    const sftData = await sftExamples(ctx, prep, data, start);
    await prep.close();
    const { state } = start;

    // 2. SFT, and the hand-over to RL.
    if ((await runSft(ctx, policy, state, data.plans, sftData)) === "stopped") return stoppedResult(ctx, state);
    return await fromGrpo(ctx, policy, state, data);
  } catch (err) {
    ctx.status({ state: "failed", error: err instanceof Error ? err.message : String(err) });
    throw err;
  } finally {
    policy?.engine.dispose(); // a torch worker ends with its engine
    await prep.close();
  }
}

/** A run folder that lacks what a stage needs (the message says which stage to run first). */
export class RunFolderError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RunFolderError";
  }
}

/**
 * Runs one stage of a run (`sinkflex train --stage`), from the run folder: its saved config and the latest
 * checkpoint of the stage before. `runDir` names the folder; without it, `cfg` does (its runsDir and
 * name), and `prepare` starts a new run there. A stage's own progress is continued where a checkpoint
 * left it. Errors say what the folder lacks and which stage to run first.
 *   prepare:  writes the config and the starting policy (checkpoint sft-00000);
 *   sft:      trains SFT to its end from the latest SFT checkpoint; writes the reference and grpo-00000;
 *   grpo:     trains GRPO to grpo.steps from the latest GRPO checkpoint;
 *   evaluate: the evaluation before RL (on grpo-00000), or the one after RL and the final policy (once
 *             GRPO has taken all its steps).
 */
export async function runStage(stage: StageName, where: { runDir?: string; cfg?: TrainConfig }, options: Omit<TrainOptions, "resume"> = {}): Promise<TrainResult> {
  registerBundledEnvs();
  const runDir = where.runDir ?? (where.cfg ? join(where.cfg.runsDir, where.cfg.name) : undefined);
  if (!runDir) throw new Error("runStage: name the run folder (runDir) or pass its config");
  const next = (s: string) => `sinkflex train --stage ${s} --run ${runDir}`;
  const configFile = join(runDir, "config.json");
  if (!existsSync(configFile)) {
    if (stage !== "prepare" || !where.cfg) throw new RunFolderError(`${runDir} holds no run (no config.json): start one with \`sinkflex train --stage prepare --config FILE\`, or a whole run with \`sinkflex train --config FILE\``);
    return prepareStage(openRun(where.cfg, { ...options, resume: false }));
  }
  const cfg = validateConfig(JSON.parse(readFileSync(configFile, "utf8")), configFile);
  if (where.cfg && JSON.stringify(where.cfg) !== JSON.stringify(cfg)) {
    throw new RunFolderError(`the config differs from the one the run in ${runDir} started with (${configFile}); run its stages with --run ${runDir} alone`);
  }
  const ctx = openRun(cfg, options, runDir);
  const prep = new PrepPool();
  let policy: Policy | undefined;
  try {
    const latest = ctx.run.latestCheckpoint();
    const at = latest ? JSON.parse(readFileSync(join(latest, "trainer.json"), "utf8")) as TrainerState : undefined;
    const where = at ? `its latest checkpoint is ${checkpointName(at.stage, at.step)}` : "it has no checkpoint";
    if (stage === "prepare") {
      if (at) throw new RunFolderError(`the run in ${runDir} is prepared already (${where}); go on with \`${next(at.stage)}\``);
      return await prepareStage(ctx);
    }
    if (stage === "sft" && at?.stage !== "sft") {
      throw new RunFolderError(`--stage sft needs an SFT checkpoint in ${runDir}, and ${where}: ${at ? `SFT is done; go on with \`${next("evaluate")}\` or \`${next("grpo")}\`` : `run \`${next("prepare")}\` first`}`);
    }
    if ((stage === "grpo" || stage === "evaluate") && at?.stage !== "grpo") {
      throw new RunFolderError(`--stage ${stage} needs the policy SFT handed over (a GRPO checkpoint) in ${runDir}, and ${where}: run \`${next(at ? "sft" : "prepare")}\` first`);
    }
    const data = await prepareData(ctx, prep, { episodes: stage === "sft" });
    const start = await preparePolicy(ctx, data, resumePoint(ctx.run));
    policy = start.policy;
    const { state } = start;
    if (stage === "sft") {
      const sftData = await sftExamples(ctx, prep, data, start);
      await prep.close();
      if ((await runSft(ctx, policy, state, data.plans, sftData)) === "stopped") return stoppedResult(ctx, state);
      ctx.status({ state: "done", stage: "sft", step: state.sftDone ?? 0, totalSteps: state.sftSteps });
      return { ...stoppedResult(ctx, state), stopped: false };
    }
    await prep.close();
    const totalGrpo = cfg.grpo.enabled ? cfg.grpo.steps : 0;
    if (stage === "grpo") {
      const reference = await openReference(ctx);
      try {
        const evalBeforeMs = Object.values(readEvalTables(ctx).stages["before-rl"] ?? {}).reduce((ms, e) => ms + e.wallMs, 0);
        if ((await runGrpo(ctx, policy, reference, state, data, evalBeforeMs)) === "stopped") return stoppedResult(ctx, state);
      } finally {
        reference?.dispose();
      }
      ctx.status({ state: "done", stage: "grpo", step: state.step, totalSteps: totalGrpo });
      return { ...stoppedResult(ctx, state), stopped: false };
    }
    // evaluate
    const tables = readEvalTables(ctx);
    let evalBefore = tables.stages["before-rl"];
    if (!evalBefore && state.step === 0) evalBefore = await runEvaluation(ctx, policy, data.plans, "before-rl", 0);
    else if (state.step < totalGrpo) {
      throw new RunFolderError(`--stage evaluate evaluates the policy entering RL or the one GRPO ended with, and GRPO in ${runDir} is at step ${state.step} of ${totalGrpo}${evalBefore ? " (evaluated before RL already)" : ""}: go on with \`${next("grpo")}\``);
    }
    if (state.step < totalGrpo) {
      ctx.status({ state: "done", stage: "eval-before", step: 0, totalSteps: 0 });
      return { ...stoppedResult(ctx, state), stopped: false, evalBefore };
    }
    const evalAfter = await runEvaluation(ctx, policy, data.plans, "after-rl", state.step);
    const finalDir = await saveFinal(ctx, policy, state);
    return { ...stoppedResult(ctx, state), stopped: false, evalBefore, evalAfter, checkpoint: finalDir };
  } catch (err) {
    ctx.status({ state: "failed", error: err instanceof Error ? err.message : String(err) });
    throw err;
  } finally {
    policy?.engine.dispose();
    await prep.close();
  }
}

/** The frozen reference for the KL term, on the run's engine backend (none without a KL term). */
async function openReference(ctx: RunContext): Promise<Policy["engine"] | undefined> {
  const { cfg } = ctx;
  if (!(cfg.grpo.klCoef > 0 && cfg.grpo.enabled)) return undefined;
  return (await openPolicy(referenceDir(ctx), cfg.engine, loadMaskOf(ctx))).engine;
}

/** The prepare stage on its own: the data, the starting policy and its checkpoint. */
async function prepareStage(ctx: RunContext): Promise<TrainResult> {
  const prep = new PrepPool();
  try {
    const data = await prepareData(ctx, prep);
    const start = await preparePolicy(ctx, data, resumePoint(ctx.run));
    try {
      await savePrepared(ctx, start);
    } finally {
      start.policy.engine.dispose();
    }
    ctx.status({ state: "done", stage: "prepare", step: 0, totalSteps: 0 });
    return { ...stoppedResult(ctx, start.state), stopped: false };
  } catch (err) {
    ctx.status({ state: "failed", error: err instanceof Error ? err.message : String(err) });
    throw err;
  } finally {
    await prep.close();
  }
}

/** Stages 3 to 5: the evaluation before RL, GRPO, the evaluation after RL and the final policy. */
async function fromGrpo(ctx: RunContext, policy: Policy, state: TrainerState, data: RunData): Promise<TrainResult> {
  const { options } = ctx;
  const reference = await openReference(ctx);
  try {
    // 3. Evaluation before RL (kept across resumes in eval.json).
    if (!options.skipEval) await runEvaluation(ctx, policy, data.plans, "before-rl", 0);
    const evalBeforeMs = Object.values(readEvalTables(ctx).stages["before-rl"] ?? {}).reduce((ms, e) => ms + e.wallMs, 0);

    // 4. GRPO.
    if ((await runGrpo(ctx, policy, reference, state, data, evalBeforeMs)) === "stopped") return stoppedResult(ctx, state);

    // 5. Evaluation after RL (at the GRPO step reached: a deadline can end GRPO early), and the final policy.
    const after = options.skipEval ? undefined : await runEvaluation(ctx, policy, data.plans, "after-rl", state.step);
    const finalDir = await saveFinal(ctx, policy, state);
    return {
      runDir: ctx.run.path,
      stopped: false,
      evalBefore: readEvalTables(ctx).stages["before-rl"],
      evalAfter: after,
      grpo: state.grpo,
      rewardCurve: state.rewardCurve,
      sftMs: state.sftMs,
      // Unknown for a run resumed from a checkpoint written before SFT's steps were recorded.
      ...(state.sftDone !== undefined ? { sft: { steps: state.sftDone, allSteps: state.sftSteps } } : {}),
      totalMs: performance.now() - ctx.t0,
      checkpoint: finalDir,
    };
  } finally {
    reference?.dispose();
  }
}

/** The run's end: the final policy, result.json and the status "done". */
async function saveFinal(ctx: RunContext, policy: Policy, state: TrainerState): Promise<string> {
  const finalDir = join(ctx.run.path, "final");
  await savePolicy(policy, finalDir);
  writeJsonAtomic(join(ctx.run.path, "result.json"), { grpo: state.grpo, rewardCurve: state.rewardCurve, sftMs: state.sftMs });
  const grpoPlanned = ctx.cfg.grpo.enabled ? ctx.cfg.grpo.steps : 0;
  ctx.status({ state: "done", stage: "done", step: state.step, totalSteps: grpoPlanned, endReason: budgetEnd(state, grpoPlanned) ?? "completed" });
  return finalDir;
}

/** "time budget: ..." naming each stage a time budget ended before its planned steps, or undefined. */
function budgetEnd(state: TrainerState, grpoPlanned: number): string | undefined {
  const cut: string[] = [];
  if (state.sftDone !== undefined && state.sftDone < state.sftSteps) cut.push(`sft took ${state.sftDone} of ${state.sftSteps} planned steps`);
  if (state.step < grpoPlanned) cut.push(`grpo took ${state.step} of ${grpoPlanned} planned steps`);
  return cut.length ? `time budget: ${cut.join("; ")}` : undefined;
}

function stoppedResult(ctx: RunContext, state: TrainerState): TrainResult {
  return { runDir: ctx.run.path, stopped: true, grpo: state.grpo, rewardCurve: state.rewardCurve, sftMs: state.sftMs, totalMs: performance.now() - ctx.t0, checkpoint: ctx.run.latestCheckpoint() };
}
