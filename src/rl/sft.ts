/**
 * Supervised fine-tuning on trajectories with the same loss mask as RL: the model learns the tokens an
 * agent would have sampled (assistant turns), never the prompt, template or environment tokens.
 *
 * Two additions for models trained from scratch (both off by default):
 * - a learning-rate schedule: linear warm-up, then constant or cosine decay to `minLrRatio` x lr;
 * - a context-loss phase: for the first `contextLossFraction` of the steps the loss also covers the
 *   user and tool tokens (every token after the system prompt). Predicting the environment's text is
 *   what teaches a small random model to read and copy from its context (task numbers, table names,
 *   ids in tool results); with the assistant tokens alone it memorizes the training tasks instead.
 *
 * Speed: examples of a micro-batch that share a prefix (the system prompt) are packed into one
 * sequence with one copy of it (rl/prefix-packing.ts; same loss). `batchBy: "prefix"` draws each batch
 * from the examples of one prefix (one suite), so the whole batch shares it.
 *
 * Input: tokenized examples (token ids + per-token mask). Where they come from (expert episodes,
 * imported chat JSONL) is the pipeline's business.
 */
import type { Engine, TokenLoss } from "../engine/index.js";
import { Rng } from "../gym/index.js";
import { sftLoss } from "./policy-loss.js";
import { packedForwardBackward } from "./prefix-packing.js";
import { learningRateAt } from "./lr-schedule.js";

export interface SftExample {
  tokens: number[];
  /** One entry per token: 1 = train on this token. */
  lossMask: Uint8Array;
  /** The first token of the context loss (the first after the system prompt); default 1. */
  contextStart?: number;
  /**
   * Token ranges never in the loss, not even in the context-loss phase, as [start, end) pairs in one
   * flat list: the assistant turns of weight 0 (demonstrated mistakes).
   */
  untrained?: number[];
  /** Where the example came from (a suite's name, a data file): reported with the loss of a step whose batch all comes from it. */
  source?: string;
  /** false: the context-loss phase leaves this example's loss on its assistant tokens (default true). */
  contextLoss?: boolean;
  /** One entry per token: 1 = a pinned position of the attention mask (as a rollout would pin it). Absent: none. */
  pinned?: Uint8Array;
}

export type LrSchedule = "constant" | "cosine";

/** "shuffle": batches of examples drawn at random; "prefix": each batch from examples sharing a system prompt. */
export type SftBatchBy = "shuffle" | "prefix";

export interface SftHparams {
  epochs: number;
  batchSize: number;
  lr: number;
  weightDecay: number;
  maxGradNorm: number;
  seed: number;
  /** Sequences per forward/backward call. */
  microBatch: number;
  /** Steps of linear warm-up from lr / warmupSteps to lr (0 = none). */
  warmupSteps?: number;
  lrSchedule?: LrSchedule;
  /** The cosine schedule's final learning rate, as a fraction of lr. */
  minLrRatio?: number;
  /** Fraction of the steps (the first ones) whose loss covers every token after the system prompt. */
  contextLossFraction?: number;
  /** How batches are drawn (default "shuffle"). */
  batchBy?: SftBatchBy;
  /** Pack examples that share a prefix into one sequence (default true; the loss is the same). */
  packPrefixes?: boolean;
  /**
   * A curriculum for `batchBy: "prefix"`: per source, the fraction of its batches the first epoch trains
   * before the shuffled mix (see `leadFirst`), for a skill that forms when its suite is trained alone and
   * not among the other suites' batches.
   */
  leadBySource?: Record<string, number>;
}

export interface SftStepMetrics {
  epoch: number;
  step: number;
  loss: number;
  gradNorm: number;
  /** Tokens the loss covered. */
  tokens: number;
  /** Tokens the engine computed (after prefix packing). */
  computedTokens: number;
  lr: number;
  /** "context": user, tool and assistant tokens; "assistant": the assistant's tokens only. */
  lossOn: "context" | "assistant";
  /** The batch's source, when every example of it has the same one (`batchBy: "prefix"` batches do). */
  source?: string;
  /** A batch of the lead's extension (see `LeadExtension`). */
  extension?: true;
}

