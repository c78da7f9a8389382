/**
 * `sinkflex serve` on loopback: a real checkpoint folder (tiny random Qwen2-shaped model, trimmed Qwen3
 * vocabulary, the real tokenizer files) served over HTTP, used by the official `openai` client and by
 * the rollout's OpenAI-compatible policy client.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openServer } from "../../src/cli/commands/serve.js";
import { loadEngine } from "../../src/engine/embedded.js";
import { qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import { Rollout } from "../../src/rollout/agent-loop.js";
import { OpenAIPolicy } from "../../src/rollout/openai-policy.js";
import { checkTrajectory } from "../../src/rollout/trajectory.js";
import { groupTask, stockCodec, template, tinyEngine } from "../rollout/helpers.js";

const codec = stockCodec();
let dir: string;
let url: string;
let close: () => Promise<void>;
const KEY = "test-key";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sinkflex-serve-"));
  const engine = tinyEngine(codec, 5);
  engine.tokenizerDir = qwen3TokenizerDir();
  await engine.save(dir);
  engine.dispose();
  codec.vocab!.save(dir);
  ({ url, close } = await openServer(dir, { modelName: "tiny", apiKey: KEY, maxTokens: 64, maxContextTokens: 2048, maxBodyBytes: 64 * 1024 }));
});

afterAll(async () => {
  await close?.();
  rmSync(dir, { recursive: true, force: true });
});

const tools = [{ type: "function" as const, function: { name: "lookup", description: "Stock of an item.", parameters: { type: "object", properties: { item: { type: "string" } } } } }];

describe("sinkflex serve with the openai client", () => {
  const client = () => new OpenAI({ baseURL: url, apiKey: KEY, maxRetries: 0 });

  it("lists the model", async () => {
    const models = await client().models.list();
    expect(models.data.map((m) => m.id)).toEqual(["tiny"]);
  });

  it("answers chat completions with tools, n choices, log-probs and usage", async () => {
    const r = await client().chat.completions.create({
      model: "tiny",
      messages: [
        { role: "system", content: "You are a warehouse agent." },
        { role: "user", content: "How many red chairs?" },
      ],
      tools,
      max_tokens: 8,
      n: 2,
      seed: 3,
      logprobs: true,
    });
    expect(r.object).toBe("chat.completion");
    expect(r.choices).toHaveLength(2);
    for (const c of r.choices) {
      expect(c.message.role).toBe("assistant");
      expect(["stop", "length", "tool_calls"]).toContain(c.finish_reason);
      expect(c.logprobs!.content!.length).toBeGreaterThan(0);
      expect(c.logprobs!.content!.every((t) => t.logprob <= 0)).toBe(true);
    }
    expect(r.usage!.prompt_tokens).toBeGreaterThan(50);
    expect(r.usage!.total_tokens).toBe(r.usage!.prompt_tokens + r.usage!.completion_tokens);
    // Without max_tokens the reply may use the server's cap (64 here).
    const free = await client().chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], seed: 1, temperature: 0 });
    expect(free.usage!.completion_tokens).toBeGreaterThan(0);
    expect(free.usage!.completion_tokens).toBeLessThanOrEqual(64);
  });

  it("streams chat and completion chunks as server-sent events", async () => {
    const stream = await client().chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 6, stream: true, seed: 1 });
    let chunks = 0;
    let finish: string | null = null;
    for await (const chunk of stream) {
      chunks++;
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(chunks).toBeGreaterThan(2);
    expect(["stop", "length", "tool_calls"]).toContain(finish);
    const cstream = await client().completions.create({ model: "tiny", prompt: "Stock report:", max_tokens: 5, stream: true, seed: 2 });
    let text = "";
    for await (const chunk of cstream) text += chunk.choices[0]?.text ?? "";
    expect(text.length).toBeGreaterThan(0);
  });

  it("returns token ids and log-probs for a token-id prompt that equal the model's teacher-forced log-probs", async () => {
    const prompt = codec.encode("<|im_start|>user\nHow many red chairs?<|im_end|>\n<|im_start|>assistant\n");
    const res = await fetch(`${url}/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: "tiny", prompt, max_tokens: 10, logprobs: 0, return_token_ids: true, return_tokens_as_token_ids: true, seed: 9 }),
    });
    const body = (await res.json()) as { choices: { token_ids: number[]; logprobs: { tokens: string[]; token_logprobs: number[] } }[] };
    const c = body.choices[0]!;
    expect(c.logprobs.tokens).toEqual(c.token_ids.map((id) => `token_id:${id}`));
    const engine = loadEngine(dir);
    const [teacher] = await engine.logprobs([[...prompt, ...c.token_ids]]);
    engine.dispose();
    c.token_ids.forEach((_, i) => expect(Math.abs(c.logprobs.token_logprobs[i]! - teacher![prompt.length - 1 + i]!)).toBeLessThan(1e-4));
  });

  it("answers bad requests in the OpenAI error shape", async () => {
    const bad = await client()
      .chat.completions.create({ model: "tiny", messages: [], max_tokens: 4 })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect((bad as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(/messages must be a non-empty array/);
    const wrongModel = await client()
      .chat.completions.create({ model: "gpt-9", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e);
    expect(wrongModel).toBeInstanceOf(OpenAI.NotFoundError);
    const tooLong = await client()
      .completions.create({ model: "tiny", prompt: "x", max_tokens: 65 })
      .catch((e: unknown) => e);
    expect((tooLong as { status: number }).status).toBe(400);
    const noKey = await new OpenAI({ baseURL: url, apiKey: "wrong", maxRetries: 0 }).models.list().catch((e: unknown) => e);
    expect(noKey).toBeInstanceOf(OpenAI.AuthenticationError);
    const big = await fetch(`${url}/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: "tiny", prompt: "x".repeat(100_000) }),
    });
    expect(big.status).toBe(413);
    expect(((await big.json()) as { error: { message: string } }).error.message).toMatch(/larger than 65536 bytes/);
  });
});

describe("OpenAIPolicy against sinkflex serve", () => {
  it("plays rollouts whose recorded log-probs equal the model's teacher-forced log-probs", async () => {
    const policy = new OpenAIPolicy({ baseURL: url, model: "tiny", apiKey: KEY });
    const rollout = new Rollout(policy, codec, template, { maxTokensPerTurn: 5, turnLimit: "close", maxTurns: 3, seed: 4 });
    const trajs = await rollout.runGroup(groupTask(2, 2, 3));
    const engine = loadEngine(dir);
    for (const t of trajs) {
      expect(t.endReason).toBe("terminated");
      checkTrajectory(t);
      const seg = t.segments[0]!;
      const [teacher] = await engine.logprobs([seg.tokens]);
      for (let i = 1; i < seg.tokens.length; i++) if (seg.lossMask[i]) expect(Math.abs(seg.behaviourLogprobs[i]! - teacher![i - 1]!)).toBeLessThan(1e-4);
    }
    engine.dispose();
    expect(policy.stats.requests).toBe(6);
  });

  it("says clearly when the server cannot be reached", async () => {
    const policy = new OpenAIPolicy({ baseURL: "http://127.0.0.1:9/v1", model: "tiny", timeoutMs: 2000 });
    await expect(policy.complete([1, 2], { maxTokens: 1 })).rejects.toThrow(/cannot reach the policy server/);
  });
});

describe("sinkflex serve (the command)", () => {
  it("serves a checkpoint folder from the command line, with the API key from the environment", async () => {
    const child = spawn(process.execPath, ["bin/sinkflex.mjs", "serve", dir, "--port", "0", "--model-name", "cli"], {
      env: { ...process.env, SINKFLEX_API_KEY: "k2" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    try {
      const base = await new Promise<string>((resolve, reject) => {
        let out = "";
        child.stdout.on("data", (d: Buffer) => {
          out += d.toString();
          const m = /at (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(out);
          if (m) resolve(m[1]!);
        });
        child.stderr.on("data", (d: Buffer) => (out += d.toString()));
        child.on("exit", (code) => reject(new Error(`serve exited with ${code}: ${out}`)));
      });
      const models = await new OpenAI({ baseURL: base, apiKey: "k2", maxRetries: 0 }).models.list();
      expect(models.data[0]!.id).toBe("cli");
      const denied = await fetch(`${base}/models`);
      expect(denied.status).toBe(401);
    } finally {
      child.kill("SIGTERM");
    }
  });

  it("says what to do when the folder is not a checkpoint", async () => {
    await expect(openServer(join(dir, "missing"))).rejects.toThrow(/no checkpoint folder/);
  });
});
