/**
 * Training agents of the user's own through the pipeline (`suites[].agent`): each arith example in
 * examples/arith-agent (the `openai` package, the AI SDK, the OpenAI Agents SDK) is trained for two GRPO
 * steps on a tiny SFT'd policy, its episodes played through the in-process gateway on loopback. Every
 * recorded trajectory must be token-exact — re-scoring its tokens with the checkpoint of the policy
 * version that sampled them gives the sampler's log-probs within 1e-5 — and the split/merge counts are
 * reported. A program agent (the command route) and agents that crash, hang or get refused run too:
 * their episodes are recorded as failed with the reason (an agent's own error apart from a connection
 * error to the gateway), and the run goes on.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, describe, expect, it } from "vitest";
import { loadEngine, type EmbeddedEngine } from "../../src/engine/index.js";
import type { AgentContext, AgentFunction } from "../../src/gateway/index.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { train } from "../../src/pipeline/train.js";
import { aiSdkArithAgent } from "../../examples/arith-agent/ai-sdk.js";
import { openaiAgentsArithAgent } from "../../examples/arith-agent/openai-agents.js";
import { openaiArithAgent } from "../../examples/arith-agent/openai.js";

const scratch = mkdtempSync(join(tmpdir(), "agent-train-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

type Agent = { run: AgentFunction } | { command: string };

function agentConfig(name: string, agent: Agent, grpo: Record<string, unknown> = {}) {
  return validateConfig({
    name,
    runsDir: scratch,
    seed: 1,
    suites: [{ env: "sinkflex/arith-v0", options: { count: 40, difficulty: 1 }, agent: { ...agent, timeoutMs: 60_000 } }],
    model: { init: { hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64, maxPositions: 1024 } },
    sft: { expertEpisodes: 16, epochs: 2, batchSize: 4, lr: 3e-3 },
    grpo: { steps: 2, batchTasks: 1, groupSize: 3, lr: 1e-3, epochs: 1, klCoef: 0, maxTurns: 4, maxTokensPerTurn: 40, maxContextTokens: 900, concurrency: 8, ...grpo },
    checkpointEvery: 1,
    keepCheckpoints: 20,
  });
}

interface Recorded {
  calls: { join: string }[];
  splits: number;
  trajectory: { segments: { tokens: number[]; lossMask: number[]; behaviourLogprobs: number[]; policyVersions: number[] }[] };
}

/** The agent, then its session's recording (read before the trainer closes the session). */
function recording(agent: (ctx: AgentContext) => Promise<void>, into: Recorded[]): AgentFunction {
  return async (ctx) => {
    await agent(ctx);
    const r = await fetch(`${ctx.task.sessionURL}/trajectory`, { headers: { authorization: `Bearer ${ctx.apiKey}` } });
    into.push((await r.json()) as Recorded);
  };
}

function grpoMetrics(runDir: string): Record<string, any>[] {
  return readFileSync(join(runDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l)).filter((r) => r.stage === "grpo");
}

function trajectories(runDir: string): Record<string, any>[] {
  const dir = join(runDir, "trajectories");
  return readdirSync(dir).filter((f) => f.startsWith("grpo-")).flatMap((f) => readFileSync(join(dir, f), "utf8").trim().split("\n").map((l) => JSON.parse(l)));
}

