/**
 * The agent loop on the embedded engine (a tiny random Qwen2-shaped model over a trimmed Qwen3
 * vocabulary) against a real ToolEnv: masks, behaviour log-probs, incremental = recompute, shared
 * prefills, limits, malformed tool calls, env reuse, the scheduler's batching and staleness bound.
 */
import { describe, expect, it } from "vitest";
import { Rollout, type GroupTask, type RolloutOptions } from "../../src/rollout/agent-loop.js";
import type { ToolEnv } from "../../src/tools/tool-env.js";
import { BatchDecoder } from "../../src/rollout/batch-decoder.js";
import { RolloutScheduler } from "../../src/rollout/scheduler.js";
import { qwenToolParser } from "../../src/rollout/tool-parser.js";
import { checkTrajectory, trajectoryToJSON, type Trajectory } from "../../src/rollout/trajectory.js";
import { groupTask, makeEnv, stockCodec, template, tinyEngine } from "./helpers.js";

const codec = stockCodec();
const base: RolloutOptions = { maxTokensPerTurn: 6, turnLimit: "close", maxTurns: 20, seed: 7 };

function sampledCount(t: Trajectory): number {
  return t.turns.reduce((a, turn) => a + turn.sampleEnd - turn.sampleStart, 0);
}

describe("Rollout on the embedded engine", () => {
  it("masks exactly the sampled tokens and records the sampler's log-probs (= teacher-forced within 1e-4)", async () => {
    const engine = tinyEngine(codec);
    const rollout = new Rollout(engine, codec, template, base);
    const trajs = await rollout.runGroup(groupTask(0, 3, 4));
    for (const t of trajs) {
      expect(t.endReason).toBe("terminated");
      expect(t.turns).toHaveLength(4);
      checkTrajectory(t);
      const ones = t.segments.reduce((a, s) => a + s.lossMask.reduce((x, y) => x + y, 0), 0);
      expect(ones).toBe(sampledCount(t));
      expect(ones).toBe(t.sampledTokens);
      for (const [s, seg] of t.segments.entries()) {
        const [teacher] = await engine.logprobs([seg.tokens]);
        let checked = 0;
        for (let i = 1; i < seg.tokens.length; i++) {
          if (seg.lossMask[i]) {
            expect(Math.abs(seg.behaviourLogprobs[i]! - teacher![i - 1]!)).toBeLessThan(1e-4);
            checked++;
          }
        }
        expect(checked).toBe(t.turns.filter((turn) => turn.segment === s).reduce((a, turn) => a + turn.sampleEnd - turn.sampleStart, 0));
      }
      // Observations and framing are in the tokens, unmasked: the decoded text holds the user's replies.
      expect(codec.decode(t.segments[0]!.tokens)).toContain("<|im_start|>user\nPlease check again (3).<|im_end|>\n<|im_start|>assistant\n");
      expect(JSON.parse(JSON.stringify(trajectoryToJSON(t))).segments[0].lossMask).toHaveLength(t.segments[0]!.tokens.length);
    }
    await rollout.close();
  });

  it("gives identical tokens in incremental and recompute mode for the same seed, with far less prefill", async () => {
    const run = async (mode: "incremental" | "recompute") => {
      const engine = tinyEngine(codec);
      const rollout = new Rollout(engine, codec, template, { ...base, mode });
      const trajs = await rollout.runGroup(groupTask(1, 2, 8));
      return { trajs, prefill: rollout.stats.prefillTokens };
    };
    const inc = await run("incremental");
    const rec = await run("recompute");
    expect(inc.trajs.map((t) => t.segments.map((s) => s.tokens))).toEqual(rec.trajs.map((t) => t.segments.map((s) => s.tokens)));
    expect(inc.prefill * 3).toBeLessThan(rec.prefill);
  });

  it("prefills a group's prompt once and the suite's system prompt once across groups", async () => {
    const engine = tinyEngine(codec);
    const rollout = new Rollout(engine, codec, template, { ...base, maxTurns: 1 });
    const g1 = await rollout.runGroup(groupTask(0, 8, 1));
    const g2 = await rollout.runGroup(groupTask(1, 8, 1));
    expect(rollout.stats.systemPrefills).toBe(1);
    expect(rollout.stats.systemReuses).toBe(1);
    expect(rollout.stats.groupPrefills).toBe(2);
    const promptLen = g1[0]!.turns[0]!.sampleStart;
    // The whole prompt of 16 trajectories was computed once per group (system part once in all).
    expect(rollout.stats.prefillTokens).toBeLessThan(2 * promptLen);
    // The 8 rollouts of a group differ (different sampling seeds) but share the prompt ids.
    expect(new Set(g1.map((t) => t.turns[0]!.text)).size).toBeGreaterThan(1);
    expect(g2.every((t) => t.segments[0]!.tokens.length > 0)).toBe(true);
    // New weights: the cached system prompt belongs to the old policy and is prefilled again.
    engine.policyVersion++;
    const g3 = await rollout.runGroup(groupTask(2, 2, 1));
    expect(rollout.stats.systemPrefills).toBe(2);
    expect(g3.every((t) => t.policyVersion === 1)).toBe(true);
    await rollout.close();
  });

  it("splits a trajectory at template drift into segments that each match the engine's log-probs", async () => {
    const engine = tinyEngine(codec);
    const rollout = new Rollout(engine, codec, template, { ...base, onDrift: "split" });
    const trajs = await rollout.runGroup(groupTask(3, 2, 6));
    const drifts = trajs.reduce((a, t) => a + t.drift.length, 0);
    // Random text often starts or ends with whitespace the parser trims, so the re-render differs.
    expect(drifts).toBeGreaterThan(0);
    for (const t of trajs) {
      checkTrajectory(t);
      expect(t.segments).toHaveLength(t.drift.length + 1);
      for (const seg of t.segments) {
        const [teacher] = await engine.logprobs([seg.tokens]);
        for (let i = 1; i < seg.tokens.length; i++) if (seg.lossMask[i]) expect(Math.abs(seg.behaviourLogprobs[i]! - teacher![i - 1]!)).toBeLessThan(1e-4);
      }
      // Each later segment starts from the template's own rendering of the conversation so far.
      for (const seg of t.segments.slice(1)) expect(codec.decode(seg.tokens)).toMatch(/^<\|im_start\|>system\n/);
    }
    await rollout.close();
  });

  it("records truncation by turns, by tokens per turn and by context", async () => {
    const engine = tinyEngine(codec);
    const turns = await new Rollout(engine, codec, template, { ...base, maxTurns: 2 }).runGroup(groupTask(0, 1, 10));
    expect(turns[0]!.endReason).toBe("truncated_turns");
    expect(turns[0]!.turns).toHaveLength(2);
    const perTurn = await new Rollout(engine, codec, template, { ...base, turnLimit: "end" }).runGroup(groupTask(0, 1, 10));
    expect(perTurn[0]!.endReason).toBe("truncated_turn_tokens");
    expect(perTurn[0]!.turns[0]!.finishReason).toBe("length");
    const context = await new Rollout(engine, codec, template, { ...base, maxContextTokens: 200 }).runGroup(groupTask(0, 1, 50));
    expect(context[0]!.endReason).toBe("truncated_context");
    expect(context[0]!.segments[0]!.tokens.length).toBeLessThanOrEqual(200);
    for (const t of [turns[0]!, perTurn[0]!, context[0]!]) checkTrajectory(t);
  });

  it("rejects bad options with a message", () => {
    const engine = tinyEngine(codec);
    expect(() => new Rollout(engine, codec, template, { maxTurns: 0 })).toThrow(/maxTurns must be a positive integer/);
    expect(() => new Rollout(engine, codec, template, { mode: "fast" as never })).toThrow(/incremental" or "recompute/);
  });

  it("sends a malformed tool call to the env, which answers with an error observation", async () => {
    const env = makeEnv({ question: "q", userTurns: 2 });
    await env.reset({ seed: 1 });
    const parsed = qwenToolParser.parse('<tool_call>\n{"name": "lookup", "arguments": {"item": "chair"\n</tool_call>', "c_");
    expect(parsed.malformed).toBe(1);
    const [obs, , terminated, , info] = await env.step({ content: parsed.content, toolCalls: parsed.toolCalls });
    expect(terminated).toBe(false);
    expect(obs.messages[0]).toMatchObject({ role: "tool", isError: true });
    expect(obs.messages[0]!.content).toMatch(/not valid JSON/);
    expect((info.toolErrors as { kind: string }[])[0]!.kind).toBe("malformed_json");
    await env.close();
  });

  it("resets the envs of keyed tasks for later groups (the same trajectories as new envs), keeps none that failed, and closes them at close()", async () => {
    const made: ToolEnv<unknown, unknown>[] = [];
    const closed = new Set<unknown>();
    let failNext = false;
    const counted = (i: number, envKey?: string): GroupTask => {
      const t = groupTask(i, 2, 3);
      return {
        ...t,
        envKey,
        makeEnv: async () => {
          const env = (await t.makeEnv()) as ToolEnv<unknown, unknown>;
          const step = env.step.bind(env);
          env.step = async (a) => {
            if (failNext) throw new Error("the env broke");
            return step(a);
          };
          const close = env.close.bind(env);
          env.close = async () => {
            closed.add(env);
            await close();
          };
          made.push(env);
          return env;
        },
      };
    };
    // The helper's env holds one question: the key names it. Groups of questions 0, 1, 0, 1.
    const play = async (keyed: boolean) => {
      const rollout = new Rollout(tinyEngine(codec), codec, template, base);
      const out: Trajectory[][] = [];
      for (const i of [0, 1, 0, 1]) out.push(await rollout.runGroup(counted(i, keyed ? `stock ${i}` : undefined)));
      return { rollout, out };
    };
    const fresh = await play(false);
    expect(made).toHaveLength(8);
    expect(closed.size).toBe(8);
    await fresh.rollout.close();
    made.length = 0;
    closed.clear();

    const pooled = await play(true);
    expect(made).toHaveLength(4);
    expect(closed.size).toBe(0);
    expect(pooled.out.map((g) => g.map((t) => t.segments.map((s) => s.tokens)))).toEqual(fresh.out.map((g) => g.map((t) => t.segments.map((s) => s.tokens))));
    expect(pooled.out.flat().map((t) => t.reward)).toEqual(fresh.out.flat().map((t) => t.reward));

    // Episodes that end in an env error: their envs are closed, not kept; the next group makes new ones.
    failNext = true;
    const failed = await pooled.rollout.runGroup(counted(0, "stock 0"));
    expect(failed.map((t) => t.endReason)).toEqual(["error", "error"]);
    expect(closed.size).toBe(2);
    failNext = false;
    await pooled.rollout.runGroup(counted(0, "stock 0"));
    expect(made).toHaveLength(6);
    await pooled.rollout.close();
    expect(closed.size).toBe(6);
  });
});

