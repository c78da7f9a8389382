// A real 30-turn episode of a bundled long-episode suite (sinkflex/tau-retail-v0, whose scripted user
// answers every turn) played through the rollout path (agent loop, renderer, batch decoder, engine
// sessions) under the sink-window mask: the episode's session holds a constant number of KV rows once the
// window is full (within one block), and the behaviour log-probs the rollout recorded equal the training
// kernel's teacher-forced log-probs of the same tokens under the same mask (1e-5, fp32).
import { describe, expect, it } from "vitest";
import { createRandomModel, type EmbeddedSession } from "../../src/engine/embedded.js";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { getKernels } from "../../src/kernels/index.js";
import { ChatTemplate } from "../../src/model/chat-template.js";
import { loadQwen3Tokenizer } from "../../src/model/tokenizer.js";
import { tokenCodec, TrimmedVocab } from "../../src/model/vocab.js";
import { makeChatEnv } from "../../src/pipeline/tasks.js";
import { Rollout, type PolicySampler } from "../../src/rollout/index.js";
import { tinyConfig } from "./helpers.js";

const ENV = "sinkflex/tau-retail-v0";
const MASK = { sinks: 4, window: 128 };

describe("a 30-turn rollout under the sink-window mask", () => {
  it("holds constant KV rows per turn and records the teacher-forced log-probs (1e-5)", async () => {
    registerBundledEnvs();
    const tokenizer = loadQwen3Tokenizer();
    const template = ChatTemplate.fromTokenizer(tokenizer);
    const env = await makeChatEnv(ENV, {});
    const [obs] = await env.reset({ seed: 0, options: { taskIndex: 0 } });
    await env.close();
    const codec = tokenCodec(tokenizer, TrimmedVocab.build(tokenizer, [tokenizer.encode(template.render(obs.messages, { tools: obs.tools }))]));
    const engine = createRandomModel(
      tinyConfig({ hiddenSize: 64, headDim: 16, intermediateSize: 96, vocabSize: codec.size, maxPositionEmbeddings: 16384 }),
      3, { kernels: getKernels(), attention: MASK },
    );
    const rows: { context: number; held: number }[] = [];
    const sampler: PolicySampler = {
      get policyVersion() {
        return engine.policyVersion;
      },
      session: (prefix) => engine.session(prefix),
      sampleBatch: async (sessions, params) => {
        const out = await engine.sampleBatch(sessions, params);
        for (const s of sessions as EmbeddedSession[]) rows.push({ context: s.length, held: s.heldBlocks * engine.pool.blockSize });
        return out;
      },
    };
    const rollout = new Rollout(sampler, codec, template, { maxTurns: 30, maxTokensPerTurn: 8, turnLimit: "close", maxContextTokens: 16384, seed: 1 });
    const [traj] = await rollout.runGroup({ envId: ENV, makeEnv: () => makeChatEnv(ENV, {}), reset: { seed: 0, options: { taskIndex: 0 } }, groupSize: 1 });
    await rollout.close();
    expect(traj!.endReason, traj!.error).toBe("truncated_turns");
    expect(traj!.turns).toHaveLength(30);
    expect(rows).toHaveLength(30);
    // the prompt alone (about 4,300 tokens) fills the window: every turn holds the sink block and the
    // window's blocks, one block more or less by where the window's edge falls
    const bs = engine.pool.blockSize;
    const bound = Math.ceil(MASK.sinks / bs) * bs + Math.ceil(MASK.window / bs) * bs + bs;
    expect(rows[0]!.context).toBeGreaterThan(4000);
    for (const r of rows) expect(r.held).toBeLessThanOrEqual(bound);
    expect(Math.max(...rows.map((r) => r.held)) - Math.min(...rows.map((r) => r.held))).toBeLessThanOrEqual(bs);
    let worst = 0;
    let scored = 0;
    for (const seg of traj!.segments) {
      const [lp] = await engine.logprobs([seg.tokens]);
      for (let i = 1; i < seg.tokens.length; i++) {
        if (!seg.lossMask[i]) continue;
        worst = Math.max(worst, Math.abs(seg.behaviourLogprobs[i]! - lp![i - 1]!));
        scored++;
      }
    }
    expect(scored).toBeGreaterThanOrEqual(30);
    expect(worst).toBeLessThan(1e-5);
    engine.dispose();
  }, 300_000);
});
