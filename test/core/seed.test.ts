/**
 * Seed mixing: `mixSeed(a, b)` computes what the trainer's two-number mix computed, and `mixSeedParts`
 * what the rollout's many-part mix computed (values recorded from both before they moved to the core).
 */
import { describe, expect, it } from "vitest";
import { mixSeed, mixSeedParts } from "../../src/core/index.js";

const GOLDEN = {"pairs":[[0,0,2484973921],[0,1,1970672874],[1,0,3120671264],[42,7,1516485984],[7,42,2949223410],[4294967299,5,1450432643],[-1,99,3906790941],[123456789,987654321,434759034]],"parts":[[[],2654435769],[[0],493009611],[[1,2],4017857470],[[42,3,1,0],3661063506],[[4294967299,-1,7,9],3879973175]]} as { pairs: [number, number, number][]; parts: [number[], number][] };

describe("core seed mixing", () => {
  it("mixSeed(a, b) keeps the trainer's arithmetic", () => {
    for (const [a, b, want] of GOLDEN.pairs) expect(mixSeed(a, b), `mixSeed(${a}, ${b})`).toBe(want);
  });

  it("mixSeedParts keeps the rollout's arithmetic", () => {
    for (const [parts, want] of GOLDEN.parts) expect(mixSeedParts(...parts), `mixSeedParts(${parts.join(", ")})`).toBe(want);
  });

  it("the two are different functions (so neither may stand in for the other)", () => {
    expect(mixSeed(42, 7)).not.toBe(mixSeedParts(42, 7));
  });
});
