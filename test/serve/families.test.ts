/**
 * `sinkflex serve` on a Phi-3 checkpoint (family-checkpoint.ts): its published template has no tool
 * format, so serve takes the family's (phi3-hermes) as the rollout does: the tools are written into the
 * system turn, `<tool_call>` blocks in a reply come back as `tool_calls`, tool results reach the model as
 * `<tool_response>` user turns, and a reply ends at `<|end|>`, not at the eos_token `<|endoftext|>`.
 * `toolFormat` names another format, as `rollout.toolFormat` does, and an unknown one is refused.
 * `samplingWeights: "int8"` samples from int8 copies of the weights and keeps the trained reply.
 * On a Llama 3.1 checkpoint whose template declares no format, the family's llama3-json: a streamed
 * call (the whole reply is one JSON object) comes back as tool_calls only, never as content.
 * The server is the real HTTP server `openServer` starts; the model is trained, not scripted.
 */
import { rmSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openServer } from "../../src/cli/commands/serve.js";
import { loadServedCheckpoint, parseSamplingWeights } from "../../src/cli/commands/served-checkpoint.js";
import { endTokens } from "../../src/serve/openai-server.js";
import { ANSWER, CALL_ARGUMENTS, familyCheckpoint, LLAMA31, OPENING, PHI3, QUESTION, SYSTEM, TOOL, TOOL_RESULT } from "./family-checkpoint.js";

const KEY = "family-key";
let dir: string;
let served: Awaited<ReturnType<typeof openServer>>;

beforeAll(async () => {
  dir = await familyCheckpoint(PHI3);
  served = await openServer(dir, { modelName: "phi3", apiKey: KEY, maxTokens: 64, maxContextTokens: 1024 });
}, 300_000);

