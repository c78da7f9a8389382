/**
 * The training pipeline: SFT -> evaluation -> GRPO -> evaluation, from one validated config, with
 * metrics, trajectories and atomic checkpoints in a run folder, exact resume, and a clean stop.
 *
 * Read top to bottom:
 *   1. plan the suites (train / held-out tasks);
 *   2. expert episodes -> SFT examples; build (or load) the policy;
 *   3. SFT; checkpoint; the SFT policy also becomes the frozen reference for the KL term;
 *   4. evaluate on held-out tasks ("before-rl");
 *   5. GRPO steps: sample groups (many in flight, bounded staleness) -> advantages -> PPO-clip epochs;
 *   6. evaluate again ("after-rl").
 * Every step is seeded from (config seed, step), so a resumed run repeats an uninterrupted one.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { registerBundledEnvs } from "../envs/index.js";
import { Rng } from "../gym/rng.js";
import type { AttentionSettings } from "../model/transformer.js";
import { Rollout, type GroupTask } from "../rollout/agent-loop.js";
import { RolloutScheduler } from "../rollout/scheduler.js";
import type { Trajectory } from "../rollout/trajectory.js";
import { drillLossSteps, drillMaxExamples, type TrainConfig } from "./config.js";
import { groupAdvantage } from "../rl/advantages.js";
import { grpoUpdate, scaleNegativeAdvantages, type GrpoStepMetrics, type TrainSequence } from "../rl/grpo.js";
import { COPY_DRILL_SOURCE, copyDrillExamples } from "../recipes/copy-drill.js";
import { replannedSteps, sftSteps, sftTrain, stepsThatFit, type LeadExtension, type SftExample } from "../rl/sft.js";
import { evalOptionsOf, evaluate, type SuiteEval } from "./evaluate.js";
import { createPolicy, loadPolicy, savePolicy, type Policy } from "./policy.js";
import { Progress } from "./progress.js";
import { RunDir, writeJsonAtomic, type RunStatus } from "./run-dir.js";
import { readChatJsonl, type Conversation } from "./sft-data.js";
import { mean } from "./stats.js";
import { expertEpisodeCount, chatEnvKey, makeChatEnv, planSuites, type SuitePlan } from "./tasks.js";
import { PrepPool } from "./prep-pool.js";
import { scoreTrajectory, suiteRubric, trajectoryMessages, type ScoredTrajectory } from "./suite-reward.js";
import { learningRateAt } from "../rl/lr-schedule.js";
import { setMatmulPrecision } from "../kernels/index.js";

export interface TrainOptions {
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
   * Time boxes (milliseconds) for SFT and for GRPO: the stage ends after the step that crosses its
   * budget, and the run goes on to the next stage. Used by the demo to fit its time on any machine;
   * a time-boxed run is not repeatable step for step, so `--resume` is not exact for it.
   */
  sftBudgetMs?: number;
  grpoBudgetMs?: number;
  /**
   * Deadlines (`performance.now()` times) for the end of SFT and of GRPO, whatever came before: the demo
   * sets them from its own start, so slow data preparation shortens SFT instead of overrunning its time.
   */
  sftDeadline?: number;
  grpoDeadline?: number;
  /**
   * A time (`performance.now()`) by which the evaluation after RL should be done: GRPO then also ends
   * early enough for an evaluation 15% longer than the one before RL took, so a slow machine or a
   * loaded one shortens GRPO instead of overrunning. The demo sets it from its own start.
   */
  evalBy?: number;
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

interface TrainerState {
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

function mixSeed(a: number, b: number): number {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + 1, 0xc2b2ae35);
  h ^= h >>> 15;
  return (Math.imul(h, 0x27d4eb2f) ^ (h >>> 13)) >>> 0;
}

/** The SFT leads by the source examples carry: the suites' (suites[i].sftLead) and all of the copy drill's; none where nothing leads. */
function sftLeads(cfg: TrainConfig, plans: SuitePlan[]): { leadBySource?: Record<string, number> } {
  const leads = cfg.suites.flatMap((s, i) => ((s.sftLead ?? 0) > 0 ? [[plans[i]!.name, s.sftLead!] as const] : []));
  if (cfg.sft.copyDrill) leads.unshift([COPY_DRILL_SOURCE, 1] as const);
  return leads.length ? { leadBySource: Object.fromEntries(leads) } : {};
}

