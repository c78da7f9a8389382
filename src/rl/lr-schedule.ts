/**
 * The learning-rate schedule both training stages use: linear warm-up from lr / warmupSteps to lr, then
 * lr held constant or decayed along a cosine to minLrRatio x lr at the last planned step.
 */
export interface ScheduleHparams {
  lr: number;
  /** Steps of linear warm-up (0 = none). */
  warmupSteps?: number;
  /** "constant" (default) or "cosine". */
  lrSchedule?: "constant" | "cosine";
  /** The cosine's final learning rate as a fraction of lr (default 0.1). */
  minLrRatio?: number;
}

/** The learning rate of step `step` (1-based) of a run planned for `total` steps. */
export function learningRateAt(step: number, total: number, hp: ScheduleHparams): number {
  const warm = Math.min(hp.warmupSteps ?? 0, total);
  if (step <= warm) return (hp.lr * step) / warm;
  if ((hp.lrSchedule ?? "constant") === "constant") return hp.lr;
  const progress = Math.min(1, (step - warm) / Math.max(1, total - warm));
  const floor = hp.minLrRatio ?? 0.1;
  return hp.lr * (floor + (1 - floor) * 0.5 * (1 + Math.cos(Math.PI * progress)));
}
