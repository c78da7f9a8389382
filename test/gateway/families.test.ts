/**
 * The recording gateway on a Llama 3.1 checkpoint (test/serve/family-checkpoint.ts) whose chat template
 * (the plain Llama 3 one its tokenizer package ships) declares no tool format: the gateway takes the
 * family's, llama3-json, as the rollout does: a reply that is one `{"name": ..., "parameters": ...}`
 * object comes back as `tool_calls`, the tool's result reaches the template in the `ipython` role, each
 * call stops at `<|eot_id|>`, and the recorded trajectory holds exactly what was sampled and rendered.
 * And a Phi-3 checkpoint's calls stop at `<|end|>`, not at its eos_token, and the framing after that
 * token is encoded as a full encode sees it, so its episode is one token-exact segment. The gateway is the real HTTP
 * server `openGateway` starts; the models are trained, not scripted.
 */
import { rmSync } from "node:fs";
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openGateway } from "../../src/cli/commands/gateway.js";
import { ANSWER, CALL_ARGUMENTS, episodeTexts, familyCheckpoint, LLAMA31, PHI3, QUESTION, SYSTEM, TOOL, TOOL_RESULT, type FamilyCase } from "../serve/family-checkpoint.js";

const KEY = "family-gateway-key";
const auth = { authorization: `Bearer ${KEY}`, "content-type": "application/json" };
const tools = [{ type: "function" as const, function: { name: TOOL.name, description: TOOL.description, parameters: TOOL.parameters } }];

interface TrajectoryJSON {
  calls: { join: string; choices: { tokens: number[] }[] }[];
  trajectory: { segments: { tokens: number[]; lossMask: number[]; messages: { role: string; content: string }[] }[] };
}

/** Opens the gateway on a trained checkpoint of the family; returns it and a closer that removes the folder. */
async function gatewayOn(f: FamilyCase) {
  const dir = await familyCheckpoint(f);
  const gw = await openGateway(dir, { modelName: f.name, apiKey: KEY, maxTokens: 64, maxContextTokens: 1024 });
  return {
    gw,
    close: async () => {
      await gw.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Plays the episode through a session: the call, the tool's result, the answer. Returns the replies and the trajectory. */
async function playEpisode(gw: Awaited<ReturnType<typeof openGateway>>) {
  const r = await fetch(`${gw.url}/sessions`, { method: "POST", headers: auth, body: JSON.stringify({}) });
  expect(r.status).toBe(201);
  const { id, baseURL } = (await r.json()) as { id: string; baseURL: string };
  const client = new OpenAI({ baseURL, apiKey: KEY, maxRetries: 0 });
  const messages: ChatCompletionMessageParam[] = [
    { role: "system", content: SYSTEM },
    { role: "user", content: QUESTION },
  ];
  const first = await client.chat.completions.create({ model: "m", messages, tools, temperature: 0, max_tokens: 48 });
  const call = first.choices[0]!.message.tool_calls?.[0];
  messages.push({ role: "assistant", content: null, tool_calls: call ? [call] : [] });
  messages.push({ role: "tool", tool_call_id: call?.id ?? "none", content: TOOL_RESULT });
  const second = await client.chat.completions.create({ model: "m", messages, tools, temperature: 0, max_tokens: 48 });
  const t = await fetch(`${gw.url}/sessions/${id}/trajectory`, { headers: auth });
  expect(t.status).toBe(200);
  return { first, second, trajectory: (await t.json()) as TrajectoryJSON };
}

describe("the gateway on a Llama 3.1 checkpoint whose template declares no tool format", () => {
  let served: Awaited<ReturnType<typeof gatewayOn>>;
  beforeAll(async () => {
    served = await gatewayOn(LLAMA31);
  }, 300_000);
  afterAll(async () => {
    await served?.close();
  });

  it("returns the llama3-json call as tool_calls, gives the result in the ipython role, and stops each call at <|eot_id|>", async () => {
    const { gw } = served;
    const codec = gw.gateway.options.codec;
    const eot = codec.tokenId("<|eot_id|>");
    const { first, second, trajectory } = await playEpisode(gw);
    expect(first.choices[0]!.finish_reason).toBe("tool_calls");
    const call = first.choices[0]!.message.tool_calls![0]!;
    expect(call.type === "function" ? call.function.name : undefined).toBe("lookup");
    expect(JSON.parse(call.type === "function" ? call.function.arguments : "null")).toEqual(CALL_ARGUMENTS);
    expect(second.choices[0]!.finish_reason).toBe("stop");
    expect(second.choices[0]!.message.content).toBe(ANSWER);
    // Each call sampled up to and including <|eot_id|>, never past it.
    expect(trajectory.calls).toHaveLength(2);
    for (const c of trajectory.calls) {
      const tokens = c.choices[0]!.tokens;
      expect(tokens[tokens.length - 1]).toBe(eot);
      expect(tokens.indexOf(eot)).toBe(tokens.length - 1);
    }
    // The second call's prompt holds the tool's result as an ipython turn (the template's plain Llama 3
    // turns: the role name in the header), then the sampled answer.
    const last = trajectory.trajectory.segments[trajectory.trajectory.segments.length - 1]!;
    const text = codec.decode(last.tokens);
    expect(text).toContain(`<|start_header_id|>ipython<|end_header_id|>\n\n${TOOL_RESULT}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n${ANSWER}<|eot_id|>`);
    expect(text).not.toContain("<|start_header_id|>tool<|end_header_id|>");
    expect(last.messages.map((m) => m.role)).toContain("tool");
  });
});

describe("the gateway on a Phi-3 checkpoint", () => {
  let served: Awaited<ReturnType<typeof gatewayOn>>;
  beforeAll(async () => {
    served = await gatewayOn(PHI3);
  }, 300_000);
  afterAll(async () => {
    await served?.close();
  });

  it("returns the phi3-hermes call as tool_calls, stops each call at <|end|>, and records the episode as one segment", async () => {
    const { gw } = served;
    const codec = gw.gateway.options.codec;
    const end = codec.tokenId("<|end|>");
    const { first, second, trajectory } = await playEpisode(gw);
    expect(first.choices[0]!.finish_reason).toBe("tool_calls");
    const call = first.choices[0]!.message.tool_calls![0]!;
    expect(JSON.parse(call.type === "function" ? call.function.arguments : "null")).toEqual(CALL_ARGUMENTS);
    expect(second.choices[0]!.message.content).toBe(ANSWER);
    for (const c of trajectory.calls) {
      const tokens = c.choices[0]!.tokens;
      expect(tokens[tokens.length - 1]).toBe(end);
      expect(tokens).not.toContain(codec.tokenId("<|endoftext|>"));
    }
    // The template writes the call back as the model sampled it, so the second call extends the first.
    expect(trajectory.calls.map((c) => c.join)).toEqual(["start", "extend"]);
    expect(trajectory.trajectory.segments).toHaveLength(1);
    // Token-exact: the new framing after <|end|> is encoded as a full encode sees it (the newline after
    // the rstrip token eaten), so the segment is the full encode of the episode.
    expect(trajectory.trajectory.segments[0]!.tokens).toEqual(codec.encode(episodeTexts(PHI3)[1]!));
  });
});