/** The attention a config's policy runs with: its sink window, or full attention (undefined). */
export function attentionOf(cfg: TrainConfig): AttentionSettings | undefined {
  return cfg.attention.mode === "sink-window" ? { window: cfg.attention.window, sinks: cfg.attention.sinks } : undefined;
}

/**
 * The GRPO step's tasks, seeded by step: every suite gets the whole part of its share of the batch
 * (batchTasks x its weight / the weights' sum), taken in turns; the slots left over are drawn by weight.
 * Tasks come from each suite's training pool: its training tasks, or one per distinct contents
 * (`grpo.taskSampling`).
 */
export function stepTasks(cfg: TrainConfig, plans: SuitePlan[], step: number): { plan: SuitePlan; taskIndex: number; seed: number }[] {
  const rng = new Rng(mixSeed(cfg.seed, step));
  const totalWeight = plans.reduce((a, p) => a + p.weight, 0);
  const quota = plans.map((p) => Math.floor((cfg.grpo.batchTasks * p.weight) / totalWeight + 1e-9));
  const slots: SuitePlan[] = [];
  while (quota.some((q) => q > 0)) {
    plans.forEach((p, i) => {
      if (quota[i]! > 0) {
        slots.push(p);
        quota[i]!--;
      }
    });
  }
  const out = [];
  for (let b = 0; b < cfg.grpo.batchTasks; b++) {
    let plan = slots[b];
    if (!plan) {
      let x = rng.next() * totalWeight;
      plan = plans.find((p) => (x -= p.weight) < 0) ?? plans[plans.length - 1]!;
    }
    out.push({ plan, taskIndex: rng.pick(plan.rlTasks ?? (cfg.grpo.taskSampling === "content" ? plan.trainContents : plan.trainTasks)), seed: rng.int(2 ** 31) });
  }
  return out;
}

/** Sequences the trainer learns from: each trajectory segment with its suite's reward (drifted ones excluded). */
function trainSequences(group: Trajectory[], scored: ScoredTrajectory[], suite: string): TrainSequence[][] {
  // Trajectories that drifted, failed or could not be scored are left out of the update; the group
  // keeps its other members.
  const usable = group.flatMap((t, i) => (t.drift.length === 0 && t.endReason !== "error" && t.segments.length > 0 && !scored[i]!.error ? [{ t, reward: scored[i]!.reward }] : []));
  return [
    usable.map(({ t, reward }) => {
      const s = t.segments[0]!;
      return { tokens: s.tokens, lossMask: s.lossMask, behaviourLogprobs: s.behaviourLogprobs, reward, policyVersion: s.policyVersion, suite };
    }),
  ];
}

function trajectoryRecord(policy: Policy, suite: string, groupIdx: number, t: Trajectory, scored: ScoredTrajectory, advantage: number | undefined, withTokens: boolean): Record<string, unknown> {
  const seg = t.segments[0];
  return {
    suite,
    envId: t.envId,
    taskIndex: t.taskIndex,
    group: groupIdx,
    index: t.groupIndex,
    reward: scored.reward,
    ...(scored.components ? { success: scored.success, rewardComponents: scored.components } : {}),
    advantage,
    endReason: t.endReason,
    error: t.error ?? scored.error,
    policyVersion: t.policyVersion,
    evidence: t.info.evidence,
    messages: trajectoryMessages(t),
    ...(withTokens && seg
      ? {
          tokens: seg.tokens,
          pieces: seg.tokens.map((id) => policy.codec.decode([id])),
          lossMask: [...seg.lossMask],
          logprobs: [...seg.behaviourLogprobs].map((x) => Math.round(x * 1e4) / 1e4),
        }
      : {}),
  };
}

/** At most this many conversations are read to build a new model's trimmed vocabulary. */
const VOCAB_SAMPLE = 6000;

