// The LLM user simulator against a real OpenAI-compatible HTTP server on 127.0.0.1 (written here):
// the request carries the model, the key and the instruction with roles flipped; ###STOP### ends
// the episode; server errors come back as clear errors.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentTurn, ChatObservation } from "../../../src/core/index.js";
import { make } from "../../../src/gym/registry.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { LlmUser, TAU_RETAIL_ID } from "../../../src/envs/tau/index.js";
import { loadTasks, taskFile } from "../../../src/envs/tau/tasks.js";

registerBundledEnvs();

interface Seen {
  url: string;
  auth: string | undefined;
  body: any;
}

let server: Server;
let baseUrl = "";
const seen: Seen[] = [];
// The customer's lines, chosen by how many agent messages the conversation holds.
const script = ["Hi, I want to return two items from an order.", "My name is Omar Anderson and my zip code is 19031.", "Yes, please.", "###STOP###"];

beforeAll(async () => {
  server = createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      const body = JSON.parse(raw);
      seen.push({ url: req.url ?? "", auth: req.headers.authorization, body });
      if (body.model === "broken") {
        res.writeHead(500, { "content-type": "application/json" }).end('{"error":"model exploded"}');
        return;
      }
      const agentTurns = body.messages.filter((m: any) => m.role === "user").length;
      const content = script[Math.min(agentTurns - 1, script.length - 1)];
      res.writeHead(200, { "content-type": "application/json" }).end(
        JSON.stringify({ id: "x", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }] }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe("LLM user", () => {
  it("plays the customer through /chat/completions until ###STOP###", async () => {
    seen.length = 0;
    const env = await make<ChatObservation, AgentTurn>(TAU_RETAIL_ID, {
      taskSet: "train",
      user: "llm",
      userLlm: { baseUrl, model: "user-sim", apiKey: "secret-key" },
    });
    const [obs] = await env.reset({ seed: 1, options: { taskIndex: 0 } });
    expect(obs.messages[0]!.role).toBe("system");
    expect(obs.messages[1]).toEqual({ role: "user", content: script[0] });
    const [o1, , t1] = await env.step({ content: "Please give me your name and zip code.", toolCalls: [] });
    expect(o1.messages[0]!.content).toBe(script[1]);
    expect(t1).toBe(false);
    await env.step({ content: "I will return the items. Confirm?", toolCalls: [] });
    const [o3, reward, terminated, , info] = await env.step({ content: "Done.", toolCalls: [] });
    expect(o3.messages[0]!.content).toBe("###STOP###");
    expect(terminated).toBe(true);
    expect(info.finishReason).toBe("user_done");
    expect(reward).toBe(0); // nothing was returned: the database differs from the gold replay's
    expect(seen).toHaveLength(4);
    expect(seen[0]!.url).toBe("/v1/chat/completions");
    expect(seen[0]!.auth).toBe("Bearer secret-key");
    expect(seen[0]!.body.model).toBe("user-sim");
    const instruction = loadTasks(taskFile("retail", "train"))[0]!.instruction;
    expect(seen[0]!.body.messages[0]).toEqual({ role: "system", content: expect.stringContaining(instruction) });
    // The agent's words are the model's "user" turns; its own earlier lines are "assistant" turns.
    const last = seen[3]!.body.messages;
    expect(last.map((m: any) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]);
    expect(last[3].content).toBe("Please give me your name and zip code.");
    expect(last[2].content).toBe(script[0]);
    await env.close();
  });

  it("reads its endpoint from the environment, and reports server errors and missing settings", async () => {
    const task = loadTasks(taskFile("retail", "train"))[0]!;
    const saved = { ...process.env };
    try {
      process.env.SINKFLEX_USER_LLM_BASE_URL = baseUrl;
      process.env.SINKFLEX_USER_LLM_MODEL = "broken";
      delete process.env.SINKFLEX_USER_LLM_API_KEY;
      const user = new LlmUser(task);
      await expect(user.start()).rejects.toThrow(/HTTP 500.*model exploded/);
      expect(seen.at(-1)!.auth).toBeUndefined();
      delete process.env.SINKFLEX_USER_LLM_BASE_URL;
      expect(() => new LlmUser(task)).toThrow(/SINKFLEX_USER_LLM_BASE_URL/);
      const unreachable = new LlmUser(task, { baseUrl: "http://127.0.0.1:9/v1", model: "m", timeoutMs: 2000 });
      await expect(unreachable.start()).rejects.toThrow(/did not answer/);
    } finally {
      process.env = saved;
    }
  });
});