describe("RolloutScheduler", () => {
  it("decodes the trajectories in flight together", async () => {
    const engine = tinyEngine(codec);
    const rollout = new Rollout(engine, codec, template, base);
    const groups = await new RolloutScheduler(rollout, { maxInFlight: 16 }).runAll([0, 1, 2, 3].map((i) => groupTask(i, 4, 3, 5)));
    expect(groups).toHaveLength(4);
    expect(groups.every((g) => g.length === 4 && g.every((t) => t.endReason === "terminated"))).toBe(true);
    expect(rollout.decoder.stats.maxBatch).toBeGreaterThan(4);
    await rollout.close();
  });

  it("a turn that is ready starts decoding while an earlier, longer one goes on; weights change only when no call is in progress", async () => {
    const engine = tinyEngine(codec);
    const decoder = new BatchDecoder(engine);
    const [long, short] = await Promise.all([engine.session(codec.encode("a long turn")), engine.session(codec.encode("a short one"))]);
    const order: string[] = [];
    const tick = () => new Promise((r) => setImmediate(r));
    const first = decoder.sample(long, { maxTokens: 200, seed: 1, stopTokens: [] }).then(() => order.push("long"));
    await tick();
    await tick();
    const second = decoder.sample(short, { maxTokens: 1, seed: 2, stopTokens: [] }).then(() => order.push("short"));
    await tick();
    await tick();
    // Both calls are in progress: the update waits for both, and neither waited for the other.
    expect(decoder.stats.steps).toBe(2);
    const swapped = decoder.swapWeights(() => order.push("update"));
    await Promise.all([first, second, swapped]);
    expect(order).toEqual(["short", "long", "update"]);
  });

  const versionsOf = async (maxStaleness: number) => {
    const engine = tinyEngine(codec);
    const rollout = new Rollout(engine, codec, template, base);
    const scheduler = new RolloutScheduler(rollout, { maxInFlight: 8, batchGroups: 1, maxStaleness });
    const tasks = [0, 1, 2, 3].map((i) => groupTask(i, 2, 2, 2));
    const seen: { batch: number; versions: number[] }[] = [];
    for await (const batch of scheduler.batches(tasks)) {
      seen.push({ batch: batch.index, versions: batch.groups.flat().flatMap((t) => t.turns.map((turn) => turn.policyVersion)) });
      // "Train": a weight update between decoding steps; open sessions are kept.
      await rollout.decoder.swapWeights(() => {
        engine.policyVersion++;
      });
    }
    await rollout.close();
    return seen;
  };

  it("is exactly synchronous at staleness 0: batch k is sampled entirely by policy version k", async () => {
    const seen = await versionsOf(0);
    expect(seen.map((s) => s.batch)).toEqual([0, 1, 2, 3]);
    for (const s of seen) expect(new Set(s.versions)).toEqual(new Set([s.batch]));
  });

  it("runs ahead by at most maxStaleness versions", async () => {
    const seen = await versionsOf(1);
    let ahead = false;
    for (const s of seen) {
      for (const v of s.versions) {
        expect(s.batch - v).toBeLessThanOrEqual(1);
        expect(v).toBeLessThanOrEqual(s.batch);
        if (v < s.batch) ahead = true;
      }
    }
    expect(ahead).toBe(true);
  });
});
