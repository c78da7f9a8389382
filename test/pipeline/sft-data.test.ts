import { describe, expect, it } from "vitest";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { runExpertEpisode } from "../../src/envs/suite.js";
import { make } from "../../src/gym/registry.js";
import type { AgentTurn, ChatObservation } from "../../src/gym/chat.js";
import type { Env } from "../../src/gym/env.js";
import { createPolicy, TEMPLATE_VARS } from "../../src/pipeline/policy.js";
import { conversationToExample } from "../../src/pipeline/sft-data.js";

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
});
