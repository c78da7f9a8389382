/**
 * The recording gateway on loopback: a real checkpoint folder (a tiny model trained on one
 * tool-calling episode) served by `openGateway`, driven by the official `openai` client as an agent
 * would. The recorded trajectory must be token-exact — re-scoring its ids with the engine's
 * teacher-forced log-probs gives the sampler's log-probs — calls that extend each other merge into one
 * segment, a history edit splits and is counted, and hostile input gets OpenAI-shaped 4xx while the
 * gateway stays up.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openGateway } from "../../src/cli/commands/gateway.js";
import { GatewayServer } from "../../src/gateway/index.js";
import { ChatTemplate } from "../../src/model/chat-template.js";
import { checkTrajectory, type Trajectory } from "../../src/rollout/index.js";
import { SYSTEM, tokenizer } from "../rollout/helpers.js";
import { ANSWER, CALL_ARGUMENTS, codec, episodeText, QUESTION, TOOL, TOOL_RESULT, trainedEngine } from "./helpers.js";

const KEY = "gateway-test-key";
let dir: string;
let gw: Awaited<ReturnType<typeof openGateway>>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sinkflex-gateway-"));
  const engine = await trainedEngine();
  await engine.save(dir);
  engine.dispose();
  codec.vocab!.save(dir);
  gw = await openGateway(dir, { modelName: "tiny", apiKey: KEY, maxTokens: 64, maxContextTokens: 1024, maxBodyBytes: 32 * 1024 });
}, 120_000);

afterAll(async () => {
  await gw?.close();
  rmSync(dir, { recursive: true, force: true });
});

const auth = { authorization: `Bearer ${KEY}`, "content-type": "application/json" };

async function openSession(body: unknown = {}): Promise<{ id: string; baseURL: string }> {
  const r = await fetch(`${gw.url}/sessions`, { method: "POST", headers: auth, body: JSON.stringify(body) });
  expect(r.status).toBe(201);
  return (await r.json()) as { id: string; baseURL: string };
}

interface SegmentJSON {
  tokens: number[];
  lossMask: number[];
  behaviourLogprobs: number[];
  policyVersions: number[];
  messages: { role: string; content: string }[];
}
interface TrajectoryJSON {
  reward: number | null;
  splits: number;
  splitReports: { call: number; offset: number }[];
  calls: { join: string; continued?: number; choices: { tokens: number[] }[] }[];
  trajectory: { segments: SegmentJSON[]; turns: Trajectory["turns"]; reward: number };
}

async function trajectoryOf(id: string): Promise<TrajectoryJSON> {
  const r = await fetch(`${gw.url}/sessions/${id}/trajectory`, { headers: auth });
  expect(r.status).toBe(200);
  return (await r.json()) as TrajectoryJSON;
}

/**
 * Re-scores every segment with teacher-forced log-probs; returns the largest gap on sampled tokens,
 * relative to the log-prob where it is below -1 (fp32 sums of unlikely tokens).
 */
async function rescoreGap(t: TrajectoryJSON): Promise<{ gap: number; sampled: number }> {
  let gap = 0;
  let sampled = 0;
  for (const seg of t.trajectory.segments) {
    const [lp] = await gw.engine.logprobs([seg.tokens]);
    seg.lossMask.forEach((m, i) => {
      if (m !== 1) return;
      sampled++;
      gap = Math.max(gap, Math.abs(lp![i - 1]! - seg.behaviourLogprobs[i]!) / Math.max(1, Math.abs(seg.behaviourLogprobs[i]!)));
    });
  }
  return { gap, sampled };
}

/** The JSON trajectory back as the rollout's record, for its own consistency check. */
function asTrajectory(t: TrajectoryJSON): Trajectory {
  const tr = t.trajectory as unknown as Trajectory;
  return { ...tr, segments: t.trajectory.segments.map((s) => ({ tokens: s.tokens, lossMask: Uint8Array.from(s.lossMask), behaviourLogprobs: Float32Array.from(s.behaviourLogprobs), policyVersion: 0 })) };
}

const tools = [{ type: "function" as const, function: { name: TOOL.name, description: TOOL.description, parameters: TOOL.parameters } }];

