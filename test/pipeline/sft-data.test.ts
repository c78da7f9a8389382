import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { runExpertEpisode } from "../../src/envs/suite.js";
import { make } from "../../src/gym/registry.js";
import type { AgentTurn, AssistantMessage, ChatObservation } from "../../src/core/index.js";
import type { Env } from "../../src/gym/env.js";
import { createPolicy, TEMPLATE_VARS } from "../../src/pipeline/policy.js";
import { conversationToExample, readChatJsonl } from "../../src/pipeline/sft-data.js";
import { contextMask } from "../../src/rl/sft.js";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

registerBundledEnvs();

describe("SFT examples from expert episodes", () => {
  it("mask the assistant's tokens and mark where the system prompt ends", async () => {
    const env = (await make("sinkflex/arith-v0", { difficulty: 1 })) as Env<ChatObservation, AgentTurn>;
    const ep = await runExpertEpisode(env, "sinkflex/arith-v0", { taskIndex: 0 });
    await env.close();
    const conv = { messages: ep.messages, tools: ep.tools };
    const policy = createPolicy({ family: "qwen2", hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64, maxPositions: 2048 }, [conv], 0);
    const ex = conversationToExample(policy, conv);
    expect(ex.drifted).toBe(false);
    const text = (from: number, to?: number) => policy.codec.decode(ex.tokens.slice(from, to));
    expect(text(0, ex.contextStart)).toMatch(/^<\|im_start\|>system\n[\s\S]*<\/tools>[\s\S]*<\|im_end\|>\n$/);
    expect(text(ex.contextStart!)).toMatch(/^<\|im_start\|>user\n/);
    // The loss mask covers the assistant turns only: each trained run ends with the end-of-turn token.
    const trained = [...ex.lossMask].map((m, i) => (m ? i : -1)).filter((i) => i >= 0);
    expect(trained.length).toBeGreaterThan(0);
    expect(trained[0]!).toBeGreaterThan(ex.contextStart!);
    expect(text(trained.at(-1)!, trained.at(-1)! + 1)).toBe("<|im_end|>");
    // The trimmed vocabulary holds every id of the whole conversation encoded at once.
    const whole = policy.tokenizer.encode(policy.template.render(conv.messages, { tools: conv.tools, addGenerationPrompt: true, extra: TEMPLATE_VARS }));
    expect(whole.filter((id) => !policy.vocab!.has(id))).toEqual([]);
  });

  it("never train on an assistant turn of weight 0, not even in the context-loss phase", async () => {
    const env = (await make("sinkflex/alfworld-gen-v0", { source: "generated", difficulty: 1, count: 40 })) as Env<ChatObservation, AgentTurn>;
    // Seed 3 of task 3 makes mistakes at a chance of a third a turn (the test checks it has one).
    const ep = await runExpertEpisode(env, "sinkflex/alfworld-gen-v0", { taskIndex: 3, seed: 3, mistakes: 0.3 });
    await env.close();
    expect(ep.reward).toBe(1);
    const wrong = ep.messages.filter((m): m is AssistantMessage => m.role === "assistant" && m.weight === 0);
    expect(wrong.length).toBeGreaterThan(0);
    const conv = { messages: ep.messages, tools: ep.tools };
    const policy = createPolicy({ family: "qwen2", hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64, maxPositions: 2048 }, [conv], 0);
    const ex = conversationToExample(policy, conv);
    const plain = conversationToExample(policy, { ...conv, messages: conv.messages.map((m) => (m.role === "assistant" ? { ...m, weight: undefined } : m)) });
    // Same tokens; the mistakes' tokens are out of both masks, every other token as without weights.
    expect(ex.tokens).toEqual(plain.tokens);
    const spans = ex.untrained!;
    expect(spans.length).toBe(2 * wrong.length);
    const inSpan = (i: number) => spans.some((_, k) => k % 2 === 0 && i >= spans[k]! && i < spans[k + 1]!);
    const text = (from: number, to: number) => policy.codec.decode(ex.tokens.slice(from, to));
    for (let k = 0; k < spans.length; k += 2) expect(text(spans[k]!, spans[k + 1]!)).toContain(JSON.parse(wrong[k / 2]!.toolCalls![0]!.arguments).command);
    const context = contextMask(ex);
    ex.tokens.forEach((_, i) => {
      expect(ex.lossMask[i]).toBe(inSpan(i) ? 0 : plain.lossMask[i]);
      expect(context[i]).toBe(inSpan(i) ? 0 : i >= ex.contextStart! ? 1 : 0);
    });
  });

  it("read an assistant message's weight from chat JSONL, and refuse a weight other than 0 or 1", () => {
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-jsonl-"));
    const line = (weight: unknown) =>
      JSON.stringify({ messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "oops", weight }, { role: "user", content: "again" }, { role: "assistant", content: "hello" }] });
    writeFileSync(join(dir, "ok.jsonl"), `${line(0)}\n${line(1)}\n`);
    const [a, b] = readChatJsonl(join(dir, "ok.jsonl"));
    expect(a!.messages[1]).toMatchObject({ role: "assistant", content: "oops", weight: 0 });
    expect(b!.messages[1]).not.toHaveProperty("weight");
    writeFileSync(join(dir, "bad.jsonl"), `${line(0.5)}\n`);
    expect(() => readChatJsonl(join(dir, "bad.jsonl"))).toThrow(/bad\.jsonl:1: message 1: weight must be 0 \(not trained on\) or 1, got 0\.5/);
  });
});
