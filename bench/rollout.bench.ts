/**
 * The rollout benchmark (`npm run bench:rollout [-- --json FILE] [--quick]`): one table.
 *
 * 1. Incremental versus recompute, on episodes of 10, 30 and 50 turns, same seed: tokens the engine
 *    prefilled, wall time, and whether both produced identical tokens.
 * 2. A group of 8 rollouts of one task: the prompt prefilled once (forked sessions) versus 8 times.
 * 3. Trajectories per minute with many in flight versus one at a time, on an env whose every step
 *    waits on a loopback HTTP service (a user simulator) that answers after a fixed latency.
 *
 * The policy is a random-weight Qwen2-shaped model on the embedded engine, over a trimmed Qwen3
 * vocabulary; what is measured is engine work and scheduling, not agent quality. Each assistant turn
 * samples a fixed number of tokens and is closed by the rollout, so episodes have exactly N turns.
 */
import { execSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { createRandomModel, type EmbeddedEngine } from "../src/engine/embedded.js";
import type { ChatMessage } from "../src/core/index.js";
import { ChatTemplate } from "../src/model/chat-template.js";
import { parseHfConfig } from "../src/model/config.js";
import { loadQwen3Tokenizer } from "../src/model/tokenizer.js";
import { tokenCodec, TrimmedVocab, type TokenCodec } from "../src/model/vocab.js";
import { Rollout, type GroupTask, type RolloutOptions } from "../src/rollout/agent-loop.js";
import { RolloutScheduler } from "../src/rollout/scheduler.js";
import type { Trajectory } from "../src/rollout/trajectory.js";
import { arrayTasks, ToolEnv } from "../src/tools/tool-env.js";
import { functionTool } from "../src/tools/tool.js";
import { z } from "zod";

const args = process.argv.slice(2);
const jsonAt = args.indexOf("--json");
const jsonFile = jsonAt >= 0 ? args[jsonAt + 1] : undefined;
if (jsonAt >= 0 && !jsonFile) throw new Error("--json needs a file name: --json FILE");
const quick = args.includes("--quick");

const tokenizer = loadQwen3Tokenizer();
const template = ChatTemplate.fromTokenizer(tokenizer);
const SYSTEM =
  "You are a customer support agent for an online store. Look up orders and products with the tools, " +
  "follow the store policy, confirm every change with the customer before making it, and answer briefly.";

interface Task {
  question: string;
  turns: number;
}

/** The customer's reply of turn n: about 40 tokens, like a short tool result or message. */
function reply(n: number): string {
  return `Turn ${n}: my account page says order #W${1000 + n} is still "processing", shipping to 42 Elm Street. Can I still change the address?`;
}

/** An env whose customer keeps talking for `turns` turns; each reply optionally waits on `serviceUrl`. */
function makeEnv(task: Task, serviceUrl?: string) {
  return new ToolEnv<Task, { replies: number }>({
    name: "SupportEnv",
    tasks: arrayTasks([task]),
    tools: [
      functionTool({
        name: "get_order",
        description: "Look up an order by id.",
        parameters: z.object({ order_id: z.string() }),
        execute: ({ order_id }) => ({ order_id, status: "shipped" }),
      }),
    ],
    open: async (t) => ({ state: { replies: 0 }, messages: [{ role: "system", content: SYSTEM }, { role: "user", content: t.question }] }),
    respond: async (episode) => {
      episode.state.replies++;
      let text = reply(episode.state.replies);
      if (serviceUrl) text = await (await fetch(`${serviceUrl}?n=${episode.state.replies}`)).text();
      return { messages: [{ role: "user", content: text }], done: episode.state.replies >= episode.task.turns };
    },
    score: async () => ({ reward: 0, evidence: {} }),
  });
}

function task(i: number, turns: number, groupSize: number, serviceUrl?: string): GroupTask {
  const t = { question: `Where is my order #W${1000 + i}? It has been a week.`, turns };
  return { envId: "bench/support-v0", makeEnv: () => makeEnv(t, serviceUrl), reset: { seed: i, options: { taskIndex: 0 } }, groupSize };
}

function codecFor(): TokenCodec {
  const msgs: ChatMessage[] = [
    { role: "system", content: SYSTEM },
    { role: "user", content: `Where is my order #W1000? It has been a week. ${reply(1)}` },
  ];
  const env = makeEnv({ question: "", turns: 1 });
  const tools = env.hooks.tools.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters }));
  return tokenCodec(tokenizer, TrimmedVocab.build(tokenizer, [tokenizer.encode(template.render(msgs, { tools }))]));
}