afterAll(async () => {
  await served?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface ChatReply {
  choices: { message: { content: string | null; tool_calls?: { id: string; type: string; function: { name: string; arguments: string } }[] }; finish_reason: string; token_ids: number[] }[];
  prompt_token_ids: number[];
}

async function chat(body: Record<string, unknown>): Promise<ChatReply> {
  const r = await fetch(`${served.url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "phi3", temperature: 0, max_tokens: 48, return_token_ids: true, ...body }),
  });
  expect(r.status).toBe(200);
  return (await r.json()) as ChatReply;
}

const tools = [{ type: "function", function: { name: TOOL.name, description: TOOL.description, parameters: TOOL.parameters } }];
const opening = OPENING.map((m) => ({ role: m.role, content: (m as { content: string }).content }));

describe("sinkflex serve on a Phi-3 checkpoint", () => {
  it("renders the tools into the system turn, returns the phi3-hermes call as tool_calls, and stops at <|end|>", async () => {
    const { codec } = served.server.options;
    const reply = await chat({ messages: opening, tools });
    const prompt = codec.decode(reply.prompt_token_ids);
    // (Phi-3's special tokens strip the newline after them, so the decoded prompt has none there.)
    expect(prompt).toMatch(new RegExp(`^<\\|system\\|> ?${SYSTEM}\n\n# Tools\n[^]*<tool_call>[^]*<\\|end\\|><\\|user\\|> ?${QUESTION.replace("?", "\\?")}<\\|end\\|><\\|assistant\\|>$`));
    const [choice] = reply.choices;
    expect(choice!.finish_reason).toBe("tool_calls");
    expect(choice!.message.content).toBeNull();
    expect(choice!.message.tool_calls).toHaveLength(1);
    expect(choice!.message.tool_calls![0]!.function.name).toBe("lookup");
    expect(JSON.parse(choice!.message.tool_calls![0]!.function.arguments)).toEqual(CALL_ARGUMENTS);
    // The reply's last token is Phi-3's end of turn; nothing was sampled after it.
    const end = codec.tokenId("<|end|>");
    expect(choice!.token_ids[choice!.token_ids.length - 1]).toBe(end);
    expect(choice!.token_ids.indexOf(end)).toBe(choice!.token_ids.length - 1);
    expect(choice!.token_ids).not.toContain(codec.tokenId("<|endoftext|>"));
  });

  it("gives the tool result to the model as a <tool_response> user turn and ends the answer at <|end|>", async () => {
    const { codec } = served.server.options;
    const reply = await chat({
      messages: [
        ...opening,
        { role: "assistant", content: null, tool_calls: [{ id: "c0", type: "function", function: { name: "lookup", arguments: JSON.stringify(CALL_ARGUMENTS) } }] },
        { role: "tool", tool_call_id: "c0", content: TOOL_RESULT },
      ],
      tools,
    });
    expect(codec.decode(reply.prompt_token_ids)).toMatch(/<\|user\|> ?<tool_response>\n\{"item":"red chair","count":9\}\n<\/tool_response><\|end\|><\|assistant\|>$/);
    const [choice] = reply.choices;
    expect(choice!.finish_reason).toBe("stop");
    expect(choice!.message.content).toBe(ANSWER);
    expect(choice!.message.tool_calls).toBeUndefined();
    expect(choice!.token_ids[choice!.token_ids.length - 1]).toBe(codec.tokenId("<|end|>"));
  });

  it("ends a completion at <|end|> as well as at the eos_token <|endoftext|>", async () => {
    const { codec } = served.server.options;
    const ends = [codec.tokenId("<|end|>"), codec.tokenId("<|endoftext|>")];
    const { prompt_token_ids: prompt } = await chat({ messages: opening, tools, max_tokens: 1 });
    const r = await fetch(`${served.url}/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "phi3", prompt, temperature: 0, max_tokens: 48, return_token_ids: true }),
    });
    const body = (await r.json()) as { choices: { text: string; token_ids: number[]; finish_reason: string }[] };
    expect(r.status, JSON.stringify(body)).toBe(200);
    const [c] = body.choices;
    expect(c!.finish_reason).toBe("stop");
    expect(c!.text).toContain("</tool_call>");
    expect(c!.token_ids[c!.token_ids.length - 1]).toBe(ends[0]);
    c!.token_ids.slice(0, -1).forEach((t) => expect(ends).not.toContain(t));
    // The server stops at both end tokens, unless told ignore_eos.
    expect(served.server.options.codec.tokenizer.eosToken).toBe("<|endoftext|>");
    expect(endTokens(codec, served.server.options.template).sort((x, y) => x - y)).toEqual([...ends].sort((x, y) => x - y));
  });

  it("reads replies in the format toolFormat names, and refuses an unknown one with the choices", async () => {
    const other = await openServer(dir, { modelName: "phi3", apiKey: KEY, maxTokens: 64, maxContextTokens: 1024, toolFormat: "llama3-json" });
    try {
      const r = await fetch(`${other.url}/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "phi3", temperature: 0, max_tokens: 48, messages: opening, tools }),
      });
      const reply = (await r.json()) as ChatReply;
      // The same sampled <tool_call> block, read as llama3-json: not a call.
      expect(reply.choices[0]!.message.tool_calls).toBeUndefined();
      expect(reply.choices[0]!.message.content).toContain("<tool_call>");
    } finally {
      await other.close();
    }
    await expect(openServer(dir, { maxContextTokens: 1024, toolFormat: "mistral" })).rejects.toThrow('unknown tool format "mistral"; choose one of "hermes", "llama3-json", "phi3-hermes"');
  });

  it("samples from int8 copies with samplingWeights int8 (--sampling-weights): the trained reply, log-probs near the weights'", async () => {
    const int8 = await openServer(dir, { modelName: "phi3", apiKey: KEY, maxTokens: 64, maxContextTokens: 1024, samplingWeights: "int8" });
    try {
      expect(int8.engine.samplingWeights).toBe("int8");
      expect(served.engine.samplingWeights).toBe("same");
      const { prompt_token_ids: prompt } = await chat({ messages: opening, tools, max_tokens: 1 });
      const complete = async (url: string, temperature: number) => {
        const r = await fetch(`${url}/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "phi3", prompt, temperature, seed: 4, max_tokens: 48, return_token_ids: true, logprobs: 1 }),
        });
        expect(r.status).toBe(200);
        return ((await r.json()) as { choices: { text: string; token_ids: number[]; logprobs: { token_logprobs: number[] } }[] }).choices[0]!;
      };
      // the trained model's greedy reply survives int8
      expect((await complete(int8.url, 0)).text).toBe((await complete(served.url, 0)).text);
      // sampled at temperature 1 with one seed: the log-probs of the tokens both drew move a little, not nothing
      const [a, b] = [await complete(served.url, 1), await complete(int8.url, 1)];
      let same = 0;
      while (same < a.token_ids.length && a.token_ids[same] === b.token_ids[same]) same++;
      expect(same).toBeGreaterThan(4);
      const gaps = a.logprobs.token_logprobs.slice(0, same).map((l, i) => Math.abs(l - b.logprobs.token_logprobs[i]!));
      expect(Math.max(...gaps)).toBeGreaterThan(0);
      expect(Math.max(...gaps)).toBeLessThan(0.1);
    } finally {
      await int8.close();
    }
    expect(() => parseSamplingWeights("int4")).toThrow('--sampling-weights must be same or int8, got "int4"');
  });

  it("loads the checkpoint's template with the family's tool format", () => {
    const ck = loadServedCheckpoint(dir, 1024);
    try {
      expect(ck.template.tools?.format).toBe("phi3-hermes");
      expect(ck.template.endOfTurn).toBe("<|end|>");
    } finally {
      ck.engine.dispose();
    }
  });
});

describe("sinkflex serve on a Llama 3.1 checkpoint whose template declares no tool format", () => {
  let llama: Awaited<ReturnType<typeof openServer>>;
  let llamaDir: string;
  beforeAll(async () => {
    llamaDir = await familyCheckpoint(LLAMA31);
    llama = await openServer(llamaDir, { modelName: "llama", apiKey: KEY, maxTokens: 64, maxContextTokens: 1024 });
  }, 300_000);
  afterAll(async () => {
    await llama?.close();
    if (llamaDir) rmSync(llamaDir, { recursive: true, force: true });
  });

  it("streams the llama3-json call as tool_calls only (the JSON never as content), and ends the reply at <|eot_id|>", async () => {
    const r = await fetch(`${llama.url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "llama", temperature: 0, max_tokens: 48, messages: opening, tools, stream: true, return_token_ids: true }),
    });
    expect(r.status).toBe(200);
    const events = (await r.text()).split("\n\n").filter((e) => e.startsWith("data: ") && e !== "data: [DONE]").map((e) => JSON.parse(e.slice(6)) as {
      choices: { delta: { content?: string; tool_calls?: { function: { name: string; arguments: string } }[] }; finish_reason: string | null }[];
      token_ids?: number[];
    });
    const content = events.map((e) => e.choices[0]!.delta.content ?? "").join("");
    const calls = events.flatMap((e) => e.choices[0]!.delta.tool_calls ?? []);
    const last = events[events.length - 1]!;
    expect(content).toBe("");
    expect(calls.map((c) => c.function.name)).toEqual(["lookup"]);
    expect(JSON.parse(calls[0]!.function.arguments)).toEqual(CALL_ARGUMENTS);
    expect(last.choices[0]!.finish_reason).toBe("tool_calls");
    const eot = llama.server.options.codec.tokenId("<|eot_id|>");
    expect(last.token_ids![last.token_ids!.length - 1]).toBe(eot);
  });

  it("streams a plain answer as content after the tool's ipython turn", async () => {
    const r = await fetch(`${llama.url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "llama", temperature: 0, max_tokens: 48, tools, stream: true,
        messages: [
          ...opening,
          { role: "assistant", content: null, tool_calls: [{ id: "c0", type: "function", function: { name: "lookup", arguments: JSON.stringify(CALL_ARGUMENTS) } }] },
          { role: "tool", tool_call_id: "c0", content: TOOL_RESULT },
        ],
      }),
    });
    const events = (await r.text()).split("\n\n").filter((e) => e.startsWith("data: ") && e !== "data: [DONE]").map((e) => JSON.parse(e.slice(6)) as { choices: { delta: { content?: string; tool_calls?: unknown[] }; finish_reason: string | null }[] });
    expect(events.map((e) => e.choices[0]!.delta.content ?? "").join("")).toBe(ANSWER);
    expect(events.some((e) => e.choices[0]!.delta.tool_calls)).toBe(false);
    expect(events[events.length - 1]!.choices[0]!.finish_reason).toBe("stop");
  });
});