describe("sinkflex gateway with the openai client", () => {
  it("records a multi-turn tool-calling episode as one token-exact segment", async () => {
    const session = await openSession({ task: { question: QUESTION }, metadata: { suite: "stock" } });
    expect(session.baseURL).toBe(`${gw.url}/sessions/${session.id}/v1`);
    const client = new OpenAI({ baseURL: session.baseURL, apiKey: KEY, maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).toEqual(["tiny"]);
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: SYSTEM },
      { role: "user", content: QUESTION },
    ];
    const first = await client.chat.completions.create({ model: "tiny", messages, tools, seed: 1, max_tokens: 48, logprobs: true });
    const call = first.choices[0]!.message.tool_calls?.[0];
    expect(first.choices[0]!.finish_reason).toBe("tool_calls");
    expect(call?.type === "function" ? call.function : undefined).toEqual({ name: "lookup", arguments: CALL_ARGUMENTS });
    messages.push(first.choices[0]!.message as ChatCompletionMessageParam);
    messages.push({ role: "tool", tool_call_id: call!.id, content: TOOL_RESULT });
    const second = await client.chat.completions.create({ model: "tiny", messages, tools, seed: 2, max_tokens: 48 });
    expect(second.choices[0]!.message.content).toBe(ANSWER);
    expect(second.choices[0]!.finish_reason).toBe("stop");
    const rr = await fetch(`${session.baseURL.replace(/\/v1$/, "")}/reward`, { method: "POST", headers: auth, body: JSON.stringify({ reward: 1, info: { correct: true } }) });
    expect(rr.status).toBe(200);

    const t = await trajectoryOf(session.id);
    expect(t.splits).toBe(0);
    expect(t.calls.map((c) => c.join)).toEqual(["start", "extend"]);
    expect(t.trajectory.segments).toHaveLength(1);
    const seg = t.trajectory.segments[0]!;
    // One segment holding exactly the episode's ids: the prompt, the sampled call, the template's
    // framing of the tool result, the sampled answer.
    expect(seg.tokens).toEqual(codec.encode(episodeText()));
    const { gap, sampled } = await rescoreGap(t);
    expect(sampled).toBe(t.calls[0]!.choices[0]!.tokens.length + t.calls[1]!.choices[0]!.tokens.length);
    expect(gap).toBeLessThan(1e-5);
    seg.lossMask.forEach((m, i) => expect(seg.policyVersions[i]).toBe(m === 1 ? gw.engine.policyVersion : -1));
    // The reply's log-probs are the recorded behaviour log-probs (stored as fp32).
    expect(first.choices[0]!.logprobs!.content!.map((x) => Math.fround(x.logprob))).toEqual(seg.behaviourLogprobs.filter((_, i) => seg.lossMask[i] === 1).slice(0, first.choices[0]!.logprobs!.content!.length));
    expect(seg.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant"]);
    expect(seg.messages[4]!.content).toBe(ANSWER);
    expect(t.reward).toBe(1);
    expect(t.trajectory.turns).toHaveLength(2);
    checkTrajectory(asTrajectory(t));
    const del = await fetch(`${gw.url}/sessions/${session.id}`, { method: "DELETE", headers: auth });
    expect(del.status).toBe(200);
    expect((await fetch(`${gw.url}/sessions/${session.id}/trajectory`, { headers: auth })).status).toBe(404);
  }, 60_000);

  it("splits the trajectory where the agent edits history, counts the split, and merges again after it", async () => {
    const session = await openSession();
    const client = new OpenAI({ baseURL: session.baseURL, apiKey: KEY, maxRetries: 0 });
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: SYSTEM },
      { role: "user", content: QUESTION },
    ];
    const first = await client.chat.completions.create({ model: "tiny", messages, tools, seed: 1, max_tokens: 48 });
    const call = first.choices[0]!.message.tool_calls![0]!;
    // The agent rewrites the call's arguments before sending the tool result: the history no longer
    // holds what the policy sampled.
    const edited = { ...call, function: { name: "lookup", arguments: '{"item": "blue chair"}' } };
    messages.push({ role: "assistant", content: null, tool_calls: [edited] });
    messages.push({ role: "tool", tool_call_id: call.id, content: TOOL_RESULT });
    const second = await client.chat.completions.create({ model: "tiny", messages, tools, seed: 2, max_tokens: 16 });
    messages.push(second.choices[0]!.message as ChatCompletionMessageParam);
    messages.push({ role: "user", content: "Thanks, bye." });
    await client.chat.completions.create({ model: "tiny", messages, tools, seed: 3, max_tokens: 4 });

    const t = await trajectoryOf(session.id);
    expect(t.calls.map((c) => c.join)).toEqual(["start", "split", second.choices[0]!.finish_reason === "stop" ? "extend" : t.calls[2]!.join]);
    expect(t.splits).toBeGreaterThanOrEqual(1);
    expect(t.splitReports[0]!.call).toBe(1);
    expect(t.trajectory.segments.length).toBe(1 + t.splits);
    // The first segment keeps the call as sampled; the second starts from the edited prompt.
    expect(codec.decode(t.trajectory.segments[0]!.tokens)).toContain(CALL_ARGUMENTS);
    expect(codec.decode(t.trajectory.segments[1]!.tokens)).toContain("blue chair");
    const { gap } = await rescoreGap(t);
    expect(gap).toBeLessThan(1e-5);
    checkTrajectory(asTrajectory(t));
  }, 60_000);

  it("streams, samples n choices, stops at stop strings, and continues the choice the next call extends", async () => {
    const session = await openSession();
    const client = new OpenAI({ baseURL: session.baseURL, apiKey: KEY, maxRetries: 0 });
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: SYSTEM },
      { role: "user", content: QUESTION },
    ];
    const stream = await client.chat.completions.create({ model: "gpt-4o", messages, tools, seed: 1, max_tokens: 48, stream: true });
    const call = { id: "", name: "", args: "" };
    for await (const chunk of stream) {
      for (const tc of chunk.choices[0]?.delta.tool_calls ?? []) {
        call.id += tc.id ?? "";
        call.name += tc.function?.name ?? "";
        call.args += tc.function?.arguments ?? "";
      }
    }
    expect({ name: call.name, args: call.args }).toEqual({ name: "lookup", args: CALL_ARGUMENTS });
    messages.push({ role: "assistant", content: null, tool_calls: [{ id: call.id, type: "function", function: { name: call.name, arguments: call.args } }] });
    messages.push({ role: "tool", tool_call_id: call.id, content: TOOL_RESULT });
    const two = await client.chat.completions.create({ model: "gpt-4o", messages, tools, seed: 5, max_tokens: 48, n: 2, stop: ["chairs"] });
    expect(two.choices).toHaveLength(2);
    for (const c of two.choices) {
      expect(c.finish_reason).toBe("stop");
      expect(c.message.content).not.toContain("chairs");
    }
    expect(two.choices[0]!.message.content).toBe("There are 9 red");
    messages.push({ role: "assistant", content: two.choices[1]!.message.content });
    messages.push({ role: "user", content: "Thanks, bye." });
    await client.chat.completions.create({ model: "gpt-4o", messages, tools, seed: 6, max_tokens: 4 });

    const t = await trajectoryOf(session.id);
    expect(t.calls.map((c) => c.join)).toEqual(["start", "extend", "extend"]);
    expect(t.splits).toBe(0);
    // The call continued is the first choice whose reply the agent sent back.
    expect(t.calls[1]!.continued).toBe(two.choices.findIndex((c) => c.message.content === two.choices[1]!.message.content));
    const { gap } = await rescoreGap(t);
    expect(gap).toBeLessThan(1e-5);
    checkTrajectory(asTrajectory(t));
  }, 60_000);
});

