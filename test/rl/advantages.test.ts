import { describe, expect, it } from "vitest";
import { computeAdvantages, groupAdvantage } from "../../src/rl/advantages.js";

describe("group advantages", () => {
  it("GRPO normalizes by the group std", () => {
    const a = groupAdvantage([1, 0, 0, 1], "grpo");
    expect(a[0]).toBeCloseTo(1, 4);
    expect(a[1]).toBeCloseTo(-1, 4);
    expect(a.reduce((x, y) => x + y, 0)).toBeCloseTo(0, 6);
  });
  it("Dr. GRPO only centers", () => {
    expect(groupAdvantage([1, 0, 0, 0], "dr-grpo")).toEqual([0.75, -0.25, -0.25, -0.25]);
  });
  it("RLOO uses the leave-one-out baseline", () => {
    const r = [1, 0, 0.5];
    const a = groupAdvantage(r, "rloo");
    r.forEach((ri, i) => {
      const others = r.filter((_, j) => j !== i);
      expect(a[i]).toBeCloseTo(ri - others.reduce((x, y) => x + y, 0) / others.length, 10);
    });
    expect(() => groupAdvantage([1], "rloo")).toThrow(/at least 2/);
  });
  it("counts and optionally filters groups with equal rewards", () => {
    const res = computeAdvantages([[1, 1, 1], [0, 1, 0], [0, 0, 0]], "grpo", { filterDegenerate: true });
    expect(res.degenerateGroups).toBe(2);
    expect(res.kept).toEqual([1]);
    expect(res.advantages[0]).toEqual([0, 0, 0]);
    expect(computeAdvantages([[1, 1]], "grpo").kept).toEqual([0]);
  });
  it("rejects non-finite rewards", () => {
    expect(() => groupAdvantage([1, Number.NaN], "grpo")).toThrow(/finite/);
  });
});
