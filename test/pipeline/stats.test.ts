import { describe, expect, it } from "vitest";
import { improvedBeyondInterval, passAtK, wilsonInterval } from "../../src/pipeline/stats.js";

describe("stats", () => {
  it("Wilson interval matches known values", () => {
    const { low, high } = wilsonInterval(8, 10);
    expect(low).toBeCloseTo(0.4902, 3);
    expect(high).toBeCloseTo(0.9433, 3);
    expect(wilsonInterval(0, 20).low).toBe(0);
    expect(wilsonInterval(0, 0)).toEqual({ low: 0, high: 1 });
  });
  it("pass@k is unbiased and bounded", () => {
    expect(passAtK(10, 0, 1)).toBe(0);
    expect(passAtK(10, 10, 5)).toBe(1);
    expect(passAtK(10, 3, 1)).toBeCloseTo(0.3, 10);
    // 1 - C(8,2)/C(10,2) = 1 - 28/45
    expect(passAtK(10, 2, 2)).toBeCloseTo(1 - 28 / 45, 10);
    expect(() => passAtK(2, 1, 3)).toThrow(/cannot exceed/);
  });
  it("improvement beyond the interval needs non-overlapping intervals", () => {
    expect(improvedBeyondInterval({ successes: 10, trials: 100 }, { successes: 40, trials: 100 })).toBe(true);
    expect(improvedBeyondInterval({ successes: 10, trials: 20 }, { successes: 12, trials: 20 })).toBe(false);
  });
});
