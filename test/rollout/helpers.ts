/**
 * Shared parts of the rollout tests: the real Qwen3 tokenizer and template, a trimmed vocabulary, a
 * tiny random Qwen2-shaped model on the embedded engine, and a real ToolEnv whose user keeps the
 * conversation going for a set number of turns (so that a random model plays long episodes).
 */
import { z } from "zod";
import type { ChatMessage } from "../../src/core/index.js";
import { createRandomModel, type EmbeddedEngine } from "../../src/engine/embedded.js";
import { ChatTemplate } from "../../src/model/chat-template.js";
import { parseHfConfig } from "../../src/model/config.js";
import { loadQwen3Tokenizer } from "../../src/model/tokenizer.js";
import { tokenCodec, TrimmedVocab, type TokenCodec } from "../../src/model/vocab.js";
import type { GroupTask } from "../../src/rollout/agent-loop.js";
import { functionTool } from "../../src/tools/tool.js";
import { arrayTasks, ToolEnv } from "../../src/tools/tool-env.js";

export const tokenizer = loadQwen3Tokenizer();
export const template = ChatTemplate.fromTokenizer(tokenizer);

export const SYSTEM = "You are a warehouse agent. Use the tools to look up stock, then answer the user.";
export const QUESTIONS = ["How many red chairs are left?", "Is the blue lamp in stock?", "Count the green tables.", "Which shelf holds the oak desk?"];

interface Task {
  question: string;
  userTurns: number;
}

/** A ToolEnv with one tool (optionally slow) and a user who replies `userTurns` times. */
export function makeEnv(task: Task, toolLatencyMs = 0): ToolEnv<Task, { replies: number }> {
  return new ToolEnv<Task, { replies: number }>({
    name: "StockEnv",
    tasks: arrayTasks([task]),
    tools: [
      functionTool({
        name: "lookup",
        description: "Stock count of an item.",
        parameters: z.object({ item: z.string() }),
        execute: async ({ item }) => {
          if (toolLatencyMs > 0) await new Promise((r) => setTimeout(r, toolLatencyMs));
          return { item, count: item.length };
        },
      }),
    ],
    open: async (t) => ({ state: { replies: 0 }, messages: [{ role: "system", content: SYSTEM }, { role: "user", content: t.question }] }),
    respond: async (episode) => {
      episode.state.replies++;
      const done = episode.state.replies >= episode.task.userTurns;
      if (toolLatencyMs > 0) await new Promise((r) => setTimeout(r, toolLatencyMs));
      return { messages: [{ role: "user", content: done ? "Thanks, bye." : `Please check again (${episode.state.replies}).` }], done };
    },
    score: async (episode) => ({ reward: episode.messages.length % 3 === 0 ? 1 : 0, evidence: {} }),
  });
}

export function groupTask(i: number, groupSize: number, userTurns: number, toolLatencyMs = 0): GroupTask {
  const task = { question: QUESTIONS[i % QUESTIONS.length]!, userTurns };
  return { envId: "test/stock-v0", makeEnv: () => makeEnv(task, toolLatencyMs), reset: { seed: 100 + i, options: { taskIndex: 0 } }, groupSize };
}

/** A trimmed vocabulary from the env's own conversations. */
export function stockCodec(): TokenCodec {
  const corpus = QUESTIONS.map((q) => {
    const msgs: ChatMessage[] = [
      { role: "system", content: SYSTEM },
      { role: "user", content: q },
      { role: "assistant", content: "", toolCalls: [{ id: "1", name: "lookup", arguments: '{"item": "red chair"}' }] },
      { role: "tool", toolCallId: "1", name: "lookup", content: '{"item":"red chair","count":9}' },
      { role: "user", content: "Please check again (1). Thanks, bye." },
    ];
    return tokenizer.encode(template.render(msgs, { tools: makeEnv({ question: q, userTurns: 1 }).hooks.tools.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters })) }));
  });
  return tokenCodec(tokenizer, TrimmedVocab.build(tokenizer, corpus));
}

/** A tiny random Qwen2-shaped model over the codec's vocabulary, with `positions` positions. */
export function tinyEngine(codec: TokenCodec, seed = 1, positions = 8192): EmbeddedEngine {
  const cfg = parseHfConfig({
    architectures: ["Qwen2ForCausalLM"],
    model_type: "qwen2",
    hidden_size: 64,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    intermediate_size: 128,
    vocab_size: codec.size,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    max_position_embeddings: positions,
    tie_word_embeddings: true,
  });
  return createRandomModel(cfg, seed, { std: 0.5 });
}

/** Trains `engine` on the token sequences (mean log-prob of each, lr 1e-2) for `steps` steps, until it recites them. */
export async function recite(engine: EmbeddedEngine, ids: number[][], steps: number): Promise<void> {
  for (let s = 0; s < steps; s++) {
    await engine.forwardBackward(ids, (lps) => {
      const dLogprobs = lps.map((lp) => new Float32Array(lp.length).fill(-1 / lp.length));
      return { loss: -lps.reduce((sum, lp) => sum + lp.reduce((a, b) => a + b, 0) / lp.length, 0), dLogprobs };
    });
    await engine.optimStep({ lr: 1e-2, weightDecay: 0 });
  }
}
