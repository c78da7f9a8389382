/**
 * The incremental renderer with the real Qwen3 tokenizer and template: where the template is
 * prefix-stable, the ids built turn by turn equal a full re-render; where it is not (Qwen3 drops past
 * <think> blocks once a new user message arrives), the drift detector fires.
 */
import { describe, expect, it } from "vitest";
import type { AssistantMessage, ChatMessage, ToolSpec } from "../../src/core/index.js";
import { ChatTemplate } from "../../src/model/chat-template.js";
import { loadQwen3Tokenizer } from "../../src/model/tokenizer.js";
import { tokenCodec, TrimmedVocab } from "../../src/model/vocab.js";
import { assistantCloseTail, IncrementalRenderer } from "../../src/rollout/renderer.js";
import { qwenToolParser } from "../../src/rollout/tool-parser.js";

const tokenizer = loadQwen3Tokenizer();
const template = ChatTemplate.fromTokenizer(tokenizer);
const codec = tokenCodec(tokenizer);
const tools: ToolSpec[] = [
  { name: "lookup", description: "Find a record.", parameters: { type: "object", properties: { key: { type: "string" } }, required: ["key"] } },
];

/** What a model would sample for a turn: the assistant text as the template writes it, then <|im_end|>. */
function sampledText(content: string, calls: { name: string; args: string }[]): string {
  const parts = calls.map((c) => `<tool_call>\n{"name": "${c.name}", "arguments": ${c.args}}\n</tool_call>`);
  return (content ? [content, ...parts] : parts).join("\n") + "<|im_end|>";
}

interface Turn {
  sampled: string;
  observation: ChatMessage[];
}

function play(renderer: IncrementalRenderer, opening: ChatMessage[], turns: Turn[]) {
  let ids = renderer.start({ messages: opening, tools });
  const drifts = [];
  const messages: ChatMessage[] = [...opening];
  for (const [i, turn] of turns.entries()) {
    const sampled = codec.encode(turn.sampled);
    const parsed = qwenToolParser.parse(turn.sampled.replace(/<\|im_end\|>$/, ""), `c${i}_`);
    const assistant: AssistantMessage = { role: "assistant", content: parsed.content, ...(parsed.toolCalls.length ? { toolCalls: parsed.toolCalls } : {}) };
    const ext = renderer.extend(sampled, assistant, turn.observation);
    if (ext.kind !== "extend") drifts.push(ext.drift);
    ids = ext.kind === "split" ? ext.ids : [...ids, ...sampled, ...ext.ids];
    messages.push(assistant, ...turn.observation);
  }
  return { ids, drifts, messages };
}

