/**
 * Stage 2, SFT: trains the policy on the prepared examples, top to bottom, with a checkpoint every
 * `sft.checkpointEvery` steps (a kill loses at most that many; `--resume` repeats the rest exactly),
 * and hands over to RL: a fresh optimizer, the policy saved as the frozen reference for the KL term,
 * and the checkpoint "grpo-00000" that the GRPO stage starts from.
 *
 * The time budget's rules (deadline, re-planning to the steps that fit) are budget.ts's; the loss and
 * the batches are rl/sft.ts's.
 */
import { join } from "node:path";
import { COPY_DRILL_SOURCE } from "../../recipes/index.js";
import { sftSteps, sftTrain } from "../../rl/index.js";
import { SftClock } from "../budget.js";
import { savePolicy, type Policy } from "../policy.js";
import { Progress } from "../progress.js";
import type { SuitePlan } from "../tasks.js";
import { pinExamples, pinRuleOf } from "./attention-profile.js";
import { saveCheckpoint, type RunContext, type TrainerState } from "./context.js";
import type { SftData } from "./prepare.js";

/** The folder of the frozen reference policy (the policy as it enters RL). */
export function referenceDir(ctx: RunContext): string {
  return join(ctx.run.path, "checkpoints", "reference");
}

/** The SFT leads by the source examples carry: the suites' (suites[i].sftLead) and all of the copy drill's; none where nothing leads. */
function sftLeads(ctx: RunContext, plans: SuitePlan[]): { leadBySource?: Record<string, number> } {
  const { cfg } = ctx;
  const leads = cfg.suites.flatMap((s, i) => ((s.sftLead ?? 0) > 0 ? [[plans[i]!.name, s.sftLead!] as const] : []));
  if (cfg.sft.copyDrill) leads.unshift([COPY_DRILL_SOURCE, 1] as const);
  return leads.length ? { leadBySource: Object.fromEntries(leads) } : {};
}

/**
 * Runs SFT from `state` (stage "sft") to its end, then hands over to RL (state becomes GRPO step 0).
 * Returns "stopped" when a stop request ended it (a checkpoint is saved at the step reached).
 */
export async function runSft(ctx: RunContext, policy: Policy, state: TrainerState, plans: SuitePlan[], data: SftData): Promise<"stopped" | "done"> {
  const { cfg, options } = ctx;
  // With pinned secondary sinks (attention.mode profile), each example carries the flags a rollout of it records.
  const pins = pinRuleOf(cfg, policy);
  const examples = pinExamples(pins, data.examples);
  const extendDrill = data.extendDrill && { ...data.extendDrill, examples: pinExamples(pins, data.extendDrill.examples) };
  // Every epoch's steps and the steps planned (state.sftPlanned: cut by a time budget), each with the
  // drill's extension so far.
  const baseSft = cfg.sft.enabled ? sftSteps(examples, cfg.sft) : 0;
  const extendedSft = () => state.drill?.extended ?? 0;
  const totalSft = () => baseSft + extendedSft();
  const plannedSft = () => (state.sftPlanned ?? baseSft) + extendedSft();
  if (state.stage === "sft" && cfg.sft.enabled && state.step < totalSft()) {
    const tSft = performance.now();
    ctx.status({ stage: "sft", step: state.step, totalSteps: totalSft() });
    const startStep = state.step;
    const clock = new SftClock(options, startStep, tSft);
    let outOfTime = false;
    let stopped = false;
    const progress = new Progress("sft", plannedSft() - state.step, "steps", options.quiet);
    await sftTrain(
      policy.engine,
      examples,
      { ...cfg.sft, maxGradNorm: 1, seed: cfg.seed, microBatch: cfg.sft.batchSize, ...sftLeads(ctx, plans) },
      async (m) => {
        state.step = m.step;
        if (m.source === COPY_DRILL_SOURCE && state.drill) state.drill.losses.push(m.loss);
        if (m.extension && state.drill) {
          state.drill.extended++;
          progress.retarget(plannedSft() - startStep);
        }
        progress.tick(1, `loss ${m.loss.toFixed(3)}${m.lossOn === "context" ? " (context)" : ""}`);
        ctx.metrics({ stage: "sft", step: m.step, loss: m.loss, lossOn: m.lossOn, ...(m.source !== undefined ? { source: m.source } : {}), ...(m.extension ? { extension: true } : {}), lr: m.lr, gradNorm: m.gradNorm, tokens: m.tokens, computedTokens: m.computedTokens });
        ctx.status({ stage: "sft", step: m.step, totalSteps: plannedSft() });
        const replan = clock.afterStep(m.step, { planned: plannedSft(), total: totalSft() });
        if (replan) {
          state.sftPlanned = replan.steps - extendedSft();
          progress.retarget(replan.steps - startStep);
          ctx.log(`SFT: ${replan.steps} of ${totalSft()} steps fit the time budget (${(replan.msPerStep / 1000).toFixed(2)}s per step); the schedule is planned over ${replan.steps}`);
        }
        // The step's checkpoint (the last step's is the hand-over's "grpo-00000").
        if (m.step % cfg.sft.checkpointEvery === 0 && m.step < plannedSft()) await saveCheckpoint(ctx, policy, state);
      },
      {
        startStep: state.step,
        plannedSteps: () => state.sftPlanned ?? baseSft,
        ...(extendDrill ? { extendLead: extendDrill } : {}),
        shouldStop: () => {
          stopped = options.shouldStop?.() ?? false;
          outOfTime = !stopped && clock.outOfTime();
          return stopped || outOfTime;
        },
      },
    );
    progress.finish();
    state.sftMs += performance.now() - tSft;
    if (stopped) {
      const dir = await saveCheckpoint(ctx, policy, state);
      ctx.status({ state: "stopped", stage: state.stage, step: state.step });
      ctx.log(`stopped; checkpoint saved at ${dir}; continue with --resume`);
      return "stopped";
    }
    if (outOfTime) ctx.log(`SFT reached its time budget after step ${state.step} of ${plannedSft()}; going on to RL`);
  }
  state.sftSteps = totalSft();
  if (state.stage === "sft") {
    state.sftDone = state.step;
    // RL gets a fresh optimizer, as a new stage: SFT's moments describe other gradients (in the demo,
    // SFT's gradient norm is about twice the policy gradient's), and would damp RL's first updates.
    policy.engine.resetOptimizer();
    Object.assign(state, { stage: "grpo", step: 0 });
    await savePolicy(policy, referenceDir(ctx));
    await saveCheckpoint(ctx, policy, state);
  }
  return "done";
}