/**
 * More batches for a leading source, while its loss stays high: after the source's last batch of the
 * first epoch, batches of `examples` (batchSize of them each, in order) are trained one at a time until
 * the mean loss of the source's last `window` steps is below `meanLoss`, or they run out. The steps
 * they take are added to the plan (its schedule and context-loss phase are planned over the steps
 * without them, plus those taken so far), so a run that needs none trains as it would without.
 * The source's batches must all lead (`leadBySource[source]` 1).
 */
export interface LeadExtension {
  source: string;
  examples: SftExample[];
  meanLoss: number;
  window: number;
  /** A resumed run's losses of the source's steps before its start step, in order (`--resume` stays exact). */
  pastLosses?: readonly number[];
  /** Called once the extension ends: the mean it ended on, the batches it took, and whether they ran out. */
  onEnd?: (end: { meanLoss: number; batches: number; ranOut: boolean }) => void;
}

/** The examples' system prompts as keys: examples with equal keys share the prompt's tokens. */
function promptKey(ex: SftExample): string {
  return ex.tokens.slice(0, Math.max(1, ex.contextStart ?? 1)).join(",");
}

/** The groups `batchBy: "prefix"` draws batches from (indices into examples, in order of appearance). */
export function promptGroups(examples: readonly SftExample[]): number[][] {
  const groups = new Map<string, number[]>();
  examples.forEach((ex, i) => {
    const key = promptKey(ex);
    const g = groups.get(key);
    if (g) g.push(i);
    else groups.set(key, [i]);
  });
  return [...groups.values()];
}

/**
 * The batches moved to the front of an epoch: `leadBySource[source]` of each source's batches (a batch's
 * source is its first example's), evenly spaced in their order (with 0.5, every other one), so that the
 * ones left stay spread over the mix; each part keeps its order.
 */
export function leadFirst(batches: number[][], examples: readonly SftExample[], leadBySource: Record<string, number>): number[][] {
  const seen = new Map<string, number>();
  const lead: number[][] = [];
  const rest: number[][] = [];
  for (const b of batches) {
    const source = examples[b[0]!]!.source ?? "";
    const j = seen.get(source) ?? 0;
    seen.set(source, j + 1);
    const f = leadBySource[source] ?? 0;
    // The source's batch j (from 0) leads when ceil((j + 1) f) > ceil(j f): its first n batches hold ceil(n f) leading ones.
    (Math.ceil((j + 1) * f) > Math.ceil(j * f) ? lead : rest).push(b);
  }
  return [...lead, ...rest];
}

/** One epoch's batches (indices into examples). */
function epochBatches(examples: readonly SftExample[], hp: Pick<SftHparams, "batchSize" | "batchBy" | "leadBySource">, rng: Rng, groups: number[][], epoch: number): number[][] {
  const chunk = (order: number[]) => {
    const out: number[][] = [];
    for (let b = 0; b < order.length; b += hp.batchSize) out.push(order.slice(b, b + hp.batchSize));
    return out;
  };
  if ((hp.batchBy ?? "shuffle") === "shuffle") return chunk(rng.shuffle(examples.map((_, i) => i)));
  const batches = rng.shuffle(groups.flatMap((g) => chunk(rng.shuffle([...g]))));
  return epoch === 0 && hp.leadBySource ? leadFirst(batches, examples, hp.leadBySource) : batches;
}

function meanOfLast(xs: readonly number[], n: number): number {
  const last = xs.slice(-n);
  return last.reduce((a, x) => a + x, 0) / Math.max(1, last.length);
}

