/**
 * The core's seeded generator: each named generator's draws are pinned to the sequences the two generator
 * classes it replaces produced (mulberry32 for envs and the trainer, xoshiro128** for the model and the
 * sampler), so merging them changed no run. Not a statistical test of either generator.
 */
import { describe, expect, it } from "vitest";
import { Rng, RNG_GENERATORS } from "../../src/core/index.js";

// Recorded from the former src/gym/rng.ts (mulberry32, "g<seed>") and src/model/random.ts
// (xoshiro128**, "m<seed>") before they were merged.
const GOLDEN: Record<string, unknown[]> = {"g0":[0.3588899802416563,105,5,"d",[3,4,5,6,2,1],0.5948514193296432,0.5097183925099671],"m0":[3809008728,0.26395898321624833,-0.8865997482067152,-0.07251241351697905,1.405868994808823,0.04215027711900521],"g1":[0.6270739405881613,2,3,"d",[5,1,4,3,2,6],0.6608125101774931,0.45527112716808915],"m1":[2442144158,0.7539288542374516,1.1878949912629484,-0.12458638565871621,0.7066964325174054,0.7741033107845934],"g42":[0.6011037519201636,448,8,"c",[1,5,4,6,3,2],0.7518377299420536,0.24992373422719538],"m42":[2837322924,0.12688010269181393,0.6310041402959609,0.10543623120203655,-0.746136702144005,0.4746070427364051],"g4294967303":[0.011704753153026104,61,9,"c",[5,6,1,2,3,4],0.9072396357078105,0.2578155610244721],"m4294967303":[225556871,0.38618168494943295,0.3266480996845384,-0.15677390117516043,1.0376397532471155,0.9843264286492374],"g-5":[0.48384718922898173,52,9,"d",[1,4,2,3,5,6],0.8469200057443231,0.6043828951660544],"m-5":[3579099076,0.009079381397326336,-0.2653311192870839,1.7099894437058885,1.465811071320317,0.15974883174340804],"g123456789":[0.2577907438389957,970,7,"a",[6,3,1,5,4,2],0.5051775933243334,0.36590091581456363],"m123456789":[4284103975,0.23328572235303036,0.9086800037222867,-0.3660482307220478,-0.27295986819295043,0.07100652316733957]};
const SEEDS = [0, 1, 42, 2 ** 32 + 7, -5, 123456789];

describe("core Rng", () => {
  it("mulberry32 (the default) draws what the gym's generator drew", () => {
    for (const seed of SEEDS) {
      const g = new Rng(seed);
      expect(g.generator).toBe("mulberry32");
      const got = [g.next(), g.int(1000), g.range(-3, 9), g.pick(["a", "b", "c", "d"]), g.shuffle([1, 2, 3, 4, 5, 6]), g.fork(3).next(), g.next()];
      expect(got, `seed ${seed}`).toEqual(GOLDEN[`g${seed}`]);
    }
  });

  it("xoshiro128** draws what the model's generator drew", () => {
    for (const seed of SEEDS) {
      const m = new Rng(seed, "xoshiro128**");
      const got = [m.nextU32(), m.uniform(), m.normal(), m.normal(), m.normal(), m.uniform()];
      expect(got, `seed ${seed}`).toEqual(GOLDEN[`m${seed}`]);
    }
  });

  it("the two generators differ, and a fork keeps its parent's generator", () => {
    expect(new Rng(7).nextU32()).not.toBe(new Rng(7, "xoshiro128**").nextU32());
    expect(new Rng(7, "xoshiro128**").fork(1).generator).toBe("xoshiro128**");
    expect(RNG_GENERATORS).toEqual(["mulberry32", "xoshiro128**"]);
  });

  it("refuses an unknown generator by name", () => {
    expect(() => new Rng(1, "pcg32" as never)).toThrow(/unknown generator "pcg32"; use one of mulberry32, xoshiro128\*\*/);
  });
});
