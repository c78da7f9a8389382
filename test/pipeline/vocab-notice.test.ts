/**
 * The trimmed-vocabulary notice: a policy whose vocabulary was built on other text (a one-line corpus)
 * evaluated (with vocabNotice, as a checkpoint is) on an env it never saw says, once per suite, how many of the suite's tokens were spelled from
 * smaller pieces; the counting codec encodes exactly as the policy's own codec.
 */
import { describe, expect, it } from "vitest";
import { evaluate, type EvalOptions } from "../../src/pipeline/evaluate.js";
import { createPolicy } from "../../src/pipeline/policy.js";
import { planSuites } from "../../src/pipeline/tasks.js";
import { countingCodec } from "../../src/pipeline/vocab-notice.js";
import { parityConfig, registerParityEnv } from "./parity-env.js";

registerParityEnv();

/** What `fn` writes to stderr (the real stream is written too). */
async function stderrOf(fn: () => Promise<unknown>): Promise<string> {
  const original = process.stderr.write.bind(process.stderr);
  let seen = "";
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    seen += String(chunk);
    return (original as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stderr.write;
  try {
    await fn();
  } finally {
    process.stderr.write = original;
  }
  return seen;
}

describe("the trimmed-vocabulary notice", () => {
  const corpus = [{ messages: [{ role: "user" as const, content: "Say something about item 1." }], tools: [] }];

  it("evaluating on an env outside the vocabulary says how many tokens were spelled, once per suite", async () => {
    const cfg = parityConfig("unused", "eval", 5);
    const plans = (await planSuites(cfg)).map((p) => ({ ...p, evalTasks: p.evalTasks.slice(0, 3) }));
    const policy = createPolicy(cfg.model.init!, corpus, 5);
    const opts: EvalOptions = { samples: 1, temperature: 1, seed: 11, maxTurns: 1, maxTokensPerTurn: 4, maxContextTokens: 1000, concurrency: 4, quiet: true, vocabNotice: true };
    const first = await stderrOf(() => evaluate(policy, plans, opts));
    const match = /notice: parity: (\d+) of (\d+) tokens of its text are not in the checkpoint's trimmed vocabulary/.exec(first);
    expect(match, first).not.toBeNull();
    expect(Number(match![1])).toBeGreaterThan(0);
    expect(Number(match![1])).toBeLessThanOrEqual(Number(match![2]));
    expect(first.match(/notice: parity:/g)).toHaveLength(1);
    // The same suite evaluated again in this process (after RL, say) is not noticed twice.
    const second = await stderrOf(() => evaluate(policy, plans, opts));
    expect(second).not.toMatch(/notice: parity:/);
    // Without vocabNotice (a run's own fresh model), nothing is counted.
    const quiet = await stderrOf(() => evaluate(policy, plans, { ...opts, vocabNotice: false }));
    expect(quiet).not.toMatch(/notice:/);
  }, 120_000);

  it("the counting codec encodes as the policy's codec, and counts what the vocabulary lacks", () => {
    const policy = createPolicy(parityConfig("unused", "eval", 5).model.init!, corpus, 5);
    const counting = countingCodec(policy.codec);
    const text = "Say something about item 1. Zanzibar quokkas photosynthesize";
    expect(counting.encode(text)).toEqual(policy.codec.encode(text));
    const full = policy.tokenizer.encode(text);
    const lacking = full.filter((id) => !policy.vocab!.has(id)).length;
    expect(lacking).toBeGreaterThan(0);
    expect("counts" in counting && counting.counts).toEqual({ tokens: full.length, spelled: lacking });
  });
});
