/**
 * The policy the pipeline trains: an embedded engine plus the tokenizer, chat template and (for small
 * models) trimmed vocabulary that turn conversations into the engine's token ids.
 *
 * A fresh policy is a random Qwen2-shaped model whose vocabulary is trimmed to the ids the suites'
 * conversations use (plus every byte token). A saved policy is a Hugging Face checkpoint folder with
 * `sinkflex-vocab.json` beside the weights when the vocabulary is trimmed, and `sinkflex_attention.json`
 * with the sink-window mask it was trained with.
 *
 * The engine is the embedded one, or a torch worker (`engine.backend: "torch"` in the run config):
 * `openPolicy` loads a checkpoint into either, `onBackend` moves a policy made here (embedded) to the
 * configured backend through a checkpoint folder the worker loads.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { SinkWindow } from "../attention/index.js";
import { createRandomModel, EmbeddedEngine, loadEngine } from "../engine/index.js";
import { openTorchEngine, type TorchEngine } from "../engine/index.js";
import type { EngineConfig } from "./config.js";
import type { ChatMessage, ToolSpec } from "../gym/index.js";
import { ChatTemplate, checkpointFamily } from "../model/index.js";
import { parseHfConfig } from "../model/index.js";
import { STABLE_TOOL_TEMPLATE } from "../model/index.js";
import type { AttentionInit, WeightDtype } from "../model/index.js";
import { loadQwen3Tokenizer, qwen3TokenizerDir, Tokenizer } from "../model/index.js";
import { tokenCodec, TrimmedVocab, type TokenCodec } from "../model/index.js";

/** The engines a policy runs on: both serve the engine primitives, reset their optimizer and save with it. */
export type PolicyEngine = EmbeddedEngine | TorchEngine;

export interface Policy<E extends PolicyEngine = PolicyEngine> {
  engine: E;
  tokenizer: Tokenizer;
  template: ChatTemplate;
  codec: TokenCodec;
  vocab: TrimmedVocab | undefined;
  /** Chat-template variables used everywhere (Qwen3: thinking off). */
  templateVars: Record<string, unknown>;
}

/** The text side of a policy: what turns conversations into token ids, without the model. */
export type PolicyText = Pick<Policy, "tokenizer" | "template" | "codec" | "vocab" | "templateVars">;

export interface ModelInit {
  family: "qwen2" | "llama";
  hiddenSize: number;
  layers: number;
  heads: number;
  kvHeads: number;
  intermediateSize: number;
  maxPositions: number;
  /** "random" when absent. */
  attentionInit?: AttentionInit;
}

export const TEMPLATE_VARS = { enable_thinking: false };

/** A random model over a vocabulary trimmed to the given conversations. */
export function createPolicy(
  init: ModelInit,
  corpus: { messages: ChatMessage[]; tools: ToolSpec[] }[],
  seed: number,
  attention?: SinkWindow,
): Policy<EmbeddedEngine> {
  const tokenizer = loadQwen3Tokenizer();
  // A model trained from scratch uses the prefix-stable template, so no trajectory drifts.
  const template = new ChatTemplate(STABLE_TOOL_TEMPLATE, { eosToken: tokenizer.eosToken, bosToken: tokenizer.bosToken, specialTokens: tokenizer.specialTokens });
  // The ids the corpus uses. Tokenizers split at special tokens before anything else, so each message
  // (from one <|im_start|> to the next) encodes alone to the same ids: a system prompt shared by
  // thousands of conversations is encoded once.
  const pieces = new Map<string, number[]>();
  const rendered = corpus.flatMap((c) =>
    template
      .render(c.messages, { tools: c.tools, addGenerationPrompt: true, extra: TEMPLATE_VARS })
      .split(/(?=<\|im_start\|>)/)
      .map((piece) => {
        let ids = pieces.get(piece);
        if (!ids) pieces.set(piece, (ids = tokenizer.encode(piece)));
        return ids;
      }),
  );
  // Digits, punctuation and common words so that unseen numbers and names still have short spellings.
  const extra = tokenizer.encode("0123456789 0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ' \" ( ) [ ] { } - + * / = _ < > yes no the a an is of to and");
  const vocab = TrimmedVocab.build(tokenizer, rendered, extra);
  const codec = tokenCodec(tokenizer, vocab);
  const cfg = parseHfConfig({
    architectures: [init.family === "llama" ? "LlamaForCausalLM" : "Qwen2ForCausalLM"],
    model_type: init.family,
    hidden_size: init.hiddenSize,
    num_hidden_layers: init.layers,
    num_attention_heads: init.heads,
    num_key_value_heads: init.kvHeads,
    intermediate_size: init.intermediateSize,
    vocab_size: codec.size,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    max_position_embeddings: init.maxPositions,
    tie_word_embeddings: true,
  });
  const engine = createRandomModel(cfg, seed, { tokenizerDir: qwen3TokenizerDir(), attention, seed, attentionInit: init.attentionInit });
  return { engine, tokenizer, template, codec, vocab, templateVars: TEMPLATE_VARS };
}

/**
 * A policy from a checkpoint folder (its own tokenizer files when present, else Qwen3's), with the
 * sink-window mask it was trained with (see `loadEngine`): `attention` undefined takes the checkpoint's,
 * and settings that differ from the checkpoint's are an error naming both.
 */
export function loadPolicy(dir: string, mask: SinkWindow | { attention?: SinkWindow; override?: boolean; dtype?: WeightDtype } = {}): Policy<EmbeddedEngine> {
  // A bare SinkWindow: settings that must agree with the checkpoint's; { override: true }: run with them anyway.
  const { attention, override, dtype } = "window" in mask ? { attention: mask, override: false, dtype: undefined } : mask;
  const text = loadPolicyText(dir);
  const engine = loadEngine(dir, { attention, overrideAttention: override, tokenizerDir: text.tokenizerDir, dtype });
  return withEngine(text, engine);
}