/** Largest gap between re-scored and recorded log-probs on sampled tokens, with the checkpoint of each token's policy version. */
async function rescoreGap(runDir: string, recorded: Recorded[]): Promise<{ gap: number; sampled: number }> {
  const root = join(runDir, "checkpoints");
  const engines = new Map<number, EmbeddedEngine>();
  for (const name of readdirSync(root).filter((n) => !n.startsWith(".") && n !== "latest")) {
    const e = loadEngine(join(root, name));
    if (engines.has(e.policyVersion)) e.dispose();
    else engines.set(e.policyVersion, e);
  }
  let gap = 0;
  let sampled = 0;
  try {
    for (const t of recorded) {
      for (const seg of t.trajectory.segments) {
        const version = seg.policyVersions.find((v) => v >= 0);
        if (version === undefined) continue;
        const engine = engines.get(version);
        if (!engine) throw new Error(`no checkpoint of policy version ${version} (have ${[...engines.keys()].join(", ")})`);
        const [lp] = await engine.logprobs([seg.tokens]);
        seg.lossMask.forEach((m, i) => {
          if (m !== 1) return;
          sampled++;
          gap = Math.max(gap, Math.abs(lp![i - 1]! - seg.behaviourLogprobs[i]!) / Math.max(1, Math.abs(seg.behaviourLogprobs[i]!)));
        });
      }
    }
  } finally {
    for (const e of engines.values()) e.dispose();
  }
  return { gap, sampled };
}

const examples: [string, (ctx: AgentContext) => Promise<void>][] = [
  ["openai", openaiArithAgent],
  ["ai-sdk", aiSdkArithAgent],
  ["openai-agents", openaiAgentsArithAgent],
];