const codec = codecFor();
function engine(): EmbeddedEngine {
  const cfg = parseHfConfig({
    architectures: ["Qwen2ForCausalLM"],
    model_type: "qwen2",
    hidden_size: 128,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    intermediate_size: 352,
    vocab_size: codec.size,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    max_position_embeddings: 8192,
    tie_word_embeddings: true,
  });
  return createRandomModel(cfg, 3, { std: 0.5 });
}

const TOKENS_PER_TURN = 12;
const base: RolloutOptions = { maxTokensPerTurn: TOKENS_PER_TURN, turnLimit: "close", maxTurns: 1000, maxContextTokens: 8192, seed: 11 };

async function play(options: RolloutOptions, tasks: GroupTask[], maxInFlight = 1) {
  const e = engine();
  const rollout = new Rollout(e, codec, template, options);
  const t0 = performance.now();
  const groups = await new RolloutScheduler(rollout, { maxInFlight }).runAll(tasks);
  const ms = performance.now() - t0;
  await rollout.close();
  e.dispose();
  const trajs = groups.flat();
  for (const t of trajs) if (t.endReason === "error") throw new Error(`a trajectory failed: ${t.error}`);
  return { trajs, ms, stats: { ...rollout.stats }, decoder: { ...rollout.decoder.stats } };
}

const tokensOf = (ts: Trajectory[]) => JSON.stringify(ts.map((t) => t.segments.map((s) => s.tokens)));
const rows: string[][] = [];
const results: Record<string, unknown> = {};
const fmt = (x: number, d = 0) => x.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });

// 1. Incremental versus recompute.
const turnCounts = quick ? [10] : [10, 30, 50];
results.incrementalVsRecompute = [];
for (const turns of turnCounts) {
  process.stderr.write(`incremental vs recompute, ${turns} turns...\n`);
  const inc = await play({ ...base, mode: "incremental" }, [task(0, turns, 1)]);
  const rec = await play({ ...base, mode: "recompute" }, [task(0, turns, 1)]);
  const identical = tokensOf(inc.trajs) === tokensOf(rec.trajs);
  const r = {
    turns,
    contextTokens: inc.trajs[0]!.segments[0]!.tokens.length,
    incremental: { prefillTokens: inc.stats.prefillTokens, wallMs: inc.ms },
    recompute: { prefillTokens: rec.stats.prefillTokens, wallMs: rec.ms },
    prefillRatio: rec.stats.prefillTokens / inc.stats.prefillTokens,
    wallRatio: rec.ms / inc.ms,
    identicalTokens: identical,
  };
  (results.incrementalVsRecompute as unknown[]).push(r);
  rows.push([
    `${turns} turns (${r.contextTokens} tokens)`,
    `prefill ${fmt(r.incremental.prefillTokens)} tok, ${fmt(r.incremental.wallMs)} ms`,
    `prefill ${fmt(r.recompute.prefillTokens)} tok, ${fmt(r.recompute.wallMs)} ms`,
    `${fmt(r.prefillRatio, 1)}x fewer tokens, ${fmt(r.wallRatio, 1)}x faster; tokens ${identical ? "identical" : "DIFFER"}`,
  ]);
}