/** The text side of a checkpoint folder: its tokenizer files when present, else Qwen3's. */
function loadPolicyText(dir: string): PolicyText & { tokenizerDir: string } {
  if (!existsSync(dir)) throw new Error(`no checkpoint folder at ${dir}`);
  const own = existsSync(`${dir}/tokenizer.json`);
  const tokenizer = own ? Tokenizer.fromDir(dir) : loadQwen3Tokenizer();
  // The family's tool format where the template's text declares none (Phi-3's template has no tool format).
  const template = ChatTemplate.fromTokenizer(tokenizer, "auto", checkpointFamily(dir)?.toolFormat);
  const vocab = TrimmedVocab.load(dir);
  const codec = tokenCodec(tokenizer, vocab);
  return { tokenizer, template, codec, vocab, templateVars: TEMPLATE_VARS, tokenizerDir: own ? dir : qwen3TokenizerDir() };
}

/** The text side joined with an engine over the same ids (padding rows past the tokenizer's never sampled). */
function withEngine<E extends PolicyEngine>(text: PolicyText, engine: E): Policy<E> {
  const { tokenizer, template, codec, vocab, templateVars } = text;
  const rows = engine instanceof EmbeddedEngine ? engine.config.vocabSize : engine.vocabSize;
  if (rows < codec.size) {
    engine.dispose();
    throw new Error(`the checkpoint's vocab_size (${rows}) is smaller than its tokenizer/vocabulary (${codec.size} ids); the tokenizer files do not belong to the weights`);
  }
  engine.usableTokens = codec.size; // embedding rows past the tokenizer's ids are padding: never sampled
  return { engine, tokenizer, template, codec, vocab, templateVars };
}

/** The torch worker options of an engine config: where it runs, and its token read from `tokenEnv`. */
function torchOptions(engine: EngineConfig): { url?: string; device?: string; python?: string; token?: string; threads?: number } {
  let token: string | undefined;
  if (engine.tokenEnv) {
    token = process.env[engine.tokenEnv];
    if (!token) throw new Error(`engine.tokenEnv names ${engine.tokenEnv}, which is not set: export the worker's token in it, or drop tokenEnv`);
  }
  return {
    ...(engine.url ? { url: engine.url } : {}),
    ...(engine.device ? { device: engine.device } : {}),
    ...(engine.python ? { python: engine.python } : {}),
    ...(engine.threads ? { threads: engine.threads } : {}),
    ...(token ? { token } : {}),
  };
}

/**
 * A policy from a checkpoint folder on the configured backend: `loadPolicy` for the embedded engine; for
 * torch, the same text side and a worker that loads the folder. The worker runs the mask saved with the
 * folder (sinkflex_attention.json, and the sink logits in its weights), as the embedded engine does; a run
 * that asks for other settings (or overrides them) is refused, naming both, since the worker cannot run a
 * checkpoint with a mask other than its own.
 */
export async function openPolicy(dir: string, engine: EngineConfig, mask: SinkWindow | { attention?: SinkWindow; override?: boolean; dtype?: WeightDtype } = {}): Promise<Policy> {
  if (engine.backend === "embedded") return loadPolicy(dir, mask);
  const attention = "window" in mask ? mask : mask.attention;
  const text = loadPolicyText(dir);
  const torch = await openTorchEngine({ model: resolve(dir), tokenizerDir: text.tokenizerDir, ...torchOptions(engine) });
  const runs = torch.attention;
  const asked = attention ?? { window: 0, sinks: 0 };
  // Full attention asked for (no mask) matches a folder saved with any full-attention settings.
  const same = asked.window === 0 ? runs.window === 0 : asked.window === runs.window && asked.sinks === runs.sinks;
  if (attention && !same) {
    torch.dispose();
    const describe = (w: SinkWindow) => (w.window === 0 ? "full attention" : `window ${w.window}, sinks ${w.sinks}`);
    throw new Error(
      `${dir} was saved with ${describe(runs)} (its sinkflex_attention.json; full attention without one), and this run asks for ${describe(asked)}; the torch worker runs a checkpoint's own mask: set attention to the checkpoint's, or load and save it with the new mask on the embedded engine first`,
    );
  }
  return withEngine(text, torch);
}

/**
 * The policy on the configured backend: itself for the embedded engine; for torch, it is saved to `dir`
 * (weights, tokenizer files, trimmed vocabulary: the folder the worker loads and copies tokenizer files
 * from, so keep it) and loaded by a worker, and the embedded engine is disposed.
 */
export async function onBackend(policy: Policy, engine: EngineConfig, dir: string): Promise<Policy> {
  if (engine.backend === "embedded") return policy;
  await savePolicy(policy, dir);
  policy.engine.dispose();
  return openPolicy(dir, engine);
}

/** Writes the policy as a checkpoint folder (weights, config, tokenizer files, trimmed vocabulary). */
export async function savePolicy(policy: Policy, dir: string, options: { optimizer?: boolean } = {}): Promise<void> {
  await policy.engine.save(dir, { optimizer: options.optimizer ?? false });
  policy.vocab?.save(dir);
  // The checkpoint carries the template the policy was trained with.
  const configPath = join(dir, "tokenizer_config.json");
  if (existsSync(configPath)) {
    const config = JSON.parse(readFileSync(configPath, "utf8")) as Record<string, unknown>;
    config.chat_template = policy.template.source;
    writeFileSync(configPath, JSON.stringify(config, null, 2));
  }
}
