/**
 * The config's `sampler` section (policy servers as GRPO's sampler): what it accepts, its defaults, and
 * the combinations it refuses with an error naming the field and what to do.
 */
import { describe, expect, it } from "vitest";
import { validateConfig } from "../../src/pipeline/config.js";

const base = (sampler: unknown, extra: Record<string, unknown> = {}) => ({
  suites: [{ env: "sinkflex/arith-v0" }],
  model: { checkpoint: "ckpt" },
  sampler,
  ...extra,
});
const urls = ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"];

describe("config sampler", () => {
  it("accepts replicas with a sync route and fills the limits' defaults", () => {
    const cfg = validateConfig(base({ kind: "openai", urls, model: "policy", sync: "reload" }));
    expect(cfg.sampler).toEqual({ kind: "openai", urls, model: "policy", sync: "reload", timeoutMs: 120_000, syncTimeoutMs: 600_000, maxConcurrency: 64 });
    expect(validateConfig(base(undefined)).sampler).toBeUndefined();
  });

  it("refuses bad fields and unsupported combinations, naming the field", () => {
    const bad = (sampler: unknown, extra?: Record<string, unknown>) => () => validateConfig(base(sampler, extra));
    expect(bad({ kind: "sglang", urls, model: "p", sync: "reload" })).toThrow(/sampler\.kind: must be one of "openai"/);
    expect(bad({ kind: "openai", urls: ["http://127.0.0.1:8000"], model: "p", sync: "reload" })).toThrow(/sampler\.urls\.0: a server's base URL ending in \/v1/);
    expect(bad({ kind: "openai", urls: [urls[0], urls[0]], model: "p", sync: "reload" })).toThrow(/sampler\.urls: lists a server twice/);
    expect(bad({ kind: "openai", urls: [], model: "p", sync: "reload" })).toThrow(/sampler\.urls: list at least one server/);
    expect(bad({ kind: "openai", urls, model: "p", sync: "nccl" })).toThrow(/sampler\.sync: must be one of "reload", "lora"/);
    expect(bad({ kind: "openai", urls, model: "p", sync: "reload", apiKey: "secret" })).toThrow(/sampler: unknown field\(s\) "apiKey"/);
    expect(bad({ kind: "openai", urls, model: "p", sync: "lora" })).toThrow(/sampler\.sync: sync "lora" sends the servers the adapter model\.lora trains: set model\.lora/);
    expect(bad({ kind: "openai", urls, model: "p", sync: "reload" }, { model: { checkpoint: "c", lora: { rank: 4, targets: ["q"] } } })).toThrow(/sampler\.sync: with model\.lora the trainer saves an adapter/);
    expect(bad({ kind: "openai", urls, model: "p", sync: "reload" }, { grpo: { tisCap: 0 } })).toThrow(/grpo\.tisCap: a remote sampler's log-probs differ/);
  });
});