// 2. A group of 8: one prefill of the prompt, forked 8 times, versus 8 independent prefills.
{
  process.stderr.write("group of 8...\n");
  const shared = await play({ ...base, maxTurns: 1 }, [task(5, 1, 8)]);
  const separate = await play({ ...base, maxTurns: 1, shareSystemPrompt: false }, Array.from({ length: 8 }, () => task(5, 1, 1)), 8);
  const promptTokens = shared.trajs[0]!.turns[0]!.sampleStart;
  results.groupOf8 = {
    promptTokens,
    shared: { prefillTokens: shared.stats.prefillTokens, promptPrefills: shared.stats.groupPrefills, wallMs: shared.ms },
    separate: { prefillTokens: separate.stats.prefillTokens, promptPrefills: separate.stats.groupPrefills, wallMs: separate.ms },
  };
  rows.push([
    `group of 8 (prompt ${promptTokens} tokens)`,
    `prompt prefilled ${shared.stats.groupPrefills}x: ${fmt(shared.stats.prefillTokens)} tok, ${fmt(shared.ms)} ms`,
    `prompt prefilled ${separate.stats.groupPrefills}x: ${fmt(separate.stats.prefillTokens)} tok, ${fmt(separate.ms)} ms`,
    `${fmt(separate.stats.prefillTokens / shared.stats.prefillTokens, 1)}x fewer prefill tokens`,
  ]);
}

// 3. Many in flight versus one at a time, with a real loopback service latency on every env step.
{
  process.stderr.write("many in flight vs one at a time...\n");
  const latencyMs = 50;
  const server = createServer((req, res) => {
    setTimeout(() => res.end(reply(Number(new URL(req.url ?? "/", "http://x").searchParams.get("n")))), latencyMs);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/reply`;
  const count = quick ? 8 : 32;
  const turns = 8;
  const tasks = () => Array.from({ length: count }, (_, i) => task(100 + i, turns, 1, url));
  const serial = await play(base, tasks(), 1);
  const parallel = await play(base, tasks(), count);
  server.closeAllConnections();
  server.close();
  const perMin = (n: number, ms: number) => (n / ms) * 60_000;
  results.throughput = {
    trajectories: count,
    turns,
    envLatencyMs: latencyMs,
    oneAtATime: { wallMs: serial.ms, trajectoriesPerMin: perMin(count, serial.ms), maxBatch: serial.decoder.maxBatch },
    manyInFlight: { wallMs: parallel.ms, trajectoriesPerMin: perMin(count, parallel.ms), maxBatch: parallel.decoder.maxBatch, inFlight: count },
    speedup: serial.ms / parallel.ms,
  };
  rows.push([
    `${count} trajectories x ${turns} turns, env ${latencyMs} ms/step`,
    `${count} in flight: ${fmt(perMin(count, parallel.ms))} traj/min (batches up to ${parallel.decoder.maxBatch})`,
    `1 at a time: ${fmt(perMin(count, serial.ms))} traj/min`,
    `${fmt(serial.ms / parallel.ms, 1)}x the throughput`,
  ]);
}

let commit = "unknown";
try {
  commit = execSync("git rev-parse --short HEAD", { encoding: "utf8" }).trim();
} catch {}
const header = ["case", "incremental / shared / many in flight", "recompute / separate / one at a time", "result"];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
console.log(`\nsinkflex rollout benchmark (commit ${commit}; policy: random Qwen2-shaped model, 2 layers x 128, vocab ${codec.size}; ${TOKENS_PER_TURN} sampled tokens per turn)\n`);
console.log(line(header));
console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
for (const r of rows) console.log(line(r));
if (jsonFile) {
  writeFileSync(jsonFile, JSON.stringify({ commit, model: { layers: 2, hidden: 128, vocab: codec.size }, tokensPerTurn: TOKENS_PER_TURN, ...results }, null, 2));
  console.log(`\nwrote ${jsonFile}`);
}
