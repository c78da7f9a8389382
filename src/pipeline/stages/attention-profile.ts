/**
 * The run's attention set up from the model itself (`attention.mode: profile`, `attention.sinkLogit`),
 * called by the prepare stage once the policy is built, and by GRPO every `attention.reprobeEvery` steps.
 *
 * Before SFT or GRPO: the policy is probed on a sample of the run's own conversations (or the profile
 * file `attention.profile` is read and checked against the model), the sink slots are laid out to cover
 * that model's position sinks (src/attention/layout.ts) and the policy runs with that sink window from
 * then on, in rollouts and training alike; the profile is written to the run folder (sink-profile.json)
 * and travels with every checkpoint (sinkflex_sink_profile.json). A run that continues a checkpoint takes
 * the checkpoint's profile and mask, and refuses a config whose settings differ. With `sinkLogit` the
 * policy gets the per-head sink logit, initialized on the same sample so its outputs do not change.
 *
 * Pinned secondary sinks: what the sink slots leave of `attention.pinBudget` pins the profile's token
 * sinks wherever they occur (`pinRuleOf`, attention's pins.ts). Rollouts (GRPO's and evaluation's) pin
 * them in every append and record the flags with each trajectory segment; GRPO's update (policy and
 * reference log-probs) scores with the recorded flags, and SFT examples get the flags a rollout of the
 * same tokens would have recorded, so sampled and teacher-forced log-probs agree.
 *
 * Re-probing during GRPO updates the saved profile and logs what moved; the mask stays the one the run
 * started with (rollouts in flight and checkpoints are bound to it). A stage reads the pin rule once,
 * when it starts: a later stage (or a resumed run) pins the token sinks of the profile it then holds,
 * and each update trains with the flags its own rollouts recorded.
 *
 * This file trains nothing and decides no order.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  checkProfileFits, describeLayout, describeSinkWindow, initSinkLogits, parseProfile, probeSinks, profileChanges, profileLayout,
  pinFlags, readProfile, secondarySinkTokens, sequencePins, SINK_PROFILE_FILE, SINK_WINDOW_FILE, writeProfile, type ProfileLayout, type SinkPinRule, type SinkProfile, type SinkWindow,
} from "../../attention/index.js";
import type { PinRule } from "../../rollout/index.js";
import type { SftExample } from "../../rl/index.js";
import type { TrainConfig } from "../config.js";
import { EmbeddedEngine } from "../../engine/index.js";
import type { Policy } from "../policy.js";
import { conversationToExample, type Conversation } from "../sft-data.js";
import type { RunContext } from "./context.js";

/** The run's conversations (the prepare stage's data). */
type RunConversations = { conversations: readonly Conversation[] };
/** The policy a run starts with, and the checkpoint it continues (prepare.ts's Start). */
type StartPolicy = { policy: Policy; from?: string };

/** The run folder's copy of the profile the policy is laid out with. */
export const RUN_PROFILE_FILE = "sink-profile.json";

/** The probe's settings in a run: conversations are short, so δ is 32 (the probe's default is 64). */
const PROBE = { delta: 32, queries: 64 } as const;

/** An attention setting of the config that the checkpoint or the model contradicts. */
export class AttentionSetupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AttentionSetupError";
  }
}

/** A sample of `n` conversations, evenly spread, rendered with the policy's template: token ids. */
export function probeSample(policy: Policy, data: RunConversations, n: number): number[][] {
  const all = data.conversations;
  const step = Math.max(1, Math.floor(all.length / n));
  const out: number[][] = [];
  for (let i = 0; i < all.length && out.length < n; i += step) out.push(conversationToExample(policy, all[i]!).tokens);
  return out;
}

/** The saved SINK_WINDOW_FILE of a checkpoint folder, or null without one. */
function savedMask(dir: string): SinkWindow | null {
  const path = join(dir, SINK_WINDOW_FILE);
  if (!existsSync(path)) return null;
  const r = JSON.parse(readFileSync(path, "utf8")) as SinkWindow;
  return { window: r.window, sinks: r.sinks };
}

/**
 * Sets the run's attention up on `start.policy` (see the file comment): may replace the policy's engine
 * (same weights, the profile's sink window, sink logits added). `from` is the checkpoint the policy was
 * loaded from (a continued run, or model.checkpoint), undefined for a fresh model.
 */
