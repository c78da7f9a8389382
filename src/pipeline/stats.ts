/**
 * Statistics for evaluation tables: success rates with Wilson confidence intervals, and the unbiased
 * pass@k estimator. Plain functions over numbers.
 */

/** Wilson score interval for a binomial proportion (z = 1.96 for 95%). */
export function wilsonInterval(successes: number, trials: number, z = 1.96): { low: number; high: number } {
  if (trials <= 0) return { low: 0, high: 1 };
  const p = successes / trials;
  const z2 = z * z;
  const denom = 1 + z2 / trials;
  const center = (p + z2 / (2 * trials)) / denom;
  const half = (z * Math.sqrt((p * (1 - p)) / trials + z2 / (4 * trials * trials))) / denom;
  return { low: Math.max(0, center - half), high: Math.min(1, center + half) };
}

/** Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k). */
export function passAtK(n: number, c: number, k: number): number {
  if (k > n) throw new Error(`passAtK: k (${k}) cannot exceed the number of samples (${n})`);
  if (n - c < k) return 1;
  let prod = 1;
  for (let i = n - c + 1; i <= n; i++) prod *= 1 - k / i;
  return 1 - prod;
}

/**
 * Two-proportion z-test style check used by the results table: is `after` better than `before` beyond
 * the 95% intervals (the intervals do not overlap)?
 */
export function improvedBeyondInterval(before: { successes: number; trials: number }, after: { successes: number; trials: number }): boolean {
  const b = wilsonInterval(before.successes, before.trials);
  const a = wilsonInterval(after.successes, after.trials);
  return a.low > b.high;
}

export function mean(values: readonly number[]): number {
  return values.length === 0 ? 0 : values.reduce((a, b) => a + b, 0) / values.length;
}
