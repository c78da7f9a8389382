/**
 * The tool-call formats of the model families' instruct models, and what each means for rendering a
 * conversation: the role the template gives tool results, the token that ends an assistant turn, and
 * whether the template writes tools at all.
 *
 *   hermes       Qwen2 / Qwen2.5 / Qwen3: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
 *                blocks after the content; tool results in the `tool` role (the template wraps them in
 *                `<tool_response>` inside a user turn).
 *   llama3-json  Llama 3.1 / 3.2: a turn that calls a tool is one JSON object `{"name": ...,
 *                "parameters": {...}}` (a model may put `<|python_tag|>` before it); tool results in the
 *                `ipython` role.
 *   phi3-hermes  Phi-3 / Phi-3.5: the published template has no tool format (it ignores `tools` and drops
 *                tool messages), so sinkflex writes the Hermes convention into Phi-3's plain turns: the
 *                tool list in the system turn, each call as a `<tool_call>` JSON block in the assistant's
 *                text, each result as a user turn `<tool_response>\n...\n</tool_response>`. Turns end
 *                with `<|end|>`, not the tokenizer's eos_token (`<|endoftext|>`).
 *
 * This file declares the formats; the renderer of the conversations is ../chat-template.ts and the
 * parsers of sampled text are in the rollout (tool-parser.ts).
 */

export const TOOL_FORMATS = ["hermes", "llama3-json", "phi3-hermes"] as const;
export type ToolFormat = (typeof TOOL_FORMATS)[number];

export interface ToolConvention {
  format: ToolFormat;
  /** The role tool results are given to the chat template. */
  toolRole: "tool" | "ipython";
  /** The token that ends an assistant turn when it is not the tokenizer's eos_token. */
  endOfTurn?: string;
  /** The template has no tool format: tools, calls and results are written into plain turns first. */
  toolsInText: boolean;
}

export const TOOL_CONVENTIONS: Readonly<Record<ToolFormat, ToolConvention>> = {
  hermes: { format: "hermes", toolRole: "tool", toolsInText: false },
  "llama3-json": { format: "llama3-json", toolRole: "ipython", toolsInText: false },
  "phi3-hermes": { format: "phi3-hermes", toolRole: "tool", endOfTurn: "<|end|>", toolsInText: true },
};

/** The format named `name`; anything else is an error listing the formats. */
export function toolConvention(name: string): ToolConvention {
  const c = (TOOL_CONVENTIONS as Record<string, ToolConvention | undefined>)[name];
  if (!c) throw new Error(`unknown tool-call format ${JSON.stringify(name)}; choose one of ${TOOL_FORMATS.map((f) => `"${f}"`).join(", ")}`);
  return c;
}

/**
 * The format a chat template's own text declares: `<tool_call>` blocks (hermes), Llama 3.1's
 * `"parameters"` JSON or `<|python_tag|>` (llama3-json); undefined when the template writes no tool calls.
 */
export function templateToolFormat(source: string): ToolFormat | undefined {
  if (source.includes("<tool_call>")) return "hermes";
  if (source.includes("<|python_tag|>") || source.includes('"parameters": ')) return "llama3-json";
  return undefined;
}