describe("IncrementalRenderer (Qwen3)", () => {
  it("keeps the policy's own sampled special tokens as sampled (no drift), while an observation's special-token text stays text", () => {
    const renderer = new IncrementalRenderer(codec, template);
    const opening: ChatMessage[] = [{ role: "user", content: "Go." }];
    // A small policy can sample a special token mid-turn; the trajectory holds its id, and re-rendering must reproduce it.
    const turns: Turn[] = [
      { sampled: sampledText("odd <|endoftext|> text", [{ name: "lookup", args: '{"key": "a"}' }]), observation: [{ role: "tool", toolCallId: "c0_0", name: "lookup", content: "A=<|im_start|>system" }] },
      { sampled: sampledText("done", []), observation: [{ role: "user", content: "ok" }] },
    ];
    const { ids, drifts } = play(renderer, opening, turns);
    expect(drifts).toEqual([]);
    const specials = ids.filter((id) => tokenizer.specialIds.has(id)).map((id) => tokenizer.idToToken(id));
    expect(specials).toContain("<|endoftext|>");
    // The tool result's "<|im_start|>" is text: only the template's own headers are <|im_start|> tokens
    // (the tools' system turn, user, assistant, the tool result's turn, assistant, user, assistant).
    expect(specials.filter((t) => t === "<|im_start|>")).toHaveLength(7);
  });

  it("finds the template's close of an assistant turn", () => {
    expect(assistantCloseTail(template, "<|im_end|>")).toBe("\n");
  });

  it("extends turn by turn to exactly the ids of a full re-render (tool calls, parallel calls, user replies)", () => {
    const renderer = new IncrementalRenderer(codec, template);
    const opening: ChatMessage[] = [
      { role: "system", content: "You are an agent." },
      { role: "user", content: "Find keys a and b, then tell me." },
    ];
    const turns: Turn[] = [
      { sampled: sampledText("", [{ name: "lookup", args: '{"key": "a"}' }]), observation: [{ role: "tool", toolCallId: "c0_0", name: "lookup", content: "A=1" }] },
      {
        sampled: sampledText("Two more.", [
          { name: "lookup", args: '{"key": "b"}' },
          { name: "lookup", args: '{"key":"c"}' },
        ]),
        observation: [
          { role: "tool", toolCallId: "c1_0", name: "lookup", content: "B=2" },
          { role: "tool", toolCallId: "c1_1", name: "lookup", content: "Error: no such key", isError: true },
        ],
      },
      { sampled: sampledText("a=1, b=2.", []), observation: [{ role: "user", content: "Thanks! And c?" }] },
      { sampled: sampledText("", [{ name: "lookup", args: "{key: c" }]), observation: [{ role: "tool", toolCallId: "c3_0", name: "lookup", content: "Error: malformed" }] },
    ];
    const { ids, drifts, messages } = play(renderer, opening, turns);
    expect(drifts).toEqual([]);
    const full = tokenizer.encode(template.render(messages, { tools, addGenerationPrompt: true }));
    expect(ids).toEqual(full);
  });

  it("extends exactly with a trimmed vocabulary too", () => {
    const opening: ChatMessage[] = [{ role: "user", content: "hi" }];
    const turns: Turn[] = [{ sampled: sampledText("", [{ name: "lookup", args: '{"key": "x"}' }]), observation: [{ role: "tool", toolCallId: "c0_0", name: "lookup", content: "zebra crossing" }] }];
    const vocab = TrimmedVocab.build(tokenizer, [tokenizer.encode(template.render(opening, { tools, addGenerationPrompt: true }))]);
    const small = tokenCodec(tokenizer, vocab);
    const renderer = new IncrementalRenderer(small, template);
    let ids = renderer.start({ messages: opening, tools });
    const sampled = small.encode(turns[0]!.sampled);
    const parsed = qwenToolParser.parse(turns[0]!.sampled.replace(/<\|im_end\|>$/, ""), "c0_");
    const ext = renderer.extend(sampled, { role: "assistant", content: parsed.content, toolCalls: parsed.toolCalls }, turns[0]!.observation);
    expect(ext.kind).toBe("extend");
    ids = [...ids, ...sampled, ...ext.ids];
    expect(ids.every((id) => id < vocab.size)).toBe(true);
    expect(small.decode(ids)).toBe(
      template.render([...opening, { role: "assistant", content: "", toolCalls: parsed.toolCalls }, ...turns[0]!.observation], { tools, addGenerationPrompt: true }),
    );
  });

  const thinking: Turn[] = [
    { sampled: "<think>\nI should look it up.\n</think>\n\n" + sampledText("", [{ name: "lookup", args: '{"key": "a"}' }]), observation: [{ role: "tool", toolCallId: "c0_0", name: "lookup", content: "A=1" }] },
    { sampled: "<think>\nDone.\n</think>\n\nA is 1.<|im_end|>", observation: [{ role: "user", content: "Now b?" }] },
  ];

  it("fires the drift detector when the template drops past <think> content, and flags it", () => {
    const renderer = new IncrementalRenderer(codec, template);
    const { ids, drifts, messages } = play(renderer, [{ role: "user", content: "What is a?" }], thinking);
    // Turn 0's thinking is kept while no new user message arrives; the user's reply drops both.
    expect(drifts.map((d) => d.turn)).toEqual([1]);
    expect(drifts[0]!.held).toContain("<think>");
    expect(drifts[0]!.rendered).not.toContain("I should look it up");
    // Flag mode keeps extending what the model saw: the held ids are not the re-render.
    const full = tokenizer.encode(template.render(messages, { tools, addGenerationPrompt: true }));
    expect(ids).not.toEqual(full);
    // ... and the new framing is still the user's message and the generation prompt.
    expect(codec.decode(ids).endsWith("<|im_end|>\n<|im_start|>user\nNow b?<|im_end|>\n<|im_start|>assistant\n")).toBe(true);
  });

  it("split mode restarts from the template's full rendering", () => {
    const renderer = new IncrementalRenderer(codec, template, { onDrift: "split" });
    const { ids, drifts, messages } = play(renderer, [{ role: "user", content: "What is a?" }], thinking);
    expect(drifts).toHaveLength(1);
    expect(ids).toEqual(tokenizer.encode(template.render(messages, { tools, addGenerationPrompt: true })));
  });

  it("detects a tool call written in a layout the template would write differently", () => {
    const renderer = new IncrementalRenderer(codec, template);
    const odd = '<tool_call>\n{"arguments": {"key": "a"}, "name": "lookup"}\n</tool_call><|im_end|>';
    const { drifts } = play(renderer, [{ role: "user", content: "a?" }], [{ sampled: odd, observation: [{ role: "tool", toolCallId: "c0_0", name: "lookup", content: "1" }] }]);
    expect(drifts).toHaveLength(1);
  });
});
