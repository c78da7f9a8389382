/**
 * Evaluation on the embedded engine: the held-out tasks' episodes decode together, up to the
 * concurrency, and the result does not depend on how many ran at once (each episode samples from its
 * own seed).
 */
import { describe, expect, it } from "vitest";
import type { EmbeddedEngine } from "../../src/engine/embedded.js";
import { evaluate, type EvalOptions } from "../../src/pipeline/evaluate.js";
import { createPolicy } from "../../src/pipeline/policy.js";
import { planSuites } from "../../src/pipeline/tasks.js";
import { parityConfig, registerParityEnv } from "./parity-env.js";

registerParityEnv();

/** The policy's engine, recording the largest number of sessions one decoding step sampled from. */
function recordingBatches(engine: EmbeddedEngine): { engine: EmbeddedEngine; largest: () => number } {
  let largest = 0;
  const proxy = new Proxy(engine, {
    get(target, key, receiver) {
      if (key === "sampleBatch") {
        return (sessions: unknown[], params: unknown[]) => {
          largest = Math.max(largest, sessions.length);
          return (target.sampleBatch as (s: unknown[], p: unknown[]) => unknown).call(target, sessions, params);
        };
      }
      const value = Reflect.get(target, key, receiver);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { engine: proxy, largest: () => largest };
}

describe("evaluate", () => {
  it("plays the held-out tasks concurrently, with the same results as one at a time", async () => {
    const cfg = parityConfig("unused", "eval", 5);
    const plans = (await planSuites({ ...cfg, eval: { ...cfg.eval, tasksPerSuite: 10 } })).map((p) => ({ ...p, evalTasks: p.evalTasks.slice(0, 10) }));
    expect(plans[0]!.evalTasks).toHaveLength(10);
    const policy = createPolicy(cfg.model.init!, [{ messages: [{ role: "user", content: "Say something about item 1." }], tools: [] }], 5);
    const opts: EvalOptions = { samples: 2, temperature: 1, seed: 11, maxTurns: 2, maxTokensPerTurn: 12, maxContextTokens: 1000, concurrency: 8, quiet: true };
    const together = recordingBatches(policy.engine);
    const many = await evaluate(policy, plans, opts, together.engine);
    // Four tasks of two samples fit in flight at once; one at a time, a step would sample two.
    expect(together.largest()).toBeGreaterThan(2);
    const alone = recordingBatches(policy.engine);
    const one = await evaluate(policy, plans, { ...opts, concurrency: 2 }, alone.engine);
    expect(alone.largest()).toBeLessThanOrEqual(2);
    const { wallMs: _a, ...manyRow } = many.parity!;
    const { wallMs: _b, ...oneRow } = one.parity!;
    expect(manyRow).toEqual(oneRow);
    expect(manyRow.trials).toBe(10);
  });
});