describe("training an external agent through the gateway (suites[].agent)", () => {
  for (const [name, agent] of examples) {
    it(`trains examples/arith-agent/${name}.ts for two GRPO steps on token-exact trajectories`, async () => {
      const recorded: Recorded[] = [];
      const run = await train(agentConfig(`agent-${name}`, { run: recording(agent, recorded) }), { quiet: true, skipEval: true });
      const grpo = grpoMetrics(run.runDir);
      expect(grpo.map((r) => r.step)).toEqual([1, 2]);
      const counts = grpo.map((r) => r.agents);
      const failures = trajectories(run.runDir).filter((t) => t.error).map((t) => t.error as string);
      console.log(`${name}: ${JSON.stringify({ steps: counts, failures: failures.slice(0, 3) })}`);
      expect(failures).toEqual([]);
      expect(counts.reduce((a, c) => a + c.episodes, 0)).toBe(6);
      expect(recorded).toHaveLength(6);
      expect(counts.reduce((a, c) => a + c.calls, 0)).toBe(recorded.reduce((a, t) => a + t.calls.length, 0));
      expect(counts.reduce((a, c) => a + c.splits, 0)).toBe(recorded.reduce((a, t) => a + t.splits, 0));
      // Sampled tokens are masked 1 and carry a policy version; nothing else does.
      for (const t of recorded) for (const s of t.trajectory.segments) s.lossMask.forEach((m, i) => expect(m === 1).toBe(s.policyVersions[i]! >= 0));
      const { gap, sampled } = await rescoreGap(run.runDir, recorded);
      console.log(`${name}: ${sampled} sampled tokens re-scored, largest gap ${gap.toExponential(2)}`);
      expect(sampled).toBeGreaterThan(0);
      expect(gap).toBeLessThan(1e-5);
    }, 240_000);
  }

  it("runs an agent program per episode and records crashes, timeouts and refused requests as failed episodes", async () => {
    const program = join(scratch, "agent.mjs");
    writeFileSync(
      program,
      `const task = JSON.parse(process.env.SINKFLEX_TASK);
const mode = ["ok", "crash", "refused"][task.episode];
if (mode === "crash") { console.error("agent blew up"); process.exit(3); }
const body = { model: "policy", messages: task.messages, tools: task.tools, ...(mode === "refused" ? { max_tokens: 100000 } : {}) };
const r = await fetch(process.env.OPENAI_BASE_URL + "/chat/completions", { method: "POST", headers: { authorization: "Bearer " + process.env.OPENAI_API_KEY, "content-type": "application/json" }, body: JSON.stringify(body) });
await r.json();
`,
    );
    const cfg = agentConfig("agent-program", { command: `node ${program}` }, { steps: 1 });
    const run = await train(cfg, { quiet: true, skipEval: true });
    const records = trajectories(run.runDir).sort((a, b) => a.index - b.index);
    expect(records.map((t) => t.endReason)).toEqual(["terminated", "error", "error"]);
    expect(records[1]!.error).toMatch(/agent: the agent exited with code 3: agent blew up/);
    expect(records[2]!.error).toMatch(/agent: the gateway refused 1 of the agent's requests; the first: 400 POST \/v1\/chat\/completions: max_tokens must be/);
    expect(grpoMetrics(run.runDir)[0]!.agents).toMatchObject({ episodes: 3, failed: 2, calls: 1 });

    // A hung agent is killed at its time limit; an agent that never posts a reward fails where the suite's reward is the agent's.
    const hung = validateConfig({ ...cfg, name: "agent-hung", suites: [{ ...cfg.suites[0]!, agent: { command: "sleep 30", timeoutMs: 500, reward: "verifier" } }] });
    const hungRun = await train(hung, { quiet: true, skipEval: true });
    expect(trajectories(hungRun.runDir).map((t) => t.error)).toEqual(Array(3).fill("agent: the agent did not finish within 500 ms (agent.timeoutMs) and was killed"));
    const silent = validateConfig({ ...cfg, name: "agent-silent", suites: [{ ...cfg.suites[0]!, agent: { run: openaiArithAgent, timeoutMs: 60_000, reward: "agent" } }] });
    const silentRun = await train(silent, { quiet: true, skipEval: true });
    expect(trajectories(silentRun.runDir).every((t) => /never posted a reward/.test(t.error))).toBe(true);
  }, 240_000);

  it("records an agent's own error with its causes apart from a connection error to the gateway, for a function and for a program", async () => {
    // A port nothing listens on: the gateway as an agent that lost it sees it.
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", () => r()));
    const dead = `http://127.0.0.1:${(closed.address() as AddressInfo).port}/v1`;
    await new Promise<void>((r) => closed.close(() => r()));

    const fn: AgentFunction = async (ctx) => {
      if (ctx.task.episode === 0) throw new Error("bad plan", { cause: new Error("the plan had no steps") });
      await new OpenAI({ baseURL: dead, apiKey: ctx.apiKey, maxRetries: 0 }).chat.completions.create({ model: "policy", messages: [{ role: "user", content: "hi" }] });
    };
    const fnRun = await train(agentConfig("agent-errors-fn", { run: fn }, { steps: 1, groupSize: 2 }), { quiet: true, skipEval: true });
    const fnErrors = trajectories(fnRun.runDir).sort((a, b) => a.index - b.index).map((t) => t.error as string);
    expect(fnErrors[0]).toBe("agent: the agent threw: bad plan; cause: the plan had no steps");
    expect(fnErrors[1]).toMatch(/^agent: the agent could not reach the gateway \(a connection error .*\): APIConnectionError: Connection error\.; cause: TypeError: fetch failed; cause: .*ECONNREFUSED/);

    const program = join(scratch, "agent-errors.mjs");
    writeFileSync(
      program,
      `const task = JSON.parse(process.env.SINKFLEX_TASK);
if (task.episode === 0) throw new Error("bad plan", { cause: new Error("the plan had no steps") });
await fetch(${JSON.stringify(`${dead}/chat/completions`)}, { method: "POST", body: "{}" });
`,
    );
    const progRun = await train(agentConfig("agent-errors-program", { command: `node ${program}` }, { steps: 1, groupSize: 2 }), { quiet: true, skipEval: true });
    const progErrors = trajectories(progRun.runDir).sort((a, b) => a.index - b.index).map((t) => t.error as string);
    expect(progErrors[0]).toBe("agent: the agent exited with code 1: Error: bad plan | [cause]: Error: the plan had no steps");
    expect(progErrors[1]).toMatch(/^agent: the agent exited with code 1: it could not reach the gateway \(a connection error .*\): TypeError: fetch failed \| \[cause\]: Error: connect ECONNREFUSED/);
  }, 240_000);
});