describe("sinkflex gateway against hostile input", () => {
  const post = (path: string, body: string, headers: Record<string, string> = auth) => fetch(`${gw.url}${path}`, { method: "POST", headers, body });
  async function expectError(r: Response, status: number, message: RegExp, code?: string): Promise<void> {
    expect(r.status).toBe(status);
    const body = (await r.json()) as { error: { message: string; type: string; param: unknown; code: unknown } };
    expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
    expect(body.error.message).toMatch(message);
    if (code !== undefined) expect(body.error.code).toBe(code);
  }

  it("answers each bad request with an OpenAI-shaped 4xx and stays up", async () => {
    const { id, baseURL } = await openSession();
    const chat = `/sessions/${id}/v1/chat/completions`;
    const user = { role: "user", content: "q" };
    await expectError(await post(`/sessions/nope/v1/chat/completions`, JSON.stringify({ messages: [user] })), 404, /no session "nope"/, "session_not_found");
    await expectError(await post(chat, "{not json"), 400, /not a JSON object/);
    await expectError(await post(chat, JSON.stringify({ messages: [{ role: "wizard", content: "x" }] })), 400, /role must be system, developer, user, assistant or tool/);
    await expectError(await post(chat, JSON.stringify({ messages: [user, { role: "tool", tool_call_id: "ghost", content: "5" }] })), 400, /tool_call_id "ghost" answers no tool call/);
    await expectError(await post(chat, JSON.stringify({ messages: [user], max_tokens: 65 })), 400, /max_tokens must be an integer in \[1, 64\]/);
    await expectError(await post(chat, JSON.stringify({ messages: [{ role: "user", content: "chair ".repeat(1100) }], max_tokens: 8 })), 400, /context limit of 1024/, "context_length_exceeded");
    await expectError(await post(chat, JSON.stringify({ messages: [{ role: "user", content: "x".repeat(40 * 1024) }] })), 413, /larger than 32768 bytes/, "body_too_large");
    await expectError(await post(chat, JSON.stringify({ messages: [user], tool_choice: "required" })), 400, /tool_choice "required" is not supported/);
    await expectError(await post(chat, JSON.stringify({ messages: [user] }), { "content-type": "application/json" }), 401, /API key/, "invalid_api_key");
    await expectError(await post(`/sessions/${id}/reward`, JSON.stringify({ reward: "high" })), 400, /reward must be a finite number/);
    await expectError(await fetch(`${gw.url}/sessions/${id}/v2/other`, { headers: auth }), 404, /no route GET/, "not_found");
    // The openai client reads the error shape.
    const client = new OpenAI({ baseURL, apiKey: KEY, maxRetries: 0 });
    const err = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "q" }], max_tokens: 1000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
    // Still up: a good call is answered, and none of the refused calls was recorded.
    const ok = await client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "q" }], max_tokens: 2, seed: 1 });
    expect(ok.choices).toHaveLength(1);
    expect((await trajectoryOf(id)).calls).toHaveLength(1);
  }, 60_000);

  it("limits open sessions and refuses to listen beyond loopback without a key", async () => {
    const small = new GatewayServer({ sampler: gw.engine, codec, template: ChatTemplate.fromTokenizer(tokenizer), modelName: "tiny", maxContextTokens: 256, maxSessions: 1 });
    const url = await small.listen();
    try {
      expect((await fetch(`${url}/sessions`, { method: "POST" })).status).toBe(201);
      await expectError(await fetch(`${url}/sessions`, { method: "POST" }), 429, /holds 1 open sessions/, "too_many_sessions");
    } finally {
      await small.close();
    }
    await expect(new GatewayServer({ sampler: gw.engine, codec, template: ChatTemplate.fromTokenizer(tokenizer), modelName: "tiny", maxContextTokens: 256 }).listen(0, "0.0.0.0")).rejects.toThrow(/without an API key/);
  });
});

describe("examples/openai-agent", () => {
  it("runs against the gateway on loopback and leaves a rewarded, token-exact trajectory", async () => {
    const tsx = resolve("node_modules/.bin/tsx");
    const open = gw.gateway.sessionCount;
    const { stdout } = await promisify(execFile)(tsx, ["examples/openai-agent/agent.ts"], { env: { ...process.env, GATEWAY_URL: gw.url, SINKFLEX_API_KEY: KEY }, timeout: 60_000 });
    const summary = JSON.parse(stdout.trim().split("\n").pop()!) as { answer: string; reward: number; calls: number; splits: number; segments: { tokens: number; sampled: number }[] };
    expect(summary).toMatchObject({ answer: ANSWER, reward: 1, calls: 2, splits: 0 });
    expect(summary.segments).toEqual([{ tokens: codec.encode(episodeText()).length, sampled: expect.any(Number) as number }]);
    expect(gw.gateway.sessionCount).toBe(open); // the example deleted its session
  }, 90_000);
});