export async function train(cfg: TrainConfig, options: TrainOptions = {}): Promise<TrainResult> {
  registerBundledEnvs();
  const t0 = performance.now();
  const run = RunDir.create(cfg.runsDir, cfg.name, { resume: options.resume ?? false });
  const startedAt = new Date().toISOString();
  const status = (s: Partial<RunStatus>) =>
    run.writeStatus({ state: "running", stage: "setup", step: 0, totalSteps: 0, startedAt, updatedAt: new Date().toISOString(), ...s });
  if (options.resume) {
    const saved = JSON.parse(readFileSync(run.file("config.json"), "utf8")) as TrainConfig;
    if (JSON.stringify(saved) !== JSON.stringify(cfg)) {
      throw new Error(`cannot resume ${run.path}: the config differs from the one the run started with (${run.file("config.json")})`);
    }
  } else {
    run.writeConfig(cfg);
  }
  status({ stage: "setup" });
  const log = (msg: string) => {
    if (!options.quiet) process.stderr.write(`${msg}\n`);
  };
  const metrics = (record: Record<string, unknown>) => {
    const full = { ...record, time: Math.round(performance.now() - t0) / 1000 };
    run.appendMetrics(full);
    options.onMetrics?.(full);
  };

  // Task contents, expert episodes and SFT examples are prepared on worker threads (stopped once the data is ready).
  const prep = new PrepPool();
  try {
    // 1. Suites and their train / held-out tasks.
    const plans = await planSuites(cfg, { contents: prep.taskContents });
    const rubrics = new Map(plans.map((p) => [p.name, suiteRubric(p.reward)]));
    log(`suites: ${plans.map((p) => `${p.name} (${p.trainTasks.length} train${p.rlTasks ? ` + ${p.rlTasks.length} GRPO-only` : ""} / ${p.evalTasks.length} eval tasks)`).join(", ")}`);

    // 2. SFT data: expert episodes on training tasks, plus imported chat JSONL.
    const conversations: Conversation[] = [];
    // Each conversation's source (its suite's name, or the data file as the config names it), for the SFT loss per source.
    const sources: string[] = [];
    // Whether the context-loss phase covers it (a suite can opt out with sftContextLoss: false).
    const contextLoss: boolean[] = [];
    const add = (c: Conversation, source: string, inContextLoss = true) => {
      conversations.push(c);
      sources.push(source);
      contextLoss.push(inContextLoss);
    };
    if (cfg.sft.enabled || cfg.model.init) {
      const progress = new Progress("expert episodes", plans.reduce((n, p) => n + expertEpisodeCount(p, cfg.sft.expertEpisodes), 0), "eps", options.quiet);
      const perSuite = await prep.expertConversations(plans, cfg.sft.expertEpisodes, cfg.seed, (n) => progress.tick(n));
      perSuite.forEach(({ kept, failed }, i) => {
        if (failed > 0) log(`  ${plans[i]!.name}: the expert failed ${failed} of ${kept.length + failed} episodes (left out of the SFT data)`);
        for (const c of kept) add(c, plans[i]!.name, cfg.suites[i]!.sftContextLoss ?? true);
      });
      progress.finish();
      for (const file of cfg.sft.data) {
        for (const c of readChatJsonl(file)) add(c, file);
      }
    }

    // Matrix products in bf16 where the config asks and the CPU has a bf16 unit (AMX or AVX512-BF16); a
    // process-wide setting, so it is set (to fp32 as well) at every start.
    const matmul = setMatmulPrecision(cfg.model.matmul);
    if (matmul !== cfg.model.matmul) log(`model.matmul is "${cfg.model.matmul}", but this CPU (or OS) has no bf16 unit for it (AMX or AVX512-BF16): matrix products stay ${matmul}`);

    // The policy: resumed from the latest checkpoint, loaded, or a fresh model over the data's vocabulary.
    const latest = options.resume ? run.latestCheckpoint() : undefined;
    let state: TrainerState = { stage: "sft", step: 0, sftSteps: 0, grpo: { rolloutTokens: 0, trainTokens: 0, rolloutMs: 0, trainMs: 0 }, rewardCurve: [], sftMs: 0 };
    let policy: Policy;
    if (latest) {
      state = JSON.parse(readFileSync(join(latest, "trainer.json"), "utf8")) as TrainerState;
      policy = loadPolicy(latest, attentionOf(cfg));
      log(`resuming from ${latest} (${state.stage} step ${state.step})`);
      run.truncateMetrics((r) => {
        // Keep what the checkpoint already contains; later records are recomputed identically.
        if (r.stage === "setup" || r.stage === "eval-before") return true;
        if (r.stage === "sft") return state.stage === "grpo" || (r.step as number) <= state.step;
        if (r.stage === "grpo") return state.stage === "grpo" && (r.step as number) <= state.step;
        return false;
      });
    } else if (cfg.model.checkpoint) {
      policy = loadPolicy(cfg.model.checkpoint, attentionOf(cfg));
    } else {
      // The vocabulary is read off an even sample of the conversations (ids the sample lacks are spelled
      // with smaller pieces, down to bytes): rendering all of them would cost as much again as the SFT data.
      const step = Math.max(1, Math.ceil(conversations.length / VOCAB_SAMPLE));
      policy = createPolicy(cfg.model.init!, conversations.filter((_, i) => i % step === 0), cfg.seed, attentionOf(cfg));
    }
    const params = policy.engine.weights.data.length;
    log(`policy: ${policy.engine.config.arch}, ${(params / 1e6).toFixed(2)}M parameters, vocabulary ${policy.codec.size}, kernels ${policy.engine.kernels.describe()}`);
    if (!latest) metrics({ stage: "setup", step: 0, parameters: params, vocabulary: policy.codec.size, sftConversations: conversations.length });

    const checkpoint = async (name: string, st: TrainerState) => {
      return run.saveCheckpoint(
        name,
        async (dir) => {
          await savePolicy(policy, dir, { optimizer: true });
          writeFileSync(join(dir, "trainer.json"), JSON.stringify(st, null, 2));
        },
        cfg.keepCheckpoints,
      );
    };
    const stopNow = async (st: TrainerState): Promise<TrainResult> => {
      const dir = await checkpoint(`${st.stage}-${String(st.step).padStart(5, "0")}`, st);
      status({ state: "stopped", stage: st.stage, step: st.step });
      log(`stopped; checkpoint saved at ${dir}; continue with --resume`);
      return { runDir: run.path, stopped: true, grpo: st.grpo, rewardCurve: st.rewardCurve, sftMs: st.sftMs, totalMs: performance.now() - t0, checkpoint: dir };
    };

    // 3. SFT.
    const examples: SftExample[] = (await prep.examples(policy, conversations)).map((e, i) => ({ ...e, source: sources[i], ...(contextLoss[i] ? {} : { contextLoss: false }) })).filter((e) => !e.drifted);
    await prep.close();
    const drillCfg = cfg.sft.enabled ? cfg.sft.copyDrill : undefined;
    let extendDrill: LeadExtension | undefined;
    if (drillCfg) {
      // With untilLoss, the examples past `examples` are the drill's extension (the first `examples` are
      // the same either way: the drill draws its examples in turn from one seeded stream).
      const all = copyDrillExamples(examples, { ...drillCfg, examples: drillCfg.untilLoss === undefined ? drillCfg.examples : drillMaxExamples(drillCfg) }, cfg.seed);
      examples.push(...all.slice(0, drillCfg.examples));
      const steps = (n: number) => Math.ceil(n / cfg.sft.batchSize);
      log(`copy drill: ${drillCfg.examples} examples of spans from the SFT data, each written twice${drillCfg.recall ? ` (the second time in a shuffled order in ${Math.round(100 * drillCfg.recall)}% of them)` : ""}; ${steps(drillCfg.examples)} steps, leading the first epoch` +
        (drillCfg.untilLoss === undefined ? "" : `, and up to ${steps(all.length - drillCfg.examples)} more steps while its loss over its last ${drillLossSteps(drillCfg)} steps is ${drillCfg.untilLoss} or more`));
      if (drillCfg.untilLoss !== undefined) {
        state.drill ??= { losses: [], extended: 0 };
        extendDrill = {
          source: COPY_DRILL_SOURCE,
          examples: all.slice(drillCfg.examples),
          meanLoss: drillCfg.untilLoss,
          window: drillLossSteps(drillCfg),
          pastLosses: state.drill.losses.slice(),
          onEnd: ({ meanLoss, batches, ranOut }) =>
            log(`copy drill: loss ${meanLoss.toFixed(4)} over its last ${drillLossSteps(drillCfg)} steps after ${batches} more steps` +
              (ranOut ? ` (its maxExamples, ${all.length}; still at or above ${drillCfg.untilLoss})` : ` (below ${drillCfg.untilLoss})`)),
        };
      }
    }
    // Every epoch's steps and the steps planned (state.sftPlanned: cut by a time budget), each with the
    // drill's extension so far.
    const baseSft = cfg.sft.enabled ? sftSteps(examples, cfg.sft) : 0;
    const extendedSft = () => state.drill?.extended ?? 0;
    const totalSft = () => baseSft + extendedSft();
    const plannedSft = () => (state.sftPlanned ?? baseSft) + extendedSft();
    if (state.stage === "sft" && cfg.sft.enabled && state.step < totalSft()) {
      const tSft = performance.now();
      status({ stage: "sft", step: state.step, totalSteps: totalSft() });
      const sftDeadline = Math.min(tSft + (options.sftBudgetMs ?? Infinity), options.sftDeadline ?? Infinity);
      let outOfTime = false;
      const progress = new Progress("sft", plannedSft() - state.step, "steps", options.quiet);
      let stopped = false;
      const startStep = state.step;
      // Under a time budget, the learning-rate schedule and the context-loss phase are planned over the
      // steps that fit: measured over the first 120 steps and again every 100 steps until 90% of the
      // plan, and re-planned only when the measure is 20% or more off the plan (steps of different suites
      // take different times: a measure over 20 steps was 13% off the run's rate once). The first steps
      // (allocations, caches warming up) are left out of the measure.
      let measuredFrom = { step: startStep + 5, at: Infinity };
      const fitToBudget = (step: number) => {
        const msPerStep = (performance.now() - measuredFrom.at) / (step - measuredFrom.step);
        const fits = stepsThatFit({ step, totalSteps: totalSft(), msPerStep, msLeft: sftDeadline - performance.now() });
        const before = plannedSft();
        if (replannedSteps(before, fits) === before) return;
        state.sftPlanned = fits - extendedSft();
        progress.retarget(fits - startStep);
        log(`SFT: ${fits} of ${totalSft()} steps fit the time budget (${(msPerStep / 1000).toFixed(2)}s per step); the schedule is planned over ${fits}`);
      };
      let refitAt = Number.isFinite(sftDeadline) ? startStep + 125 : Infinity;
      await sftTrain(
        policy.engine,
        examples,
        { ...cfg.sft, maxGradNorm: 1, seed: cfg.seed, microBatch: cfg.sft.batchSize, ...sftLeads(cfg, plans) },
        async (m) => {
          state.step = m.step;
          if (m.source === COPY_DRILL_SOURCE && state.drill) state.drill.losses.push(m.loss);
          if (m.extension && state.drill) {
            state.drill.extended++;
            progress.retarget(plannedSft() - startStep);
          }
          progress.tick(1, `loss ${m.loss.toFixed(3)}${m.lossOn === "context" ? " (context)" : ""}`);
          metrics({ stage: "sft", step: m.step, loss: m.loss, lossOn: m.lossOn, ...(m.source !== undefined ? { source: m.source } : {}), ...(m.extension ? { extension: true } : {}), lr: m.lr, gradNorm: m.gradNorm, tokens: m.tokens, computedTokens: m.computedTokens });
          status({ stage: "sft", step: m.step, totalSteps: plannedSft() });
          if (m.step === measuredFrom.step) measuredFrom = { step: m.step, at: performance.now() };
          if (m.step >= refitAt) {
            fitToBudget(m.step);
            refitAt = m.step < 0.9 * plannedSft() ? m.step + 100 : Infinity;
          }
        },
        {
          startStep: state.step,
          plannedSteps: () => state.sftPlanned ?? baseSft,
          ...(extendDrill ? { extendLead: extendDrill } : {}),
          shouldStop: () => {
            stopped = options.shouldStop?.() ?? false;
            outOfTime = !stopped && performance.now() > sftDeadline;
            return stopped || outOfTime;
          },
        },
      );
      progress.finish();
      state.sftMs += performance.now() - tSft;
      if (stopped) return await stopNow(state);
      if (outOfTime) log(`SFT reached its time budget after step ${state.step} of ${plannedSft()}; going on to RL`);
    }
    state.sftSteps = totalSft();
    if (state.stage === "sft") state.sftDone = state.step;

    // The frozen reference policy: the policy as it enters RL (saved once, so a resume finds it).
    const referenceDir = join(run.path, "checkpoints", "reference");
    if (state.stage === "sft") {
      // RL gets a fresh optimizer, as a new stage: SFT's moments describe other gradients (in the demo,
      // SFT's gradient norm is about twice the policy gradient's), and would damp RL's first updates.
      policy.engine.resetOptimizer();
      state = { ...state, stage: "grpo", step: 0 };
      await savePolicy(policy, referenceDir);
      await checkpoint("grpo-00000", state);
    }
    const reference = cfg.grpo.klCoef > 0 && cfg.grpo.enabled ? loadPolicy(referenceDir, attentionOf(cfg)).engine : undefined;

    const evalOpts = { ...evalOptionsOf(cfg), quiet: options.quiet };
    // 4. Evaluation before RL (kept across resumes in eval.json).
    const evalFile = run.file("eval.json");
    const tables = (existsSync(evalFile) ? JSON.parse(readFileSync(evalFile, "utf8")) : { stages: {} }) as { stages: Record<string, Record<string, SuiteEval>> };
    if (!tables.stages["before-rl"] && !options.skipEval) {
      status({ stage: "eval-before", step: 0, totalSteps: 0 });
      const before = await evaluate(policy, plans, { ...evalOpts, label: "eval before RL" });
      tables.stages["before-rl"] = before;
      run.writeEval(tables);
      metrics({ stage: "eval-before", step: 0, success: Object.fromEntries(Object.entries(before).map(([k, v]) => [k, v.rate])) });
    }

    // 5. GRPO.
    const totalGrpo = cfg.grpo.enabled ? cfg.grpo.steps : 0;
    if (state.step < totalGrpo) {
      const progress = new Progress("grpo", totalGrpo - state.step, "steps", options.quiet);
      const rollout = new Rollout(policy.engine, policy.codec, policy.template, {
        maxTurns: cfg.grpo.maxTurns,
        maxTokensPerTurn: cfg.grpo.maxTokensPerTurn,
        maxContextTokens: cfg.grpo.maxContextTokens,
        temperature: cfg.grpo.temperature,
        topP: cfg.grpo.topP,
        seed: cfg.seed,
        mode: options.rolloutMode ?? "incremental",
        templateVars: policy.templateVars,
      });
      const stepsLeft = Array.from({ length: totalGrpo - state.step }, (_, i) => state.step + 1 + i);
      const tasks = async function* (): AsyncGenerator<GroupTask> {
        for (const step of stepsLeft) {
          for (const t of stepTasks(cfg, plans, step)) {
            yield {
              envId: t.plan.envId,
              makeEnv: () => makeChatEnv(t.plan.envId, t.plan.options),
              envKey: chatEnvKey(t.plan.envId, t.plan.options),
              reset: { seed: t.seed, options: { taskIndex: t.taskIndex } },
              groupSize: cfg.grpo.groupSize,
            };
          }
        }
      };
      const scheduler = new RolloutScheduler(rollout, { maxInFlight: cfg.grpo.concurrency, batchGroups: cfg.grpo.batchTasks, maxStaleness: cfg.grpo.maxStaleness });
      const tGrpo = performance.now();
      const evalBeforeMs = Object.values(tables.stages["before-rl"] ?? {}).reduce((ms, e) => ms + e.wallMs, 0);
      const grpoDeadline = Math.min(tGrpo + (options.grpoBudgetMs ?? Infinity), options.grpoDeadline ?? Infinity, (options.evalBy ?? Infinity) - 1.15 * evalBeforeMs);
      let tRollout = performance.now();
      let stepIndex = 0;
      let lastStats = { ...rollout.stats };
      for await (const batch of scheduler.batches(tasks())) {
        const step = stepsLeft[stepIndex++]!;
        const rolloutMs = performance.now() - tRollout;
        const groups = batch.groups;
        const stepTaskList = stepTasks(cfg, plans, step);
        // Rewards per suite, then the update (weights change between decoding steps only).
        const tTrain = performance.now();
        const scored = await Promise.all(groups.map((g, i) => Promise.all(g.map((t) => scoreTrajectory(rubrics.get(stepTaskList[i]!.plan.name), t)))));
        const trainGroups = groups.flatMap((g, i) => trainSequences(g, scored[i]!, stepTaskList[i]!.plan.name));
        const lr = learningRateAt(step, totalGrpo, cfg.grpo);
        let m: GrpoStepMetrics | undefined;
        await rollout.decoder.swapWeights(async () => {
          m = await grpoUpdate(policy.engine, reference, trainGroups, {
            ...cfg.grpo,
            lr,
            microBatch: 8,
          });
        });
        const trainMs = performance.now() - tTrain;
        // Per suite, one entry per trajectory: reward, success, model turns, and whether a limit cut the
        // episode off (a policy that learns to drag its episodes on shows there before its success falls).
        const bySuite: Record<string, { reward: number[]; success: number[]; turns: number[]; truncated: number[] }> = {};
        scored.forEach((g, i) => {
          const s = (bySuite[stepTaskList[i]!.plan.name] ??= { reward: [], success: [], turns: [], truncated: [] });
          g.forEach((x, j) => {
            const t = groups[i]![j]!;
            s.reward.push(x.reward);
            s.success.push(x.success ? 1 : 0);
            s.turns.push(t.turns.length);
            s.truncated.push(t.endReason.startsWith("truncated") ? 1 : 0);
          });
        });
        const meanBySuite = (key: keyof (typeof bySuite)[string]) => Object.fromEntries(Object.entries(bySuite).map(([k, v]) => [k, mean(v[key])]));
        // Model tokens of this step's rollouts: the rollout's counters since the last step (shared
        // prompt prefills are counted once, where they happen).
        const sampled = rollout.stats.sampledTokens - lastStats.sampledTokens;
        const prefilled = rollout.stats.prefillTokens - lastStats.prefillTokens;
        lastStats = { ...rollout.stats };
        // Tokens the update ran through the engine (old and reference log-probs, every epoch), after packing.
        const trainedTokens = m!.engineTokens;
        state.grpo.rolloutTokens += sampled + prefilled;
        state.grpo.trainTokens += trainedTokens;
        state.grpo.rolloutMs += rolloutMs;
        state.grpo.trainMs += trainMs;
        const allRewards = scored.flat().map((x) => x.reward);
        state.rewardCurve.push(mean(allRewards));
        state.step = step;
        metrics({
          stage: "grpo",
          step,
          policyVersion: policy.engine.policyVersion,
          reward: meanBySuite("reward"),
          success: meanBySuite("success"),
          episodes: Object.fromEntries(Object.entries(bySuite).map(([k, v]) => [k, { turns: mean(v.turns), truncated: mean(v.truncated) }])),
          rewardMean: mean(allRewards),
          lr,
          loss: m!.loss,
          kl: m!.kl,
          clipFraction: m!.clipFraction,
          entropy: m!.entropyEstimate,
          ratioMean: m!.ratioMean,
          gradNorm: m!.gradNorm,
          staleness: m!.staleness,
          degenerateGroups: m!.degenerateGroups,
          rewardErrors: scored.flat().filter((x) => x.error).length,
          trajectories: groups.flat().length,
          tokens: { prefill: prefilled, sampled, trained: trainedTokens },
          tokensPerSec: Math.round((sampled + prefilled + trainedTokens) / ((rolloutMs + trainMs) / 1000)),
          phaseMs: { rollout: Math.round(rolloutMs), train: Math.round(trainMs) },
        });
        // The step's trajectories for the dashboard (tokens for the first group of each suite).
        const seenSuite = new Set<string>();
        const records = groups.flatMap((g, gi) => {
          const name = stepTaskList[gi]!.plan.name;
          const withTokens = !seenSuite.has(name);
          seenSuite.add(name);
          // The advantages the update used: the configured estimator over the group's rewards, the
          // negative ones scaled by negativeAdvantageScale (before balanceSuites' per-suite scaling).
          const rewards = scored[gi]!.map((x) => x.reward);
          const advantages = g.length > 1 ? scaleNegativeAdvantages(groupAdvantage(rewards, cfg.grpo.estimator), cfg.grpo.negativeAdvantageScale) : g.map(() => 0);
          return g.map((t, i) => trajectoryRecord(policy, name, gi, t, scored[gi]![i]!, advantages[i], withTokens));
        });
        run.writeTrajectories("grpo", step, records);
        progress.tick(1, `reward ${mean(allRewards).toFixed(3)} kl ${m!.kl.toFixed(4)}`);
        status({ stage: "grpo", step, totalSteps: totalGrpo });
        const stop = options.shouldStop?.() ?? false;
        const outOfTime = performance.now() > grpoDeadline;
        if (step % cfg.checkpointEvery === 0 || step === totalGrpo || stop || outOfTime) {
          await checkpoint(`grpo-${String(step).padStart(5, "0")}`, state);
        }
        if (stop) {
          await rollout.close();
          status({ state: "stopped", stage: "grpo", step });
          log(`stopped after GRPO step ${step}; continue with --resume`);
          return { runDir: run.path, stopped: true, grpo: state.grpo, rewardCurve: state.rewardCurve, sftMs: state.sftMs, totalMs: performance.now() - t0, checkpoint: run.latestCheckpoint() };
        }
        if (outOfTime && step < totalGrpo) {
          log(`GRPO reached its time budget after step ${step} of ${totalGrpo}; going on to evaluation`);
          break;
        }
        tRollout = performance.now();
      }
      progress.finish();
      await rollout.close();
    }

    // 6. Evaluation after RL.
    let after: Record<string, SuiteEval> | undefined;
    if (!options.skipEval) {
      // The GRPO steps taken (a deadline can end GRPO before totalGrpo).
      status({ stage: "eval-after", step: state.step, totalSteps: totalGrpo });
      after = await evaluate(policy, plans, { ...evalOpts, label: "eval after RL" });
      tables.stages["after-rl"] = after;
      run.writeEval(tables);
      metrics({ stage: "eval-after", step: state.step, success: Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v.rate])) });
    }
    const finalDir = join(run.path, "final");
    await savePolicy(policy, finalDir);
    writeJsonAtomic(join(run.path, "result.json"), { grpo: state.grpo, rewardCurve: state.rewardCurve, sftMs: state.sftMs });
    status({ state: "done", stage: "done", step: state.step, totalSteps: totalGrpo });
    reference?.dispose();
    return {
      runDir: run.path,
      stopped: false,
      evalBefore: tables.stages["before-rl"],
      evalAfter: after,
      grpo: state.grpo,
      rewardCurve: state.rewardCurve,
      sftMs: state.sftMs,
      // Unknown for a run resumed from a checkpoint written before SFT's steps were recorded.
      ...(state.sftDone !== undefined ? { sft: { steps: state.sftDone, allSteps: state.sftSteps } } : {}),
      totalMs: performance.now() - t0,
      checkpoint: finalDir,
    };
  } catch (err) {
    status({ state: "failed", error: err instanceof Error ? err.message : String(err) });
    throw err;
  } finally {
    await prep.close();
  }
}
