/**
 * Trains the `openai`-package arith agent (openai.ts) with sinkflex: a tiny policy is SFT'd briefly on
 * the arith expert's episodes, then GRPO runs with every episode played by the agent through the
 * recording gateway (`suites[].agent.run`). Prints the agent's success per GRPO step and the first and
 * last steps' means, and the held-out evaluation (the built-in agent loop) before and after RL.
 *
 *   npx tsx examples/arith-agent/train.ts [steps]        # runs/agent-arith-openai-<time>/
 *
 * An example, not part of the library; its numbers are a tiny model's on 2 CPU cores.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { validateConfig } from "../../src/pipeline/config.js";
import { train } from "../../src/pipeline/train.js";
import { openaiArithAgent } from "./openai.js";

const steps = Number(process.argv[2] ?? 24);
const cfg = validateConfig({
  name: `agent-arith-openai-${Date.now()}`,
  seed: 0,
  suites: [{ env: "sinkflex/arith-v0", options: { count: 300, difficulty: 1 }, agent: { run: openaiArithAgent, timeoutMs: 120_000 } }],
  model: { init: { hiddenSize: 64, layers: 2, heads: 4, kvHeads: 2, intermediateSize: 128, maxPositions: 1024 } },
  sft: { expertEpisodes: 1200, epochs: 4, batchSize: 8, lr: 3e-3 },
  grpo: { steps, batchTasks: 4, groupSize: 6, lr: 3e-4, epochs: 1, klCoef: 0, maxTurns: 4, maxTokensPerTurn: 48, maxContextTokens: 1024, concurrency: 24 },
  eval: { tasksPerSuite: 24, samples: 1, temperature: 1 },
  checkpointEvery: 1000,
});
const t0 = performance.now();
const run = await train(cfg, { quiet: true });
const grpo = readFileSync(join(run.runDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, any>).filter((r) => r.stage === "grpo");
const success = grpo.map((r) => r.success.arith as number);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);
const k = Math.max(1, Math.floor(success.length / 4));
console.log("step  success  calls  merges  splits  failed");
for (const r of grpo) console.log(`${String(r.step).padStart(4)}  ${r.success.arith.toFixed(3).padStart(7)}  ${String(r.agents.calls).padStart(5)}  ${String(r.agents.merges).padStart(6)}  ${String(r.agents.splits).padStart(6)}  ${String(r.agents.failed).padStart(6)}`);
console.log(`agent success, first ${k} steps: ${mean(success.slice(0, k)).toFixed(3)}; last ${k} steps: ${mean(success.slice(-k)).toFixed(3)}`);
console.log(`held-out (built-in loop) success before RL: ${run.evalBefore?.arith?.rate.toFixed(3) ?? "?"}, after: ${run.evalAfter?.arith?.rate.toFixed(3) ?? "?"}`);
console.log(`run folder ${run.runDir}; ${((performance.now() - t0) / 1000).toFixed(0)} s`);
