/**
 * The SFT throughput benchmark (`npm run bench:sft [-- --episodes N] [--steps N] [--json FILE] [--quick]`):
 * the demo's SFT inputs, each measured two ways in one run.
 *
 * 1. Data preparation: the demo's four suites, every task's contents read (as `planSuites` splits the
 *    tasks) and `--episodes` expert episodes each (default 7,000, as the demo) played and tokenized, on
 *    this thread alone, then on the worker pool (`PrepPool`, one worker per core, at most 4). Both must
 *    give the same contents and SFT examples (compared by a hash of every digest, token and mask).
 * 2. The training step: `--steps` SFT steps (batches of 8 examples of one suite behind one copy of its
 *    system prompt, loss on the assistant turns), with the LM head on every row and on the scored rows
 *    only (`masks.scored`), alternating step by step on the same batches; medians of the step times.
 * 3. Where the CPU has a bf16 unit (AMX or AVX512-BF16): the same steps with fp32 and with bf16 matrix
 *    products, alternating; medians, and the attention kernels' share of them (in bf16, the fused kernels).
 *
 * The model is the demo's (its Qwen2 shape, window 512 + 4 sink slots).
 */
import { execSync } from "node:child_process";
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { registerBundledEnvs } from "../src/envs/index.js";
import { createPolicy } from "../src/pipeline/policy.js";
import { demoConfig } from "../src/pipeline/demo.js";
import { PrepPool } from "../src/pipeline/prep-pool.js";
import type { Conversation } from "../src/pipeline/sft-data.js";
import { makeChatEnv, planSuites } from "../src/pipeline/tasks.js";
import { packSharedPrefixes } from "../src/rl/prefix-packing.js";
import { sftLoss } from "../src/rl/policy-loss.js";
import { promptGroups } from "../src/rl/sft.js";
import { bf16Unit, setMatmulPrecision } from "../src/kernels/index.js";

const args = process.argv.slice(2);
const option = (name: string): string | undefined => {
  const at = args.indexOf(name);
  if (at < 0) return undefined;
  const v = args[at + 1];
  if (!v || v.startsWith("--")) throw new Error(`${name} needs a value`);
  return v;
};
const quick = args.includes("--quick");
const jsonFile = option("--json");
const episodes = Number(option("--episodes") ?? (quick ? 300 : 7000));
const steps = Number(option("--steps") ?? (quick ? 6 : 40));
for (const [name, v] of [["--episodes", episodes], ["--steps", steps]] as const) {
  if (!(Number.isInteger(v) && v > 0)) throw new Error(`${name} must be a positive integer, got ${v}`);
}

registerBundledEnvs();
const cfg = demoConfig({ runsDir: "/tmp/sinkflex-bench-unused" });
const plans = await planSuites(cfg);
const seconds = (ms: number) => (ms / 1000).toFixed(1);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Every suite's task contents, read as `planSuites` reads them with `pool` (hashed in `hash`). */
async function readContents(pool: PrepPool, hash: ReturnType<typeof createHash>): Promise<void> {
  for (const s of cfg.suites) {
    const env = await makeChatEnv(s.env, s.options);
    try {
      for (const key of await pool.taskContents(s.env, s.options, Number(env.metadata.taskCount), env)) hash.update(key);
    } finally {
      await env.close();
    }
  }
}

/** Data preparation with `threads` threads: task contents, episodes, the vocabulary (as train.ts builds it), examples. */
async function prepare(threads: number) {
  const pool = new PrepPool({ threads });
  try {
    const hash = createHash("sha256");
    const tc = performance.now();
    await readContents(pool, hash);
    const t0 = performance.now();
    const perSuite = await pool.expertConversations(plans, episodes, cfg.seed);
    const conversations: Conversation[] = perSuite.flatMap((s) => s.kept);
    const t1 = performance.now();
    const every = Math.max(1, Math.ceil(conversations.length / 6000));
    const policy = createPolicy(cfg.model.init!, conversations.filter((_, i) => i % every === 0), cfg.seed, cfg.attention);
    const t2 = performance.now();
    const examples = await pool.examples(policy, conversations);
    const t3 = performance.now();
    for (const e of examples) {
      hash.update(Int32Array.from(e.tokens));
      hash.update(e.lossMask);
    }
    return { policy, examples, ms: { contents: t0 - tc, episodes: t1 - t0, vocabulary: t2 - t1, examples: t3 - t2, total: t3 - tc }, hash: hash.digest("hex") };
  } finally {
    await pool.close();
  }
}

