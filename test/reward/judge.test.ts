import type { Server } from "node:http";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { LlmJudge, parseJudgeAnswer } from "../../src/reward/judge.js";
import { Rubric, verifiableReward } from "../../src/reward/rubric.js";
import type { RewardInput } from "../../src/reward/rubric.js";
import { startEndpoint } from "./judge-endpoint.js";

const input = (text: string): RewardInput => ({
  envReward: 1,
  envInfo: {},
  messages: [{ role: "user", content: "refund my order" }, { role: "assistant", content: text }],
  task: "refund",
});

let servers: Server[] = [];
afterEach(() => {
  servers.forEach((s) => s.close());
  servers = [];
});

describe("parseJudgeAnswer", () => {
  it("accepts only a JSON object with a score in [0,1] and a reason", () => {
    expect(parseJudgeAnswer(' {"score": 0.5, "reason": "ok"} ')).toEqual({ score: 0.5, reason: "ok" });
    expect(() => parseJudgeAnswer("Score: 0.5")).toThrow(/not a JSON object/);
    expect(() => parseJudgeAnswer('{"score": 2, "reason": "x"}')).toThrow(/\[0, 1\]/);
    expect(() => parseJudgeAnswer('{"score": "1", "reason": "x"}')).toThrow(/number/);
    expect(() => parseJudgeAnswer('{"score": 1}')).toThrow(/reason/);
  });
});

describe("LlmJudge", () => {
  it("scores through the endpoint, caches, and persists the cache", async () => {
    const ep = await startEndpoint((body) => ({ content: JSON.stringify({ score: body.messages[1].content.includes("polite") ? 1 : 0.2, reason: "r" }) }));
    servers.push(ep.server);
    const cacheDir = mkdtempSync(join(tmpdir(), "judge-"));
    const cacheFile = join(cacheDir, "cache.jsonl");
    const judge = new LlmJudge({ baseUrl: ep.baseUrl, model: "m", rubric: "Be polite.", cacheFile });
    expect((await judge.score(input("a polite answer"))).score).toBe(1);
    expect((await judge.score(input("rude"))).score).toBe(0.2);
    expect((await judge.score(input("rude"))).evidence).toMatchObject({ cached: true });
    expect(ep.calls()).toBe(2);
    expect(readFileSync(cacheFile, "utf8").trim().split("\n")).toHaveLength(2);
    const again = new LlmJudge({ baseUrl: ep.baseUrl, model: "m", rubric: "Be polite.", cacheFile });
    await again.score(input("rude"));
    expect(ep.calls()).toBe(2);
    rmSync(cacheDir, { recursive: true, force: true });
  });

  it("retries server errors and unparseable answers, then succeeds", async () => {
    const ep = await startEndpoint((_b, n) => (n === 0 ? { status: 503 } : n === 1 ? { content: "I think 0.7" } : { content: '{"score":0.7,"reason":"fine"}' }));
    servers.push(ep.server);
    const judge = new LlmJudge({ baseUrl: ep.baseUrl, model: "m", rubric: "r", retries: 2 });
    expect((await judge.score(input("x"))).score).toBe(0.7);
    expect(ep.calls()).toBe(3);
  });

  it("fails loudly after the retries, and does not retry a 4xx", async () => {
    const bad = await startEndpoint(() => ({ content: "nope" }));
    const denied = await startEndpoint(() => ({ status: 401 }));
    servers.push(bad.server, denied.server);
    await expect(new LlmJudge({ baseUrl: bad.baseUrl, model: "m", rubric: "r", retries: 1 }).score(input("x"))).rejects.toThrow(/after 2 attempt/);
    await expect(new LlmJudge({ baseUrl: denied.baseUrl, model: "m", rubric: "r", retries: 3 }).score(input("x"))).rejects.toThrow(/HTTP 401/);
    expect(denied.calls()).toBe(1);
  });

  it("times out a slow endpoint", async () => {
    const slow = await startEndpoint(() => ({ content: '{"score":1,"reason":"x"}', delayMs: 2000 }));
    servers.push(slow.server);
    const judge = new LlmJudge({ baseUrl: slow.baseUrl, model: "m", rubric: "r", timeoutMs: 100, retries: 0 });
    await expect(judge.score(input("x"))).rejects.toThrow(/failed after 1 attempt/);
  });

  it("keeps to its concurrency limit", async () => {
    const ep = await startEndpoint(() => ({ content: '{"score":1,"reason":"x"}', delayMs: 30 }));
    servers.push(ep.server);
    const judge = new LlmJudge({ baseUrl: ep.baseUrl, model: "m", rubric: "r", concurrency: 2 });
    await Promise.all(Array.from({ length: 8 }, (_, i) => judge.score(input(`answer ${i}`))));
    expect(ep.calls()).toBe(8);
    expect(ep.maxInFlight()).toBeLessThanOrEqual(2);
  });
});

describe("Rubric", () => {
  it("weights components, reports each, and flags a failing one instead of scoring it 0", async () => {
    const ep = await startEndpoint(() => ({ content: '{"score":0.5,"reason":"x"}' }));
    servers.push(ep.server);
    const rubric = new Rubric([verifiableReward(3), new LlmJudge({ baseUrl: ep.baseUrl, model: "m", rubric: "r", weight: 1 })]);
    const ok = await rubric.score(input("x"));
    expect(ok.reward).toBeCloseTo(0.875);
    expect(ok.components.verifier!.score).toBe(1);
    expect(ok.components.judge!.score).toBe(0.5);
    expect(ok.error).toBeUndefined();
    const broken = await rubric.score({ ...input("y"), envInfo: { rewardError: "db unreadable" } });
    expect(broken.error).toMatch(/verifier: the verifier failed: db unreadable/);
    expect(broken.components.verifier!.error).toBeDefined();
  });
  it("rejects invalid weights", () => {
    expect(() => new Rubric([])).toThrow(/at least one/);
    expect(() => new Rubric([verifiableReward(-1)])).toThrow(/weights must be/);
    expect(() => new Rubric([verifiableReward(0)])).toThrow(/all weights are 0/);
  });
});
