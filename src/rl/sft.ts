/**
 * Supervised fine-tuning on trajectories with the same loss mask as RL: the model learns the tokens an
 * agent would have sampled (assistant turns), never the prompt, template or environment tokens.
 *
 * Input: tokenized examples (token ids + per-token mask). Where they come from (expert episodes,
 * imported chat JSONL) is the pipeline's business.
 */
import type { Engine } from "../engine/types.js";
import { Rng } from "../gym/rng.js";
import { sftLoss } from "./policy-loss.js";

export interface SftExample {
  tokens: number[];
  /** One entry per token: 1 = train on this token. */
  lossMask: Uint8Array;
}

export interface SftHparams {
  epochs: number;
  batchSize: number;
  lr: number;
  weightDecay: number;
  maxGradNorm: number;
  seed: number;
  /** Sequences per forward/backward call. */
  microBatch: number;
}

export interface SftStepMetrics {
  epoch: number;
  step: number;
  loss: number;
  gradNorm: number;
  tokens: number;
}

/** The number of optimizer steps `sftTrain` will take. */
export function sftSteps(examples: number, hp: Pick<SftHparams, "epochs" | "batchSize">): number {
  return hp.epochs * Math.ceil(examples / hp.batchSize);
}

export async function sftTrain(
  engine: Engine,
  examples: SftExample[],
  hp: SftHparams,
  onStep?: (m: SftStepMetrics) => void | Promise<void>,
  options: { startStep?: number; shouldStop?: () => boolean } = {},
): Promise<SftStepMetrics[]> {
  for (const [i, ex] of examples.entries()) {
    if (ex.tokens.length !== ex.lossMask.length) throw new Error(`sft: example ${i} has ${ex.tokens.length} tokens but a mask of ${ex.lossMask.length}`);
  }
  const rng = new Rng(hp.seed);
  const history: SftStepMetrics[] = [];
  let step = 0;
  const startStep = options.startStep ?? 0;
  for (let epoch = 0; epoch < hp.epochs; epoch++) {
    const order = rng.shuffle(examples.map((_, i) => i));
    for (let b = 0; b < order.length; b += hp.batchSize) {
      step++;
      if (step <= startStep) continue; // resumed: these steps are already in the checkpoint
      // Let the event loop run (signals, progress, the dashboard): engine calls may finish synchronously.
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (options.shouldStop?.()) return history;
      const batch = order.slice(b, b + hp.batchSize).map((i) => examples[i]!);
      const total = batch.reduce((n, ex) => n + ex.lossMask.subarray(1).reduce((a, x) => a + x, 0), 0);
      let loss = 0;
      for (let m = 0; m < batch.length; m += hp.microBatch) {
        const micro = batch.slice(m, m + hp.microBatch);
        const masks = micro.map((ex) => ex.lossMask.subarray(1));
        const microTokens = masks.reduce((n, mk) => n + mk.reduce((a, x) => a + x, 0), 0);
        const scale = microTokens / Math.max(total, 1);
        const r = await engine.forwardBackward(
          micro.map((ex) => ex.tokens),
          (lp) => {
            const s = sftLoss(lp, masks);
            return { loss: s.loss * scale, dLogprobs: s.dLogprobs.map((d) => d.map((x) => x * scale)), metrics: s.metrics };
          },
        );
        loss += r.loss;
      }
      const { gradNorm } = await engine.optimStep({ lr: hp.lr, weightDecay: hp.weightDecay, maxGradNorm: hp.maxGradNorm });
      const metrics = { epoch, step, loss, gradNorm, tokens: total };
      history.push(metrics);
      await onStep?.(metrics);
    }
  }
  return history;
}
