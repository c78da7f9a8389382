/**
 * Shared parts of the gateway tests: a tiny Qwen2-shaped checkpoint (trimmed Qwen3 vocabulary, the real
 * tokenizer files) trained for a few steps on one tool-calling episode, so that a random model plays
 * it — a `lookup` tool call, then an answer after the tool's result — and the gateway's recording of
 * real tool calls can be tested. It is real training on the embedded engine, not a stub.
 */
import type { ChatMessage, ToolSpec } from "../../src/core/index.js";
import type { EmbeddedEngine } from "../../src/engine/index.js";
import { qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import { recite, stockCodec, SYSTEM, template, tinyEngine } from "../rollout/helpers.js";

export const QUESTION = "How many red chairs are left?";
export const TOOL_RESULT = '{"item":"red chair","count":9}';
export const ANSWER = "There are 9 red chairs left.";
export const TOOL: ToolSpec = { name: "lookup", description: "Stock count of an item.", parameters: { type: "object", properties: { item: { type: "string" } }, required: ["item"] } };
export const CALL_ARGUMENTS = '{"item": "red chair"}';

/** The episode as the template renders it, the last assistant turn sampled after the generation prompt. */
export function episodeText(): string {
  const messages: ChatMessage[] = [
    { role: "system", content: SYSTEM },
    { role: "user", content: QUESTION },
    { role: "assistant", content: "", toolCalls: [{ id: "c0", name: "lookup", arguments: CALL_ARGUMENTS }] },
    { role: "tool", toolCallId: "c0", name: "lookup", content: TOOL_RESULT },
  ];
  return `${template.render(messages, { tools: [TOOL], addGenerationPrompt: true })}${ANSWER}<|im_end|>`;
}

export const codec = stockCodec();

/** Trains a tiny engine on the episode until it reproduces it; returns the engine (tokenizer set for saving). */
export function trainedEngine(steps = 150): Promise<EmbeddedEngine> {
  return trainedOn([episodeText()], steps);
}

/** Trains a tiny engine (seed 7) on the texts, each its own sequence, until it reproduces them. */
export async function trainedOn(texts: string[], steps = 150): Promise<EmbeddedEngine> {
  const engine = tinyEngine(codec, 7);
  engine.tokenizerDir = qwen3TokenizerDir();
  const ids = texts.map((t) => codec.encode(t));
  await recite(engine, ids, steps);
  return engine;
}