export function setUpAttention(ctx: RunContext, data: RunConversations, start: StartPolicy, from: string | undefined): void {
  const a = ctx.cfg.attention;
  const engine = start.policy.engine;
  if (!(engine instanceof EmbeddedEngine)) {
    // The torch worker runs what its checkpoint holds: a new run sets attention up on the embedded engine
    // before handing the policy over (prepare.ts), so here it only checks a continued checkpoint.
    if (a.sinkLogit && !engine.attention.sinkLogit) {
      throw new AttentionSetupError(`${from ?? "the policy"} has no sink logits, but attention.sinkLogit is true; a run cannot add them midway: start a new run, or set attention.sinkLogit: false`);
    }
    if (a.mode === "profile" && !engine.sinkProfile) {
      throw new AttentionSetupError(`${from ?? "the policy"} has no sink profile (${SINK_PROFILE_FILE}), but attention.mode is "profile"; a run cannot lay its policy out midway: start a new run, or use mode "sink-window"`);
    }
    return;
  }
  const cfg = engine.config;
  const saved = engine.sinkProfile ? checkProfileFits(parseProfile(engine.sinkProfile, `${from}/${SINK_PROFILE_FILE}`), cfg, `${from}/${SINK_PROFILE_FILE}`) : null;
  const resumed = start.from !== undefined;
  let attention = engine.model.attention;
  let profile: SinkProfile | null = null;
  if (a.mode === "profile") {
    if (resumed && saved) {
      profile = saved; // the run laid its policy out already: go on with that profile and mask
    } else if (a.profile) {
      profile = checkProfileFits(readProfile(a.profile), cfg, a.profile);
    } else {
      const sample = probeSample(start.policy, data, a.probeSequences);
      if (sample.length === 0) throw new AttentionSetupError("attention.mode profile probes the run's own conversations, and this stage has none: run the prepare stage (or give attention.profile)");
      profile = probeSinks(engine.model, sample, { ...PROBE, model: from ?? `${ctx.cfg.name} (initial policy)` });
    }
    const layout = profileLayout(profile, { window: a.window, sinks: a.sinks, pinBudget: a.pinBudget });
    checkAgainstCheckpoint(layout, from);
    attention = layout.attention;
    logLayout(ctx, profile, layout, start.policy, data);
    writeProfile(ctx.run.file(RUN_PROFILE_FILE), profile);
  }
  let weights = engine.weights;
  const hasSinkLogits = weights.entries.some((e) => e.kind === "sink");
  if (a.mode !== "profile" && !a.sinkLogit && !hasSinkLogits) return;
  if (hasSinkLogits && !a.sinkLogit) {
    throw new AttentionSetupError(`${from ?? "the policy"} has sink logits (self_attn.sinks), but attention.sinkLogit is false; set attention.sinkLogit: true to train with them`);
  }
  if (a.sinkLogit && !hasSinkLogits) {
    if (resumed) throw new AttentionSetupError(`${start.from} has no sink logits, but attention.sinkLogit is true; a run cannot add them midway: start a new run, or set attention.sinkLogit: false`);
    const calibration = probeSample(start.policy, data, a.probeSequences);
    if (calibration.length === 0) throw new AttentionSetupError("attention.sinkLogit is initialized on the run's own conversations, and this stage has none: run the prepare stage");
    const init = initSinkLogits(weights, engine.kernels, calibration);
    weights = init.weights;
    ctx.log(`attention: sink logit per head added, initialized at min log-sum-exp + ln ${init.epsilon} (largest logit change ${init.maxLogitChange.toExponential(2)} on ${calibration.length} conversations)`);
  }
  const sameMask = attention.window === engine.model.attention.window && attention.sinks === engine.model.attention.sinks;
  if (sameMask && weights === engine.weights) {
    if (profile) engine.sinkProfile = profile as unknown as Record<string, unknown>;
    return;
  }
  // A new engine over the (possibly extended) weights with the layout's mask: nothing has trained yet.
  const next = new EmbeddedEngine(weights, { kernels: engine.kernels, attention, tokenizerDir: engine.tokenizerDir, policyVersion: engine.policyVersion, seed: ctx.cfg.seed });
  next.usableTokens = engine.usableTokens;
  next.sinkProfile = profile ? (profile as unknown as Record<string, unknown>) : engine.sinkProfile;
  engine.dispose();
  start.policy = { ...start.policy, engine: next };
}

/**
 * A continued run's checkpoint (or model.checkpoint) that records a sink window must record the one the
 * profile gives: otherwise the config and the checkpoint disagree (both are named).
 */
function checkAgainstCheckpoint(layout: ProfileLayout, from: string | undefined): void {
  if (!from) return;
  const saved = savedMask(from);
  if (saved && saved.window > 0 && (saved.window !== layout.attention.window || saved.sinks !== layout.attention.sinks)) {
    throw new AttentionSetupError(
      `${from} was trained with ${describeSinkWindow(saved)} (its ${SINK_WINDOW_FILE}), but attention.mode profile gives ${describeSinkWindow(layout.attention)} ` +
        `for this config (window ${layout.attention.window}, sinks covering the profile's position sinks); set attention.window ${saved.window} and attention.sinks / pinBudget to give ${saved.sinks} slots, or start from a checkpoint without a sink window`,
    );
  }
}