process.stderr.write(`data preparation on 1 thread (${plans.length} suites: every task's contents, ${episodes} episodes each)...\n`);
const one = await prepare(1);
const workers = Math.min(4, availableParallelism());
process.stderr.write(`data preparation on ${workers} worker threads...\n`);
const pool = await prepare(workers);
if (pool.hash !== one.hash) throw new Error("the worker pool's task contents or SFT examples differ from one thread's: a bug in PrepPool");

// 2. The training step on the pool's examples: batches of 8 of one suite, as SFT takes them.
const engine = pool.policy.engine;
const groups = promptGroups(pool.examples).map((g) => g.map((i) => pool.examples[i]!)).filter((g) => g.length >= 8);
const batches = Array.from({ length: steps }, (_, s) => groups[s % groups.length]!.slice(8 * Math.floor(s / groups.length), 8 * Math.floor(s / groups.length) + 8));
const times = { all: [] as number[], scored: [] as number[] };
let lossAll = 0;
let lossScored = 0;
/** A batch as SFT trains on it: packed behind one copy of its prompt, with the SFT loss on the assistant turns. */
function prepared(batch: typeof batches[number]) {
  const seqs = batch.map((e) => e.tokens);
  const masks = batch.map((e) => e.lossMask.subarray(1));
  const packing = packSharedPrefixes(seqs, masks);
  const loss = (lps: Float32Array[]) => {
    const out = sftLoss(packing.unpack(lps), masks);
    return { ...out, dLogprobs: packing.pack(out.dLogprobs) };
  };
  return { packing, loss };
}
for (const batch of batches) {
  const { packing, loss } = prepared(batch);
  for (const mode of ["all", "scored"] as const) {
    const m = mode === "all" ? { docIds: packing.masks.docIds } : packing.masks;
    const t0 = performance.now();
    const r = await engine.forwardBackward(packing.sequences, loss, m);
    times[mode].push(performance.now() - t0);
    if (mode === "all") lossAll += r.loss;
    else lossScored += r.loss;
    engine.zeroGrad();
  }
}
// 3. The same steps (LM head on scored rows) with fp32 and bf16 matrix products, alternating, where the CPU
// has a bf16 unit; the attention kernels' share of each step is timed by wrapping them (in bf16 they are the
// fused kernels of native/src/attention_bf16.cc, in fp32 block products through sgemm).
const unit = bf16Unit();
const byPrecision = { fp32: [] as number[], bf16: [] as number[] };
const attentionMs = { fp32: [] as number[], bf16: [] as number[] };
if (unit !== "none") {
  const kernels = engine.kernels as unknown as Record<string, (...a: unknown[]) => unknown>;
  const originals = { attentionForward: kernels.attentionForward!, attentionBackward: kernels.attentionBackward! };
  let inAttention = 0;
  for (const [name, f] of Object.entries(originals)) {
    kernels[name] = (...a: unknown[]) => {
      const t0 = performance.now();
      const r = f(...a);
      inAttention += performance.now() - t0;
      return r;
    };
  }
  for (const batch of batches) {
    const { packing, loss } = prepared(batch);
    for (const precision of ["fp32", "bf16"] as const) {
      setMatmulPrecision(precision);
      inAttention = 0;
      const t0 = performance.now();
      await engine.forwardBackward(packing.sequences, loss, packing.masks);
      byPrecision[precision].push(performance.now() - t0);
      attentionMs[precision].push(inAttention);
      engine.zeroGrad();
    }
  }
  Object.assign(kernels, originals);
  setMatmulPrecision("fp32");
}
if (Math.abs(lossAll - lossScored) > 1e-4 * Math.max(1, Math.abs(lossAll))) throw new Error(`the losses differ: every row ${lossAll}, scored rows ${lossScored}`);
const scoredRows = batches.reduce((n, b) => n + b.reduce((a, e) => a + e.lossMask.reduce((x, y) => x + y, 0), 0), 0);
const allRows = batches.reduce((n, b) => n + packSharedPrefixes(b.map((e) => e.tokens), b.map((e) => e.lossMask.subarray(1))).tokensOut, 0);

