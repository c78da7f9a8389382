/**
 * Stage 4, GRPO: from the policy entering RL (or a GRPO checkpoint) to `grpo.steps`. One step reads top
 * to bottom below, as in cleanrl: sample the step's groups (many in flight, bounded staleness) ->
 * score them with each suite's reward -> the update (group advantages, PPO-clip epochs; it returns
 * the advantages it trained on) -> record (metrics, the dashboard's trajectories, checkpoint).
 *
 * Every step's tasks are seeded from (config seed, step), so a resumed run repeats an uninterrupted
 * one. The time budget's deadline is budget.ts's; the loss is rl/grpo.ts's.
 */
import { Rng } from "../../core/index.js";
import { mixSeed } from "../../core/index.js";
import type { Engine } from "../../engine/index.js";
import { RolloutScheduler } from "../../rollout/index.js";
import type { Trajectory } from "../../rollout/index.js";
import { grpoUpdate, type TrainSequence } from "../../rl/index.js";
import { learningRateAt } from "../../rl/index.js";
import { grpoDeadline } from "../budget.js";
import type { TrainConfig } from "../config.js";
import type { Policy } from "../policy.js";
import { Progress } from "../progress.js";
import { mean } from "../stats.js";
import { scoreTrajectory, trajectoryMessages, type ScoredTrajectory } from "../suite-reward.js";
import { chatEnvKey, makeChatEnv, type SuitePlan } from "../tasks.js";
import { isInfrastructureTrajectory, SuiteEnvs } from "../remote-envs.js";
import { RemoteSampler } from "../remote-sampler.js";
import { agentSuites, agentTrainSequences, SuiteRollout, type SuiteGroupTask } from "./agent-rollouts.js";
import { pinRuleOf, reprobeAttention, rolloutPins } from "./attention-profile.js";
import { saveCheckpoint, type RunContext, type TrainerState } from "./context.js";
import type { RunData } from "./prepare.js";

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

/**
 * The group's sequences the trainer learns from, each with its suite's reward, and which of the group's
 * trajectories they are. Trajectories that drifted, failed or could not be scored are left out of the
 * update; the group keeps its other members.
 */
function trainSequences(group: Trajectory[], scored: ScoredTrajectory[], suite: string): { sequences: TrainSequence[]; members: number[] } {
  const members = group.flatMap((t, i) => (t.drift.length === 0 && t.endReason !== "error" && t.segments.length > 0 && !scored[i]!.error ? [i] : []));
  const sequences = members.map((i) => {
    const s = group[i]!.segments[0]!;
    return { tokens: s.tokens, lossMask: s.lossMask, behaviourLogprobs: s.behaviourLogprobs, reward: scored[i]!.reward, policyVersion: s.policyVersion, suite, ...(s.pinned ? { pinned: s.pinned } : {}) };
  });
  return { sequences, members };
}

/** A trajectory as the dashboard shows it; `advantage` is the one the update trained it with (absent when it was not trained on). */
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
          ...(seg.pinned ? { pinned: [...seg.pinned] } : {}),
        }
      : {}),
  };
}

/**
 * Runs GRPO from `state` (stage "grpo") to `grpo.steps`, or until a stop request or the time budget ends
 * it. `evalBeforeMs` (the evaluation before RL's time) sizes the room the budget leaves for the one after.
 * Returns "stopped" when a stop request ended it (the step's checkpoint is saved).
 */
