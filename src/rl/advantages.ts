/**
 * Group-relative advantages: GRPO, Dr. GRPO and RLOO. No value model.
 *
 * Input: the rewards of the G rollouts of each task (one group per task). Output: one advantage per
 * rollout, the same for every token of that rollout. This file does no I/O and knows no environment.
 */

export type AdvantageEstimator = "grpo" | "dr-grpo" | "rloo";
export const ADVANTAGE_ESTIMATORS: readonly AdvantageEstimator[] = ["grpo", "dr-grpo", "rloo"];

export interface GroupAdvantages {
  /** advantages[g][i]: the advantage of rollout i of group g. */
  advantages: number[][];
  /** Groups whose rewards were all equal (their advantages are all 0: no learning signal). */
  degenerateGroups: number;
  /** Indices of the groups kept (all of them unless `filterDegenerate`). */
  kept: number[];
}

/**
 * - grpo:    A_i = (r_i - mean(r)) / (std(r) + eps)      (population std, as in the GRPO paper)
 * - dr-grpo: A_i = r_i - mean(r)                          (no std normalization)
 * - rloo:    A_i = r_i - mean_{j != i}(r_j) = G/(G-1) (r_i - mean(r))
 */
export function groupAdvantage(rewards: readonly number[], estimator: AdvantageEstimator, eps = 1e-6): number[] {
  const G = rewards.length;
  if (G === 0) return [];
  for (const r of rewards) if (!Number.isFinite(r)) throw new Error(`groupAdvantage: reward ${r} is not a finite number`);
  const mean = rewards.reduce((a, b) => a + b, 0) / G;
  switch (estimator) {
    case "grpo": {
      const variance = rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / G;
      const std = Math.sqrt(variance);
      return rewards.map((r) => (r - mean) / (std + eps));
    }
    case "dr-grpo":
      return rewards.map((r) => r - mean);
    case "rloo":
      if (G < 2) throw new Error("groupAdvantage: RLOO needs at least 2 rollouts per group");
      return rewards.map((r) => (G / (G - 1)) * (r - mean));
    default:
      throw new Error(`groupAdvantage: unknown estimator "${estimator as string}"; use one of ${ADVANTAGE_ESTIMATORS.join(", ")}`);
  }
}

export function computeAdvantages(
  groups: readonly (readonly number[])[],
  estimator: AdvantageEstimator,
  options: { filterDegenerate?: boolean; eps?: number } = {},
): GroupAdvantages {
  const advantages: number[][] = [];
  const kept: number[] = [];
  let degenerateGroups = 0;
  groups.forEach((rewards, g) => {
    const degenerate = rewards.every((r) => r === rewards[0]);
    if (degenerate) degenerateGroups++;
    advantages.push(groupAdvantage(rewards, estimator, options.eps));
    if (!(degenerate && options.filterDegenerate)) kept.push(g);
  });
  return { advantages, degenerateGroups, kept };
}