function logLayout(ctx: RunContext, profile: SinkProfile, layout: ProfileLayout, policy: Policy, data: RunConversations): void {
  ctx.log(`attention: profile of ${profile.model} (${profile.sequences} sequences): ${describeLayout(layout)}`);
  const sample = probeSample(policy, data, 64);
  const starting = sample.filter((s) => layout.slotTokens.every((t, i) => s[i] === t)).length;
  if (sample.length > 0 && starting < sample.length) {
    ctx.log(`attention: ${sample.length - starting} of ${sample.length} sampled conversations do not start with the sink slots' tokens; their first ${layout.attention.sinks} positions are the slots all the same`);
  }
  ctx.metrics({
    stage: "setup", step: 0,
    attentionProfile: {
      window: layout.attention.window, sinks: layout.attention.sinks, slotTokens: layout.slotTokens, keptPositions: layout.keptPositions,
      droppedPositions: layout.droppedPositions, pinnedTokens: layout.pinnedTokens, pinBudget: layout.pins.budget, unpinnedTokens: layout.unpinnedTokens,
    },
  });
}

/**
 * The run's pin rule (see the file comment): with `attention.mode profile` on the embedded engine, the
 * token sinks of the profile the policy holds, pinned past the policy's sink slots, up to what those
 * slots leave of `attention.pinBudget`; undefined otherwise, or when nothing is to be pinned.
 */
export function pinRuleOf(cfg: Pick<TrainConfig, "attention">, policy: Policy): SinkPinRule | undefined {
  const a = cfg.attention;
  const engine = policy.engine;
  if (a.mode !== "profile" || !engine.sinkProfile) return undefined;
  const profile = parseProfile(engine.sinkProfile, "the policy's sink profile");
  // The slots the policy runs with (a continued run keeps its checkpoint's), and what they leave of the budget.
  const slots = engine instanceof EmbeddedEngine ? engine.model.attention.sinks : engine.attention.sinks;
  const budget = Math.max(0, a.pinBudget - Math.max(0, slots - a.sinks));
  const tokenIds = secondarySinkTokens(profile).map((t) => t.tokenId).sort((x, y) => x - y);
  return budget > 0 && tokenIds.length > 0 ? { tokenIds, budget, slots } : undefined;
}

/** The rollout's form of a pin rule (RolloutOptions.pins), or undefined without one. */
export function rolloutPins(rule: SinkPinRule | undefined): PinRule | undefined {
  return rule ? (tokens, start, before) => pinFlags(rule, tokens, start, before) : undefined;
}

/**
 * SFT examples with the flags a rollout of the same tokens records: the assistant's tokens (trained, or in
 * an untrained range) are what a policy samples, never pinned; the others are appended. Unchanged without a rule.
 */
export function pinExamples<E extends SftExample>(rule: SinkPinRule | undefined, examples: E[]): E[] {
  if (!rule) return examples;
  return examples.map((ex) => {
    const sampled = Uint8Array.from(ex.lossMask);
    const spans = ex.untrained ?? [];
    for (let k = 0; k + 1 < spans.length; k += 2) sampled.fill(1, spans[k], spans[k + 1]);
    return { ...ex, pinned: sequencePins(rule, ex.tokens, sampled) };
  });
}

/**
 * GRPO's re-probe (every `attention.reprobeEvery` steps, mode "profile"): probes the policy on the step's
 * trajectories, logs what moved against the profile it holds, and keeps the new profile in the run
 * folder and the next checkpoints. The mask is not changed (see the file comment).
 */
export function reprobeAttention(ctx: RunContext, policy: Policy, step: number, sequences: number[][]): void {
  const a = ctx.cfg.attention;
  if (a.mode !== "profile" || a.reprobeEvery === 0 || step % a.reprobeEvery !== 0) return;
  const engine = policy.engine;
  if (!(engine instanceof EmbeddedEngine)) return;
  const usable = sequences.filter((s) => s.length > PROBE.delta).slice(0, a.probeSequences);
  if (usable.length === 0) {
    ctx.log(`attention: GRPO step ${step}: no trajectory longer than ${PROBE.delta} tokens to re-probe on; the profile stays`);
    return;
  }
  const before = engine.sinkProfile ? parseProfile(engine.sinkProfile, "the policy's profile") : null;
  const after = probeSinks(engine.model, usable, { ...PROBE, model: `${ctx.cfg.name} GRPO step ${step}` });
  const moved = before ? profileChanges(before, after) : ["no profile before"];
  if (moved.length === 0) ctx.log(`attention: GRPO step ${step}: re-probed on ${usable.length} trajectories; the sinks did not move`);
  else {
    ctx.log(`attention: GRPO step ${step}: re-probed on ${usable.length} trajectories; moved: ${moved.join("; ")}`);
    const layout = profileLayout(after, { window: a.window, sinks: a.sinks, pinBudget: a.pinBudget });
    const now = engine.model.attention;
    if (layout.attention.sinks !== now.sinks) {
      ctx.log(`attention: the new profile would lay out ${layout.attention.sinks} sink slots; the run keeps its ${now.sinks} (its rollouts and checkpoints use that mask)`);
    }
  }
  ctx.metrics({ stage: "grpo", step, attentionReprobe: { sequences: usable.length, moved } });
  engine.sinkProfile = after as unknown as Record<string, unknown>;
  writeProfile(ctx.run.file(RUN_PROFILE_FILE), after);
}