/** The number of optimizer steps `sftTrain` will take with every epoch (without a lead's extension). */
export function sftSteps(examples: readonly SftExample[], hp: Pick<SftHparams, "epochs" | "batchSize" | "batchBy">): number {
  if ((hp.batchBy ?? "shuffle") === "shuffle") return hp.epochs * Math.ceil(examples.length / hp.batchSize);
  return hp.epochs * promptGroups(examples).reduce((n, g) => n + Math.ceil(g.length / hp.batchSize), 0);
}

/** Whether step `step` (1-based) of a run planned for `total` steps is in the context-loss phase. */
export function inContextLossPhase(step: number, total: number, hp: Pick<SftHparams, "contextLossFraction">): boolean {
  return step <= Math.round((hp.contextLossFraction ?? 0) * total);
}

/**
 * The loss mask of an example in the context-loss phase: every token from `contextStart` on, except its
 * untrained ranges; its own loss mask where the example opts out (`contextLoss: false`).
 */
export function contextMask(ex: SftExample): Uint8Array {
  if (ex.contextLoss === false) return ex.lossMask;
  const mask = new Uint8Array(ex.tokens.length);
  mask.fill(1, Math.max(1, ex.contextStart ?? 1));
  const spans = ex.untrained ?? [];
  for (let k = 0; k + 1 < spans.length; k += 2) mask.fill(0, spans[k], spans[k + 1]);
  return mask;
}

