/**
 * Each model family's tool format through the rollout's renderer and parser, with the family's real
 * tokenizer and chat template (test/model/family-chat.ts): a multi-turn episode with tool calls built
 * turn by turn (the sampled ids kept, only the template's framing appended) is token for token the
 * template's full rendering, with the drift detector on and silent; tool results reach the template in
 * the family's role (Llama 3.1: ipython; Phi-3: user turns, its template having no tool format); the
 * parser chosen for the family reads back the calls the model wrote; a malformed call comes back with the
 * parse error the rollout records; `rollout.toolFormat` picks another parser and refuses unknown ones;
 * an SFT example of the episode trains on each assistant turn up to the family's end-of-turn token.
 */
import { describe, expect, it } from "vitest";
import type { AssistantMessage, ChatMessage, ToolSpec } from "../../src/core/index.js";
import { tokenCodec } from "../../src/model/vocab.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { conversationToExample } from "../../src/pipeline/sft-data.js";
import { Rollout } from "../../src/rollout/agent-loop.js";
import { IncrementalRenderer } from "../../src/rollout/renderer.js";
import { toolParserFor } from "../../src/rollout/tool-parser.js";
import { familyChats, type FamilyChat } from "../model/family-chat.js";
import { groupTask, tinyEngine } from "./helpers.js";

const tools: ToolSpec[] = [
  { name: "lookup", description: "Find a record by key.", parameters: { type: "object", properties: { key: { type: "string" } }, required: ["key"] } },
  { name: "count", description: "Count the records of a kind.", parameters: { type: "object", properties: { kind: { type: "string" }, limit: { type: "integer" } }, required: ["kind"] } },
];

interface Turn {
  content: string;
  calls: { name: string; arguments: string }[];
  observation: (turn: number) => ChatMessage[];
}

const result = (turn: number, i: number, name: string, content: string): ChatMessage => ({ role: "tool", toolCallId: `c${turn}_${i}`, name, content });

/** An episode in the family's format: calls, results, a parallel call where the format has one, a user reply, more calls. */
function episode(f: FamilyChat): Turn[] {
  const parallel: Turn = f.singleCall
    ? { content: "", calls: [{ name: "count", arguments: '{"kind": "chair", "limit": 5}' }], observation: (t) => [result(t, 0, "count", '{"count": 3}')] }
    : {
        content: "Two more lookups.",
        calls: [
          { name: "lookup", arguments: '{"key": "b"}' },
          { name: "count", arguments: '{"kind": "chair", "limit": 5}' },
        ],
        observation: (t) => [result(t, 0, "lookup", "B=2"), result(t, 1, "count", '{"count": 3}')],
      };
  return [
    { content: "", calls: [{ name: "lookup", arguments: '{"key": "a"}' }], observation: (t) => [result(t, 0, "lookup", `A=1 (raw text holding ${f.endOfTurn})`)] },
    parallel,
    { content: "a is 1 and there are 3 chairs.", calls: [], observation: () => [{ role: "user", content: "Thanks! And key ü?" }] },
    { content: "", calls: [{ name: "lookup", arguments: '{"key": "ü"}' }], observation: (t) => [result(t, 0, "lookup", "Error: no such key")] },
    { content: "There is no key ü.", calls: [], observation: () => [{ role: "user", content: "ok" }] },
  ];
}

function play(f: FamilyChat, turns: Turn[]) {
  const codec = tokenCodec(f.tokenizer);
  const renderer = new IncrementalRenderer(codec, f.template);
  const parser = toolParserFor(f.template);
  const opening: ChatMessage[] = [
    { role: "system", content: "You are a warehouse agent." },
    { role: "user", content: "Find key a, then count the chairs." },
  ];
  let ids = renderer.start({ messages: opening, tools });
  const messages: ChatMessage[] = [...opening];
  const drifts = [];
  const parsedCalls = [];
  for (const [t, turn] of turns.entries()) {
    const text = f.writeTurn(turn.content, turn.calls);
    const sampled = codec.encode(text);
    expect(sampled[sampled.length - 1]).toBe(renderer.eosId);
    const parsed = parser.parse(codec.decode(sampled.slice(0, -1)), `c${t}_`);
    parsedCalls.push(parsed);
    const assistant: AssistantMessage = { role: "assistant", content: parsed.content, ...(parsed.toolCalls.length ? { toolCalls: parsed.toolCalls } : {}) };
    const obs = turn.observation(t);
    const ext = renderer.extend(sampled, assistant, obs);
    if (ext.kind !== "extend") drifts.push(ext.drift);
    ids = [...ids, ...sampled, ...ext.ids];
    messages.push(assistant, ...obs);
  }
  return { ids, drifts, messages, parsedCalls, codec };
}