export async function runGrpo(ctx: RunContext, policy: Policy, reference: Engine | undefined, state: TrainerState, data: Pick<RunData, "plans" | "rubrics">, evalBeforeMs: number): Promise<"stopped" | "done"> {
  const { cfg, options } = ctx;
  const { plans, rubrics } = data;
  const totalGrpo = cfg.grpo.enabled ? cfg.grpo.steps : 0;
  if (state.step >= totalGrpo) return "done";
  // With a `sampler`, policy servers sample while the engine trains; they serve its weights from here on.
  const remote = cfg.sampler ? await RemoteSampler.open(cfg.sampler, policy, ctx.run.path, ctx.log) : undefined;
  // Suites with `remote` play their episodes on env servers (remote-envs.ts); the others here.
  const suiteEnvs = await SuiteEnvs.open(cfg, plans, ctx.log);
  const progress = new Progress("grpo", totalGrpo - state.step, "steps", options.quiet);
  // Suites with an `agent` are played by it through the recording gateway (agent-rollouts.ts).
  const rollout = new SuiteRollout(agentSuites(cfg, plans), remote?.pool ?? policy.engine, policy.codec, policy.template, {
    maxTurns: cfg.grpo.maxTurns,
    maxTokensPerTurn: cfg.grpo.maxTokensPerTurn,
    maxContextTokens: cfg.grpo.maxContextTokens,
    temperature: cfg.grpo.temperature,
    topP: cfg.grpo.topP,
    seed: cfg.seed,
    mode: options.rolloutMode ?? "incremental",
    templateVars: policy.templateVars,
    toolFormat: cfg.rollout.toolFormat,
    // Pinned secondary sinks (attention.mode profile) where the policy's own engine samples: a remote
    // sampler's sessions keep no pins, so its trajectories carry no flags and train without.
    pins: remote ? undefined : rolloutPins(pinRuleOf(cfg, policy)),
  });
  const stepsLeft = Array.from({ length: totalGrpo - state.step }, (_, i) => state.step + 1 + i);
  const tasks = async function* (): AsyncGenerator<SuiteGroupTask> {
    for (const step of stepsLeft) {
      for (const t of stepTasks(cfg, plans, step)) {
        yield {
          suite: t.plan.name,
          envId: t.plan.envId,
          ...(suiteEnvs.remoteSuites > 0 ? suiteEnvs.envFor(t.plan) : { makeEnv: () => makeChatEnv(t.plan.envId, t.plan.options), envKey: chatEnvKey(t.plan.envId, t.plan.options) }),
          reset: { seed: t.seed, options: { taskIndex: t.taskIndex } },
          groupSize: cfg.grpo.groupSize,
        };
      }
    }
  };
  const scheduler = new RolloutScheduler(rollout, { maxInFlight: suiteEnvs.maxInFlight(cfg.grpo.concurrency), batchGroups: cfg.grpo.batchTasks, maxStaleness: cfg.grpo.maxStaleness });
  const deadline = grpoDeadline(options, performance.now(), evalBeforeMs);
  let tRollout = performance.now();
  let stepIndex = 0;
  let lastStats = { ...rollout.stats };
  let idleSteps = 0;
  let stepsRun = 0;
  try {
    // 1. Sample: the scheduler hands over each step's groups once all of them are done.
    for await (const batch of scheduler.batches(tasks())) {
      const step = stepsLeft[stepIndex++]!;
      stepsRun++;
      const rolloutMs = performance.now() - tRollout;
      const groups = batch.groups;
      const stepTaskList = stepTasks(cfg, plans, step);
      const suiteOf = (g: number) => stepTaskList[g]!.plan.name;

      // 2. Score: every trajectory with its suite's reward.
      const tTrain = performance.now();
      const scored = await Promise.all(groups.map((g, i) => Promise.all(g.map((t) => scoreTrajectory(rubrics.get(suiteOf(i)), t)))));

      // 3. Advantages and update (weights change between decoding steps only): grpoUpdate computes the
      // group advantages, trains on them and returns them.
      const train = groups.map((g, i) => (rollout.isAgentSuite(suiteOf(i)) ? agentTrainSequences : trainSequences)(g, scored[i]!, suiteOf(i)));
      const lr = learningRateAt(step, totalGrpo, cfg.grpo);
      // A remote sampler's replicas all serve the new weights before anything samples again.
      const m = await rollout.decoder.swapWeights(async () => {
        const update = await grpoUpdate(policy.engine, reference, train.map((t) => t.sequences), { ...cfg.grpo, lr, microBatch: 8 });
        if (remote) await remote.sync(policy);
        return update;
      });
      const trainMs = performance.now() - tTrain;
      reprobeAttention(ctx, policy, step, groups.flat().flatMap((t) => t.segments.map((sg) => sg.tokens)));

      // 4. Record: the step's metrics, its trajectories for the dashboard, the checkpoint.
      // Per suite, one entry per trajectory: reward, success, model turns, and whether a limit cut the
      // episode off (a policy that learns to drag its episodes on shows there before its success falls).
      const bySuite: Record<string, { reward: number[]; success: number[]; turns: number[]; truncated: number[] }> = {};
      scored.forEach((g, i) => {
        const s = (bySuite[suiteOf(i)] ??= { reward: [], success: [], turns: [], truncated: [] });
        g.forEach((x, j) => {
          const t = groups[i]![j]!;
          if (isInfrastructureTrajectory(t)) return; // lost to the env servers: counted in envPool, not the policy's
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
      const trainedTokens = m.engineTokens;
      state.grpo.rolloutTokens += sampled + prefilled;
      state.grpo.trainTokens += trainedTokens;
      state.grpo.rolloutMs += rolloutMs;
      state.grpo.trainMs += trainMs;
      const allRewards = scored.flatMap((g, i) => g.filter((_, j) => !isInfrastructureTrajectory(groups[i]![j]!)).map((x) => x.reward));
      const envPool = suiteEnvs.stepMetrics();
      state.rewardCurve.push(mean(allRewards));
      state.step = step;
      ctx.metrics({
        stage: "grpo",
        step,
        policyVersion: policy.engine.policyVersion,
        reward: meanBySuite("reward"),
        success: meanBySuite("success"),
        episodes: Object.fromEntries(Object.entries(bySuite).map(([k, v]) => [k, { turns: mean(v.turns), truncated: mean(v.truncated) }])),
        rewardMean: mean(allRewards),
        lr,
        loss: m.loss,
        kl: m.kl,
        clipFraction: m.clipFraction,
        entropy: m.entropyEstimate,
        ratioMean: m.ratioMean,
        // The trainer's minus the sampler's log-prob on the sampled tokens (truncated IS weighs by its exp).
        logprobGap: { mean: m.logprobGap, absMean: m.logprobGapAbs, importanceWeight: m.importanceWeightMean },
        ...(remote ? { sampler: remote.stepMetrics() } : {}),
        gradNorm: m.gradNorm,
        staleness: m.staleness,
        degenerateGroups: m.degenerateGroups,
        groups: m.groups,
        noSignal: noSignal(m, allRewards) !== undefined,
        rewardErrors: scored.flat().filter((x) => x.error).length,
        ...(envPool ? { envPool } : {}),
        ...rollout.takeCounts(),
        trajectories: groups.flat().length,
        tokens: { prefill: prefilled, sampled, trained: trainedTokens },
        tokensPerSec: Math.round((sampled + prefilled + trainedTokens) / ((rolloutMs + trainMs) / 1000)),
        phaseMs: { rollout: Math.round(rolloutMs), train: Math.round(trainMs) },
      });
      // The step's trajectories (tokens for the first group of each suite), each with the advantage the
      // update trained it with.
      const seenSuite = new Set<string>();
      const records = groups.flatMap((g, gi) => {
        const withTokens = !seenSuite.has(suiteOf(gi));
        seenSuite.add(suiteOf(gi));
        const advantages = new Map(train[gi]!.members.map((j, k) => [j, m.advantages[gi]?.[k]]));
        return g.map((t, i) => trajectoryRecord(policy, suiteOf(gi), gi, t, scored[gi]![i]!, advantages.get(i), withTokens));
      });
      ctx.run.writeTrajectories("grpo", step, records);
      // A step whose groups all had equal rewards within each group (or no trainable sequence) has no
      // policy-gradient signal: it is said, not shown as a quiet "reward 0.000".
      const poolLine = suiteEnvs.stepLine(step, envPool);
      if (poolLine) ctx.log(poolLine);
      const signal = noSignal(m, allRewards);
      if (signal) {
        idleSteps++;
        ctx.log(`GRPO step ${step}: ${signal}`);
      }
      progress.tick(1, `reward ${mean(allRewards).toFixed(3)} kl ${m.kl.toFixed(4)}${signal ? ` (no signal: ${m.degenerateGroups}/${m.groups} groups degenerate)` : ""}`);
      ctx.status({ stage: "grpo", step, totalSteps: totalGrpo });
      const stop = options.shouldStop?.() ?? false;
      const outOfTime = performance.now() > deadline;
      if (step % cfg.checkpointEvery === 0 || step === totalGrpo || stop || outOfTime) await saveCheckpoint(ctx, policy, state);
      if (stop) {
        ctx.status({ state: "stopped", stage: "grpo", step });
        ctx.log(`stopped after GRPO step ${step}; continue with --resume`);
        return "stopped";
      }
      if (outOfTime && step < totalGrpo) {
        ctx.log(`GRPO reached its time budget after step ${step} of ${totalGrpo}; going on to evaluation`);
        break;
      }
      tRollout = performance.now();
    }
    progress.finish();
    if (stepsRun > 0 && idleSteps === stepsRun) {
      ctx.log(`GRPO learned nothing: in all ${stepsRun} steps every group's rollouts had equal rewards, so no advantage was non-zero. ` +
        "Give RL tasks the policy solves sometimes: more SFT (or demonstrations in sft.data), a higher grpo.temperature, a larger grpo.groupSize, or a reward with partial credit (suites[].reward)");
    } else if (idleSteps > 0) ctx.log(`GRPO: ${idleSteps} of ${stepsRun} steps had no learning signal (every group's rewards equal)`);
  } finally {
    await rollout.close();
    suiteEnvs.close();
  }
  return "done";
}

/**
 * Why a GRPO step had no policy-gradient signal (every group degenerate: equal rewards within each
 * group, or no sequence to train on), or undefined when it had one.
 */
function noSignal(m: { groups: number; degenerateGroups: number; sequences: number }, rewards: number[]): string | undefined {
  if (m.groups === 0) return undefined;
  if (m.degenerateGroups === m.groups) {
    const values = [...new Set(rewards.map((r) => r.toFixed(3)))];
    return `no learning signal: all ${m.groups} groups had equal rewards within the group (${values.length === 1 ? `every reward ${values[0]}` : `rewards ${values.slice(0, 5).join(", ")}`}), so every advantage is 0`;
  }
  if (m.sequences === 0) return `no learning signal: no trajectory of the ${m.groups} groups could be trained on (drifted, failed or unscored)`;
  return undefined;
}