let commit = "unknown";
try {
  commit = execSync("git rev-parse --short HEAD", { encoding: "utf8" }).trim();
} catch {
  // not a git checkout
}
const rows: string[][] = [
  ["data preparation", "1 thread", `${workers} worker threads`, "ratio"],
  ["task contents (s)", seconds(one.ms.contents), seconds(pool.ms.contents), `${(one.ms.contents / pool.ms.contents).toFixed(2)}x`],
  ["expert episodes (s)", seconds(one.ms.episodes), seconds(pool.ms.episodes), `${(one.ms.episodes / pool.ms.episodes).toFixed(2)}x`],
  ["vocabulary (s)", seconds(one.ms.vocabulary), seconds(pool.ms.vocabulary), "(one thread both)"],
  ["SFT examples (s)", seconds(one.ms.examples), seconds(pool.ms.examples), `${(one.ms.examples / pool.ms.examples).toFixed(2)}x`],
  ["total (s)", seconds(one.ms.total), seconds(pool.ms.total), `${(one.ms.total / pool.ms.total).toFixed(2)}x`],
];
const stepRows: string[][] = [
  ["SFT step (forward + backward)", "LM head on every row", "on scored rows", "ratio"],
  [`median ms per step (${steps} steps)`, median(times.all).toFixed(1), median(times.scored).toFixed(1), `${(median(times.all) / median(times.scored)).toFixed(2)}x`],
  ["LM head rows per step", (allRows / steps).toFixed(0), (scoredRows / steps).toFixed(0), `${(allRows / scoredRows).toFixed(2)}x`],
];
const print = (table: string[][]) => {
  const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  console.log(line(table[0]!));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const r of table.slice(1)) console.log(line(r));
};
console.log(`\nsinkflex SFT benchmark (commit ${commit}; ${availableParallelism()} cores; the demo's suites, ${episodes} episodes each: ${pool.examples.length} kept; model ${cfg.model.init!.layers} x ${cfg.model.init!.hiddenSize}, kernels ${engine.kernels.describe()})\n`);
print(rows);
console.log(`same task contents and SFT examples on both: yes (sha256 ${pool.hash.slice(0, 16)})\n`);
print(stepRows);
if (unit !== "none") {
  console.log("");
  print([
    ["SFT step (forward + backward)", "fp32 products", `bf16 products (${unit})`, "ratio"],
    [`median ms per step (${steps} steps)`, median(byPrecision.fp32).toFixed(1), median(byPrecision.bf16).toFixed(1), `${(median(byPrecision.fp32) / median(byPrecision.bf16)).toFixed(2)}x`],
    ["of which attention (median ms)", median(attentionMs.fp32).toFixed(1), median(attentionMs.bf16).toFixed(1), `${(median(attentionMs.fp32) / median(attentionMs.bf16)).toFixed(2)}x`],
  ]);
} else {
  console.log("\nno bf16 unit (AMX or AVX512-BF16) on this CPU: the fp32 / bf16 comparison is skipped");
}
if (jsonFile) {
  writeFileSync(jsonFile, JSON.stringify({ commit, cores: availableParallelism(), episodes, examples: pool.examples.length, prep: { oneThread: one.ms, workers, pool: pool.ms }, step: { steps, msAll: times.all, msScored: times.scored, rowsAll: allRows, rowsScored: scoredRows }, precision: { bf16Unit: unit, msFp32: byPrecision.fp32, msBf16: byPrecision.bf16, attentionMsFp32: attentionMs.fp32, attentionMsBf16: attentionMs.bf16 } }, null, 2));
  console.log(`\nwrote ${jsonFile}`);
}