describe.each(familyChats().map((f) => [f.name, f] as const))("family %s: tool calls through the rollout's renderer", (_name, f) => {
  it("builds a multi-turn episode with tool calls turn by turn to exactly the ids of the template's full rendering, with no drift", () => {
    const turns = episode(f);
    const { ids, drifts, messages } = play(f, turns);
    expect(drifts).toEqual([]);
    const full = f.template.render(messages, { tools, addGenerationPrompt: true, trustedAssistant: true });
    expect(ids).toEqual(f.tokenizer.encode(full));
    // The observation's end-of-turn text stays text: the only end-of-turn tokens are the turns' own.
    expect(ids.filter((id) => id === f.tokenizer.tokenToId(f.endOfTurn)).length).toBeGreaterThanOrEqual(turns.length);
  });

  it("reads back the calls the model wrote, with the parser of the family's format", () => {
    const turns = episode(f);
    const { parsedCalls } = play(f, turns);
    expect(toolParserFor(f.template).name).toBe({ hermes: "qwen", "llama3-json": "llama3", "phi3-hermes": "phi3" }[f.family.toolFormat]);
    for (const [t, turn] of turns.entries()) {
      const parsed = parsedCalls[t]!;
      expect(parsed.malformed).toBe(0);
      expect(parsed.errors).toEqual([]);
      expect(parsed.content).toBe(turn.calls.length && f.singleCall ? "" : turn.content);
      expect(parsed.toolCalls.map((c) => ({ name: c.name, arguments: JSON.parse(c.arguments) as unknown }))).toEqual(
        turn.calls.map((c) => ({ name: c.name, arguments: JSON.parse(c.arguments) as unknown })),
      );
    }
  });

  it("renders tool results in the family's role", () => {
    const { messages } = play(f, episode(f).slice(0, 1));
    const text = f.template.render(messages, { tools, addGenerationPrompt: true, trustedAssistant: true });
    const role = {
      "qwen2.5": "<|im_start|>user\n<tool_response>\nA=1",
      qwen3: "<|im_start|>user\n<tool_response>\nA=1",
      "llama3.1": '<|start_header_id|>ipython<|end_header_id|>\n\n"A=1',
      phi3: "<|user|>\n<tool_response>\nA=1",
    }[f.name]!;
    expect(text).toContain(role);
    // Phi-3's template has no tool format: the tool list is written into its system turn.
    if (f.name === "phi3") expect(text.startsWith('<|system|>\nYou are a warehouse agent.\n\n# Tools\n')).toBe(true);
  });

  it("reports a malformed call with the parse error, and still sends it to the env as written", () => {
    const parser = toolParserFor(f.template);
    const text = f.writeTurn("", [{ name: "lookup", arguments: '{key: "a"}' }]);
    const parsed = parser.parse(text.slice(0, -f.endOfTurn.length), "c0_");
    expect(parsed.malformed).toBe(1);
    expect(parsed.errors).toHaveLength(1);
    expect(parsed.errors[0]).toMatch(/^call 0: not valid JSON \(/);
    expect(parsed.toolCalls).toEqual([{ id: "c0_0", name: "lookup", arguments: '{key: "a"}' }]);
  });
});

describe("rollout.toolFormat", () => {
  it("names the parser a rollout reads turns with, and an unknown format is refused with the choices", () => {
    const phi = familyChats().find((f) => f.name === "phi3")!;
    const codec = tokenCodec(phi.tokenizer);
    const engine = tinyEngine(codec);
    try {
      expect(() => new Rollout(engine, codec, phi.template, { toolFormat: "mistral" })).toThrow('unknown tool format "mistral"; choose one of "hermes", "llama3-json", "phi3-hermes"');
      expect(() => new Rollout(engine, codec, phi.template, { toolFormat: "llama3-json" })).not.toThrow();
    } finally {
      engine.dispose();
    }
    const base = { suites: [{ env: "sinkflex/arith-v0" }], model: { init: {} } };
    expect(validateConfig({ ...base, rollout: { toolFormat: "phi3-hermes" } }).rollout.toolFormat).toBe("phi3-hermes");
    expect(validateConfig(base).rollout.toolFormat).toBeUndefined();
    expect(() => validateConfig({ ...base, rollout: { toolFormat: "mistral" } })).toThrow('rollout.toolFormat: must be one of "hermes", "llama3-json", "phi3-hermes"');
  });
});

// Qwen3's template writes an empty <think> block into the last assistant turn and drops it from past
// ones, so its SFT examples drift by design (docs/model.md); the other families' do not.
describe.each(familyChats().filter((f) => f.name !== "qwen3").map((f) => [f.name, f] as const))("family %s: an SFT example of an episode with tool calls", (_name, f) => {
  it("is the template's full rendering, the loss on each assistant turn up to the family's end-of-turn token, with no drift", () => {
    const turns = episode(f);
    const { messages } = play(f, turns);
    const ex = conversationToExample({ tokenizer: f.tokenizer, template: f.template, codec: tokenCodec(f.tokenizer), vocab: undefined, templateVars: {} }, { messages, tools });
    expect(ex.drifted).toBe(false);
    // The conversation ends with the user's reply: the full rendering without the generation prompt.
    const tokens = Array.from(ex.tokens);
    expect(tokens).toEqual(f.tokenizer.encode(f.template.render(messages, { tools, addGenerationPrompt: true, trustedAssistant: true })).slice(0, tokens.length));
    const trained: number[][] = [];
    tokens.forEach((id, i) => {
      if (ex.lossMask[i] !== 1) return;
      if (i === 0 || ex.lossMask[i - 1] !== 1) trained.push([]);
      trained[trained.length - 1]!.push(id);
    });
    expect(trained).toEqual(turns.map((t) => f.tokenizer.encode(f.writeTurn(t.content, t.calls))));
    expect(ex.contextStart).toBeGreaterThan(1);
  });
});

describe("the agent loop on a Phi-3 checkpoint's tokenizer and template", () => {
  it("samples each turn until <|end|> (not the eos_token <|endoftext|>), closes cut turns with it, and frames the env's reply after it", async () => {
    const phi = familyChats().find((f) => f.name === "phi3")!;
    const codec = tokenCodec(phi.tokenizer);
    const engine = tinyEngine(codec, 3);
    const rollout = new Rollout(engine, codec, phi.template, { maxTokensPerTurn: 4, turnLimit: "close", maxTurns: 3, seed: 7, temperature: 1 });
    try {
      const [traj] = await rollout.runGroup(groupTask(0, 1, 5));
      expect(traj!.error).toBeUndefined();
      const end = phi.tokenizer.tokenToId("<|end|>")!;
      const seg = traj!.segments[0]!;
      expect(traj!.turns.length).toBeGreaterThanOrEqual(2);
      for (const turn of traj!.turns.slice(0, -1)) {
        // The token that ends the turn: sampled (mask 1) or given to close it (mask 0), always <|end|>.
        const last = turn.finishReason === "stop" ? turn.sampleEnd - 1 : turn.sampleEnd;
        expect(seg.tokens[last]).toBe(end);
        // The env's reply follows as Phi-3's user turn (the newline after <|end|> stripped, as in a full encode).
        expect(phi.tokenizer.decode(seg.tokens.slice(last, last + 2))).toBe("<|end|><|user|>");
      }
    } finally {
      await rollout.close();
      engine.dispose();
    }
  });
});