export async function sftTrain(
  engine: Engine,
  examples: SftExample[],
  hp: SftHparams,
  onStep?: (m: SftStepMetrics) => void | Promise<void>,
  options: {
    startStep?: number;
    shouldStop?: () => boolean;
    /**
     * The steps the schedule is planned over (fewer than every epoch's: training ends there), not
     * counting the lead's extension. Read each step.
     */
    plannedSteps?: () => number;
    extendLead?: LeadExtension;
  } = {},
): Promise<SftStepMetrics[]> {
  for (const [i, ex] of examples.entries()) {
    if (ex.tokens.length !== ex.lossMask.length) throw new Error(`sft: example ${i} has ${ex.tokens.length} tokens but a mask of ${ex.lossMask.length}`);
    if (ex.pinned && ex.pinned.length !== ex.tokens.length) throw new Error(`sft: example ${i} has ${ex.tokens.length} tokens but ${ex.pinned.length} pinned flags (one per token)`);
  }
  if (hp.leadBySource && (hp.batchBy ?? "shuffle") !== "prefix") throw new Error('sft: leadBySource orders batches of one source each: it needs batchBy "prefix"');
  const ext = options.extendLead;
  if (ext && hp.leadBySource?.[ext.source] !== 1) throw new Error(`sft: the lead's extension follows every batch of ${JSON.stringify(ext.source)}: it needs leadBySource[${JSON.stringify(ext.source)}] = 1`);
  const allSteps = sftSteps(examples, hp);
  let extended = 0;
  const planned = () => Math.min(allSteps, options.plannedSteps?.() ?? allSteps) + extended;
  const rng = new Rng(hp.seed);
  const groups = (hp.batchBy ?? "shuffle") === "prefix" ? promptGroups(examples) : [];
  const history: SftStepMetrics[] = [];
  let step = 0;
  const startStep = options.startStep ?? 0;
  // The extended source's losses, step by step (those before startStep from the resumed run).
  const sourceLosses: number[] = [];
  const ofSource = (batch: SftExample[]) => ext !== undefined && batch.every((ex) => ex.source === ext.source);

  /** One optimizer step on a batch; false once training ends (the plan's last step, or a stop). */
  const trainStep = async (batch: SftExample[], epoch: number, extension: boolean): Promise<boolean> => {
    step++;
    if (extension) extended++;
    if (step > planned()) return false;
    if (step <= startStep) {
      // Resumed: this step is already in the checkpoint.
      if (ofSource(batch)) {
        const loss = ext!.pastLosses?.[sourceLosses.length];
        if (loss === undefined) throw new Error(`sft: resuming at step ${startStep} needs the losses of ${JSON.stringify(ext!.source)}'s steps before it (the lead's extension depends on them), and the checkpoint has ${ext!.pastLosses?.length ?? 0}`);
        sourceLosses.push(loss);
      }
      return true;
    }
    // Let the event loop run (signals, progress, the dashboard): engine calls may finish synchronously.
    await new Promise<void>((resolve) => setImmediate(resolve));
    if (options.shouldStop?.()) return false;
    const total = planned();
    const lossOn = inContextLossPhase(step, total, hp) ? "context" : "assistant";
    const masks = batch.map((ex) => (lossOn === "context" ? contextMask(ex) : ex.lossMask).subarray(1));
    const covered = masks.reduce((n, mk) => n + mk.reduce((a, x) => a + x, 0), 0);
    let loss = 0;
    let computedTokens = 0;
    for (let m = 0; m < batch.length; m += hp.microBatch) {
      const microExamples = batch.slice(m, m + hp.microBatch);
      const micro = microExamples.map((ex) => ex.tokens);
      const pinned = microExamples.map((ex) => ex.pinned);
      const microMasks = masks.slice(m, m + hp.microBatch);
      const microTokens = microMasks.reduce((n, mk) => n + mk.reduce((a, x) => a + x, 0), 0);
      const scale = microTokens / Math.max(covered, 1);
      const microLoss: TokenLoss = (lp) => {
        const s = sftLoss(lp, microMasks);
        return { loss: s.loss * scale, dLogprobs: s.dLogprobs.map((d) => d.map((x) => x * scale)), metrics: s.metrics };
      };
      const anyPins = pinned.some((p) => p);
      const r = hp.packPrefixes === false
        ? await engine.forwardBackward(micro, microLoss, { scored: microMasks, ...(anyPins ? { pinned: pinned.map((p, i) => p ?? new Uint8Array(micro[i]!.length)) } : {}) })
        : await packedForwardBackward(engine, micro, microMasks, microLoss, pinned);
      loss += r.loss;
      computedTokens += r.metrics.tokens ?? 0;
    }
    const lr = learningRateAt(step, total, hp);
    const { gradNorm } = await engine.optimStep({ lr, weightDecay: hp.weightDecay, maxGradNorm: hp.maxGradNorm });
    if (ofSource(batch)) sourceLosses.push(loss);
    const source = batch[0]!.source;
    const metrics: SftStepMetrics = {
      epoch, step, loss, gradNorm, tokens: covered, computedTokens, lr, lossOn,
      ...(source !== undefined && batch.every((ex) => ex.source === source) ? { source } : {}),
      ...(extension ? { extension: true as const } : {}),
    };
    history.push(metrics);
    await onStep?.(metrics);
    return true;
  };

  /** The lead's extension: its batches while the source's recent loss is at or above the target. */
  const extendLead = async (epoch: number): Promise<boolean> => {
    const e = ext!;
    let k = 0;
    for (; k * hp.batchSize < e.examples.length && meanOfLast(sourceLosses, e.window) >= e.meanLoss; k++) {
      if (!(await trainStep(e.examples.slice(k * hp.batchSize, (k + 1) * hp.batchSize), epoch, true))) return false;
    }
    if (step >= startStep) e.onEnd?.({ meanLoss: meanOfLast(sourceLosses, e.window), batches: k, ranOut: k * hp.batchSize >= e.examples.length });
    return true;
  };

  for (let epoch = 0; epoch < hp.epochs; epoch++) {
    const batches = epochBatches(examples, hp, rng, groups, epoch);
    const lastOfSource = epoch === 0 && ext ? batches.findLastIndex((b) => examples[b[0]!]!.source === ext.source) : -1;
    for (const [b, indices] of batches.entries()) {
      if (!(await trainStep(indices.map((i) => examples[i]!), epoch, false))) return history;
      if (b === lastOfSource && !(await extendLead(epoch))) return history;
    }
  }
  return history;
}
