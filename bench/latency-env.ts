/**
 * The env of the env-pool benchmark (bench/envs.bench.ts), registered as `bench/latency-v0` when this
 * module is imported (`sinkflex --import bench/latency-env.ts envs serve bench/latency-v0` loads it into
 * the benchmark's server processes): the env pool tests' SlowEnv (test/gym/remote/slow-env.ts), whose
 * every step waits `stepMs` and whose observations digest the seed and every action so far.
 */
import { registerSlowEnv, SlowEnv } from "../test/gym/remote/slow-env.js";

export { SlowEnv };
export const SLOW_ENV_ID = "bench/latency-v0";

registerSlowEnv(SLOW_ENV_ID, "a deterministic env with a set step latency (bench/envs.bench.ts)");
