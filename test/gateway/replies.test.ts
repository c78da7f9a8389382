/**
 * Replies and tool calls the gateway must answer in the OpenAI shape rather than fail on: a reply that is
 * only the end-of-turn token (no text to decode), a tool call the model wrote without a function name
 * (not returned, counted as malformed), and a call of a tool the session's env does not have, whatever
 * characters its name has (the env answers with an error observation, as in the agent loop). The policy is a tiny model trained on
 * these replies (real training on the embedded engine); the env is a real ToolEnv; everything runs on
 * loopback through the `openai` client.
 */
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatMessage } from "../../src/core/index.js";
import type { EmbeddedEngine } from "../../src/engine/index.js";
import { EnvTools, GatewayServer } from "../../src/gateway/index.js";
import { makeEnv, QUESTIONS, SYSTEM, template } from "../rollout/helpers.js";
import { codec, trainedOn } from "./helpers.js";

const KEY = "replies-test-key";
/** The model answers this question with the end-of-turn token alone. */
const SILENT = QUESTIONS[1]!;
/** And this one with a tool call whose function name is empty. */
const NAMELESS = QUESTIONS[2]!;
const NAMELESS_CALL = '<tool_call>\n{"name": "", "arguments": {"item": "green table"}}\n</tool_call>';

const opening = (question: string): ChatMessage[] => [
  { role: "system", content: SYSTEM },
  { role: "user", content: question },
];
const prompt = (question: string) => template.render(opening(question), { addGenerationPrompt: true });

let engine: EmbeddedEngine;
let gw: GatewayServer;

beforeAll(async () => {
  engine = await trainedOn([`${prompt(SILENT)}<|im_end|>`, `${prompt(NAMELESS)}${NAMELESS_CALL}<|im_end|>`], 200);
  gw = new GatewayServer({ sampler: engine, codec, template, modelName: "tiny", apiKey: KEY, maxContextTokens: 1024, maxTokens: 64 });
  await gw.listen(0, "127.0.0.1");
}, 300_000);

afterAll(async () => {
  await gw?.close();
  engine?.dispose();
});

function client(baseURL: string): OpenAI {
  return new OpenAI({ baseURL, apiKey: KEY, maxRetries: 0 });
}

describe("gateway replies", () => {
  it("answers a reply that is only the end-of-turn token with empty content, not a 500", async () => {
    const { id, baseURL } = gw.open();
    const r = await client(baseURL).chat.completions.create({ model: "tiny", messages: [{ role: "system", content: SYSTEM }, { role: "user", content: SILENT }], temperature: 0 });
    expect(r.choices[0]!.message.content).toBe("");
    expect(r.choices[0]!.finish_reason).toBe("stop");
    expect(r.choices[0]!.message.tool_calls).toBeUndefined();
    const view = gw.session(id)!;
    expect(view.refusals).toEqual([]);
    // The end-of-turn token is the one sampled token, recorded with its log-prob.
    const seg = view.recorder.trajectory().trajectory.segments[0]!;
    expect([...seg.lossMask].filter((m) => m === 1)).toHaveLength(1);
    expect(seg.tokens[seg.tokens.length - 1]).toBe(codec.tokenId("<|im_end|>"));
    gw.closeSession(id);
  }, 60_000);

  it("returns no tool call without a function name and counts it as malformed", async () => {
    const { id, baseURL } = gw.open();
    const r = await client(baseURL).chat.completions.create({
      model: "tiny",
      messages: [{ role: "system", content: SYSTEM }, { role: "user", content: NAMELESS }],
      temperature: 0,
    });
    const view = gw.session(id)!;
    // What was sampled is the nameless call (the model learned it), and it is not sent back.
    expect(view.recorder.calls[0]!.choices[0]!.text).toBe(NAMELESS_CALL);
    expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(r.choices[0]!.finish_reason).toBe("stop");
    expect(view.recorder.calls[0]!.choices[0]!.malformedCalls).toBe(1);
    gw.closeSession(id);
  }, 60_000);

  it("hands a call of a tool the env does not have to the env, which answers with an error (not a 404)", async () => {
    const env = makeEnv({ question: QUESTIONS[0]!, userTurns: 1 });
    const tools = new EnvTools(env, await env.reset({ seed: 1, options: { taskIndex: 0 } }));
    const { id } = gw.open({ env: tools });
    const call = (name: string, args: unknown) =>
      fetch(`${gw.url}/sessions/${id}/tools/${name}`, { method: "POST", headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" }, body: JSON.stringify(args) });
    const r = await call("weigh", { item: "red chair" });
    expect(r.status).toBe(200);
    const body = (await r.json()) as { content: string; isError: boolean; terminated: boolean };
    expect(body.isError).toBe(true);
    expect(body.content).toMatch(/unknown tool "weigh"\. Available tools: lookup/);
    expect(body.terminated).toBe(false);
    // A name no tool could have (the model's own text, sent URL-encoded) goes to the env as well.
    const odd = await call(encodeURIComponent('<tool_call>\n{"name": "lookup'), { item: "red chair" });
    expect(odd.status).toBe(200);
    expect(((await odd.json()) as { isError: boolean; content: string })).toMatchObject({ isError: true, content: expect.stringMatching(/unknown tool/) });
    expect(gw.session(id)!.refusals).toEqual([]);
    // The episode goes on: the env's own tool still answers.
    const ok = (await (await call("lookup", { item: "red chair" })).json()) as { content: string; isError: boolean };
    expect(ok.isError).toBe(false);
    expect(ok.content).toContain("red chair");
    gw.closeSession(id);
    await env.close();
  }, 60_000);
});
