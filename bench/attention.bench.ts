/**
 * The attention benchmark: evidence for sink-normalized attention, on a model of a few million
 * parameters trained here. Prints one table per section and, with --json FILE, writes every figure.
 * It is a benchmark, not a training tool: the model, data and recipe are fixed here (seeded), and only
 * their sizes and the schedule are options.
 *
 *   train     a Qwen2-shaped model (4 layers, hidden 256, 2.7M parameters) trained with full attention on
 *             the multi-offset backcopy task: locally predictable text (a near-deterministic bigram
 *             chain) where a rare trigger token j in 1..6 means "the next token is the one j places
 *             before me", so heads are needed only at triggers and have nothing to read elsewhere.
 *             Positions 0..k-1 are random and position k (default 3) holds one fixed token.
 *             With --checkpoint DIR the trained model is saved there (and every 100 steps while
 *             training, with the optimizer, so an interrupted run resumes); a later run with the same
 *             recipe reuses it instead of training again.
 *   probe     the probe's per-layer sink table on held-out sequences (δ = 64, α >= 0.3, a quarter of a
 *             layer's heads); recovery: the sink must be at k
 *   ppl, kl   perplexity and KL(full || masked) by query position, up to 4x the window, for full
 *             attention, window only, K in {1, 2, 4} sink slots + window, and the rewriter's layout
 *             (the probed sink pinned): once with W = seq/4 inside the training length, once with
 *             W = seq on sequences of 4 x the training length
 *   decode    decode time per token and KV-cache bytes vs context length (1K..32K) on the trained
 *             model's shape: one engine session with full attention vs one under K sinks + window
 *             (which evicts the KV blocks no later query keeps)
 *   session   the same at 1K, 8K and 32K on a random model with Qwen2.5-0.5B's attention layout (14
 *             heads, 2 kv heads x 64) but 2 layers and a narrow MLP and vocabulary (0.5B's 24 layers
 *             and 32K-token full-attention prefills do not fit a few CPU minutes); JSON keys
 *             session.rows[i].{context, fullMsPerToken, fullMsPerTokenMin, fullKvBytes, sinkMsPerToken,
 *             sinkMsPerTokenMin, sinkKvBytes, fullKvBytesAt05B, sinkKvBytesAt05B} (ms: the median step and
 *             the fastest), and session.flatness.{sinkMsPerTokenLongestOverShortest,
 *             sinkFastestMsPerTokenLongestOverShortest, sinkKvBytesLongestOverShortest, ...}
 *             (decode.flatness likewise). The sessions of one mask decode in turn, so load on a shared
 *             machine hits every length alike
 *   session-trained
 *             the session section's measurement (1K, 8K and 32K, K = 4 + W = 1024, the same decode
 *             steps) on the benchmark's trained model (the train section's: trained in this run, or
 *             reused from --checkpoint; without either it is trained here first, probe and ppl left
 *             out); JSON keys sessionTrained.model.{params, numLayers, ...}, sessionTrained.trainSteps,
 *             sessionTrained.rows[i].{context, fullMsPerToken, fullMsPerTokenMin, fullKvBytes,
 *             sinkMsPerToken, sinkMsPerTokenMin, sinkKvBytes, fullHeldRows, sinkHeldRows},
 *             sessionTrained.flatness (as session.flatness)
 *   episode   a real 30-turn episode of the retail suite (sinkflex/tau-retail-v0, scripted user) through
 *             the rollout path on the session section's random model, full attention vs K = 4 + W = 1024:
 *             KV bytes of the episode's session after every turn, and the largest gap between the
 *             rollout's behaviour log-probs and the teacher-forced training log-probs under the same mask;
 *             JSON keys episode.runs[i].{mask, turns, maxAbsLogprobGap, scoredTokens, kvPerTurn[t].
 *             {contextTokens, sessionKvBytes}}, episode.sinkKvAfterWindowFull.{minBytes, maxBytes}
 *   sinklogit the sink logit's step-0 invariance on the trained model (--checkpoint, or the one trained in
 *             this run; else a random model of its shape): max |Δlogit| on 8 calibration and 8 held-out
 *             sequences; JSON keys sinkLogitStep0.{epsilon, maxLogitChangeCalibration,
 *             maxLogitChangeHeldOut, withinTarget}
 *
 *   pipeline  a small recipe (configs/demo-quick.yaml: SFT, 2 GRPO steps, held-out evaluation) trained
 *             through the pipeline four times from the same seed: full attention, the fixed first-K
 *             layout (sink-window), attention.mode profile (the policy's own sinks), and profile with
 *             the learnable sink logit; held-out success and wall time side by side. And the sink
 *             logit's step-0 invariance on the trained policy (max |Δlogit| on sequences it was not
 *             initialized on). JSON keys pipeline.runs[i].{variant, heldOutSuccess, perSuite, wallSeconds,
 *             attention}, pipeline.sinkLogitStep0.{epsilon, maxLogitChangeCalibration, maxLogitChangeHeldOut}
 *
 *   recipe-runs (only with --recipe-runs, not part of the default sections)
 *             the demo's recipe (configs/demo.yaml, as `sinkflex demo --minutes M` scales and plans it)
 *             trained three times from the same seed, each under the same M-minute budget: full
 *             attention, the fixed first-K layout (sink-window, the recipe's own K = 4, W = 512) and
 *             attention.mode profile (the policy's own sinks, token sinks pinned with pinBudget 4). The
 *             machine is calibrated once and every run gets the same planned counts and deadlines, so
 *             the runs differ by their attention only. JSON keys recipeRuns.{minutes, plan,
 *             calibrationSeconds, runs[i].{variant, attention, heldOutSuccess, successes, tasks,
 *             beforeRl, perSuite, wallSeconds, sftSteps, grpoSteps, mask, profile}}
 *
 * Usage: npm run bench:attention -- [--checkpoint DIR] [--steps N] [--quick] [--only train,decode,session,episode,sinklogit,pipeline] [--json FILE]
 *        npm run bench:attention -- --recipe-runs [--minutes M] [--json FILE]
 *        (--quick: a tiny model and a short run to check the benchmark itself; its figures mean little)
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createRandomModel, loadEngine, type EmbeddedEngine, type EmbeddedSession } from "../src/engine/embedded.js";
import type { TokenLoss } from "../src/engine/types.js";
import { getKernels } from "../src/kernels/index.js";
import type { ModelConfig } from "../src/model/config.js";
import { Rng } from "../src/core/index.js";
import { TrainWorkspace, type Model } from "../src/model/transformer.js";
import {
  attentionMass, formatProfile, initSinkLogits, maxLogitDifference, probeSinks, rewriteForSinks, sequenceLogits, SINK_PROFILE_FILE,
  sinkPositions, type SinkProfile,
} from "../src/attention/index.js";
import { buildModel } from "../src/model/instance.js";
import { loadConfigFile, validateConfig } from "../src/pipeline/config.js";
import { train as trainPipeline } from "../src/pipeline/train.js";
import { planBudgetRun, type BudgetPlan } from "../src/pipeline/budget.js";
import { calibrate, plannedConfig, planRecipe } from "../src/pipeline/demo.js";
import { demoRecipe } from "../src/pipeline/demo-recipe.js";
import { makeChatEnv } from "../src/pipeline/tasks.js";
import { registerBundledEnvs } from "../src/envs/index.js";
import { ChatTemplate } from "../src/model/chat-template.js";
import { loadQwen3Tokenizer } from "../src/model/tokenizer.js";
import { tokenCodec, TrimmedVocab } from "../src/model/vocab.js";
import { Rollout, type PolicySampler, type Trajectory } from "../src/rollout/index.js";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";

// ------------------------------------------------------------------------------------------ options

interface Options {
  steps: number;
  batch: number;
  seq: number;
  quick: boolean;
  only: Set<string>;
  json: string | null;
  sinkAt: number;
  lr: number;
  weightDecay: number;
  checkpoint: string | null;
  lowThreshold: number;
  evalSequences: number;
  triggerRate: number;
  triggers: number;
  /** --recipe-runs: the demo's recipe under three attention layouts, each in `minutes`. */
  recipeRuns: boolean;
  minutes: number;
}

const HELP = `npm run bench:attention -- [options]
  --checkpoint DIR     save the trained model in DIR (and resume/reuse it: a run with the same recipe
                       loads it instead of training; an interrupted run resumes from its last save)
  --steps N            training steps (default 1200)
  --batch B            sequences per step (default 4)
  --seq T              training sequence length (default 512); windows: W = T/4 and W = T
  --lr X               peak learning rate (default 5e-3; warmup 50 steps, cosine to 10%)
  --wd X               AdamW weight decay (default 0.1)
  --sink-at K          position of the fixed token (default 3)
  --trigger-rate P     how often a trigger follows a plain token (default 0.08)
  --triggers N         trigger tokens, offsets 1..N (default 6)
  --eval N             held-out sequences per evaluation (default 16)
  --low-threshold A    a second probe threshold, printed when none is found at 0.3 (default 0.1)
  --only LIST          sections: train (train, probe, ppl, kl), decode, session, session-trained, episode,
                       sinklogit, pipeline (default: all seven)
  --json FILE          write every figure as JSON
  --recipe-runs        instead of the sections: the demo's recipe trained with full attention, the fixed
                       first-K layout and attention.mode profile, each under the same time budget
  --minutes M          each recipe run's time budget (default 10; the demo's own is 20)
  --quick              a tiny model and a short run (checks the benchmark itself)`;

function parseArgs(argv: string[]): Options {
  const o: Options = {
    steps: 1200, batch: 4, seq: 512, quick: false, only: new Set(["train", "decode", "session", "session-trained", "episode", "sinklogit", "pipeline"]), json: null, sinkAt: 3, lr: 5e-3,
    weightDecay: 0.1, checkpoint: null, lowThreshold: 0.1, evalSequences: 16, triggerRate: 0.08, triggers: 6,
    recipeRuns: false, minutes: 10,
  };
  let stepsGiven = false;
  let seqGiven = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const val = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value; see --help`);
      return v;
    };
    const num = () => {
      const v = Number(val());
      if (!Number.isFinite(v)) throw new Error(`${a} needs a number; see --help`);
      return v;
    };
    if (a === "--steps") [o.steps, stepsGiven] = [num(), true];
    else if (a === "--batch") o.batch = num();
    else if (a === "--seq") [o.seq, seqGiven] = [num(), true];
    else if (a === "--quick") o.quick = true;
    else if (a === "--only") o.only = new Set(val().split(","));
    else if (a === "--json") o.json = val();
    else if (a === "--sink-at") o.sinkAt = num();
    else if (a === "--lr") o.lr = num();
    else if (a === "--wd") o.weightDecay = num();
    else if (a === "--checkpoint") o.checkpoint = val();
    else if (a === "--eval") o.evalSequences = num();
    else if (a === "--trigger-rate") o.triggerRate = num();
    else if (a === "--triggers") o.triggers = num();
    else if (a === "--low-threshold") o.lowThreshold = num();
    else if (a === "--recipe-runs") o.recipeRuns = true;
    else if (a === "--minutes") o.minutes = num();
    else if (a === "--help" || a === "-h") {
      console.log(HELP);
      process.exit(0);
    } else throw new Error(`unknown option ${a}; see --help`);
  }
  if (o.quick) {
    if (!stepsGiven) o.steps = 40;
    if (!seqGiven) o.seq = 128;
    o.evalSequences = Math.min(o.evalSequences, 4);
  }
  if (!(o.seq >= 32 && o.seq % 4 === 0)) throw new Error(`--seq must be a multiple of 4, at least 32; got ${o.seq}`);
  if (!(o.minutes >= 2)) throw new Error(`--minutes must be at least 2 (a recipe run calibrates nothing itself but still prepares, trains and evaluates twice); got ${o.minutes}`);
  return o;
}

function table(title: string, rows: (string | number)[][]): void {
  const cells = rows.map((r) => r.map((c) => (typeof c === "number" ? fmt(c) : c)));
  const widths = cells[0]!.map((_, c) => Math.max(...cells.map((r) => r[c]!.length)));
  console.log(`\n## ${title}\n`);
  cells.forEach((r, i) => {
    console.log(`| ${r.map((c, j) => c.padEnd(widths[j]!)).join(" | ")} |`);
    if (i === 0) console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  });
}

function fmt(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(1) : a >= 1 ? x.toFixed(3) : x.toPrecision(3);
}

/** The benchmark model: Qwen2-shaped, a few million parameters (a tiny one with --quick). */
function benchConfig(quick: boolean): ModelConfig {
  const [hidden, layers, mlp, vocab] = quick ? [64, 2, 128, 64] : [256, 4, 512, 256];
  return {
    arch: "qwen2", hiddenSize: hidden, numLayers: layers, numHeads: 4, numKvHeads: 4, headDim: hidden / 4,
    intermediateSize: mlp, vocabSize: vocab, rmsNormEps: 1e-6, ropeTheta: 10000, ropeScaling: { type: "none" },
    maxPositionEmbeddings: 65536, tieWordEmbeddings: true, qkvBias: true,
  };
}

// ------------------------------------------------------------------------------------------ data

const SINK_TOKEN = 0;
const CHAIN_RATE = 0.9;

/**
 * The multi-offset backcopy task. Ids 1..N are triggers; trigger j means "the next token is the one j
 * places before me". Plain ids (N+1..V-1) follow a fixed bigram chain (each token has one successor,
 * taken with probability 0.9, else a random plain token), so most tokens are predictable from the
 * current token alone. A trigger follows with probability triggerRate, and only where the N tokens
 * before it are plain, so a copy is always a plain token (no trigger loops) and never the fixed token.
 * Attention is needed only at triggers, so heads learn to rest elsewhere; the rarer the triggers, the
 * stronger the sink. Position k holds SINK_TOKEN and positions < k are random plain tokens, so the one
 * key that is the same in every sequence sits at k.
 */
class MultiBackcopy {
  private readonly next: number[];
  private readonly first: number;

  constructor(readonly V: number, seed: number, private readonly triggers: number, private readonly triggerRate: number) {
    const rng = new Rng(seed, "xoshiro128**");
    this.first = 1 + triggers;
    this.next = Array.from({ length: V }, () => this.first + (rng.nextU32() % (V - this.first)));
  }

  sequence(rng: Rng, T: number, k: number): number[] {
    const plain = () => this.first + (rng.nextU32() % (this.V - this.first));
    const isTrigger = (id: number) => id >= 1 && id <= this.triggers;
    const s: number[] = [];
    for (let i = 0; i < k; i++) s.push(plain());
    s.push(SINK_TOKEN);
    s.push(plain());
    let plainRun = 1; // plain tokens at the end of s
    while (s.length < T) {
      const cur = s[s.length - 1]!;
      let nextId: number;
      if (isTrigger(cur)) nextId = s[s.length - 1 - cur]!;
      else if (plainRun >= this.triggers && rng.uniform() < this.triggerRate) nextId = 1 + (rng.nextU32() % this.triggers);
      else if (rng.uniform() < CHAIN_RATE) nextId = this.next[cur]!;
      else nextId = plain();
      plainRun = isTrigger(nextId) ? 0 : plainRun + 1;
      s.push(nextId);
    }
    return s.slice(0, T);
  }
}

// ------------------------------------------------------------------------------------------ training

const meanNll: TokenLoss = (lps) => {
  const n = lps.reduce((a, l) => a + l.length, 0);
  let loss = 0;
  for (const l of lps) for (const x of l) loss -= x;
  return { loss: loss / n, dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-1 / n)) };
};

const DATA_SEED = 11;
const INIT_SEED = 1;
const STAMP = "bench-recipe.json";

interface TrainResult {
  engine: EmbeddedEngine;
  cfg: ModelConfig;
  params: number;
  seconds: number;
  losses: { step: number; loss: number }[];
  task: MultiBackcopy;
  reused: boolean;
}

/** Everything that decides the trained weights; a checkpoint is reused only when this matches. */
function recipe(o: Options, cfg: ModelConfig) {
  return {
    task: "multi-offset-backcopy-v2", cfg, steps: o.steps, batch: o.batch, seq: o.seq, lr: o.lr,
    weightDecay: o.weightDecay, sinkAt: o.sinkAt, dataSeed: DATA_SEED, initSeed: INIT_SEED,
    triggers: o.triggers, triggerRate: o.triggerRate, chainRate: CHAIN_RATE,
  };
}

interface Stamp {
  recipe: ReturnType<typeof recipe>;
  step: number;
  seconds: number;
  losses: { step: number; loss: number }[];
}

function readStamp(dir: string): Stamp | null {
  const p = join(dir, STAMP);
  return existsSync(p) ? (JSON.parse(readFileSync(p, "utf8")) as Stamp) : null;
}

/** Saves the engine (with its optimizer) and the stamp into dir, replacing what was there. */
function saveAtomically(engine: EmbeddedEngine, dir: string, stamp: Stamp): void {
  const tmp = `${dir}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  engine.saveSync(tmp, { optimizer: stamp.step < stamp.recipe.steps });
  writeFileSync(join(tmp, STAMP), `${JSON.stringify(stamp)}\n`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
}

/**
 * Trains the benchmark model with full attention. The batch of step s comes from its own seeded
 * generator, so a run resumed from a save sees the batches the uninterrupted one would have.
 */
function train(o: Options): TrainResult {
  const cfg = benchConfig(o.quick);
  const task = new MultiBackcopy(cfg.vocabSize, DATA_SEED, o.triggers, o.triggerRate);
  const want = recipe(o, cfg);
  const dir = o.checkpoint;
  const stamp = dir ? readStamp(dir) : null;
  const matches = stamp !== null && JSON.stringify(stamp.recipe) === JSON.stringify(want);
  if (dir && stamp && !matches) {
    throw new Error(`${dir} holds a model trained with another recipe; give another --checkpoint folder or delete it`);
  }
  const engine = matches ? loadEngine(dir!, { kernels: getKernels() }) : createRandomModel(cfg, INIT_SEED, { kernels: getKernels() });
  const params = engine.weights.data.length;
  const losses = matches ? [...stamp!.losses] : [];
  const start = matches ? stamp!.step : 0;
  if (start >= o.steps) {
    process.stderr.write(`reusing the trained model in ${dir} (${o.steps} steps)\n`);
    return { engine, cfg, params, seconds: stamp!.seconds, losses, task, reused: true };
  }
  if (start > 0) process.stderr.write(`resuming from step ${start} in ${dir}\n`);
  if (dir) mkdirSync(join(dir, ".."), { recursive: true });
  const t0 = performance.now() - (matches ? stamp!.seconds * 1000 : 0);
  let avg = losses.at(-1)?.loss ?? 0;
  for (let step = start + 1; step <= o.steps; step++) {
    const rng = new Rng(1_000_003 * DATA_SEED + step, "xoshiro128**");
    const seqs = Array.from({ length: o.batch }, () => task.sequence(rng, o.seq, o.sinkAt));
    const { loss } = engine.forwardBackwardSync(seqs, meanNll);
    const warm = Math.min(1, step / 50);
    const decay = 0.5 * (1 + Math.cos((Math.PI * step) / o.steps));
    engine.optimStepSync({ lr: o.lr * warm * (0.1 + 0.9 * decay), weightDecay: o.weightDecay, maxGradNorm: 1 });
    avg = step === 1 ? loss : 0.95 * avg + 0.05 * loss;
    if (step % 25 === 0 || step === o.steps) {
      losses.push({ step, loss: avg });
      process.stderr.write(`  step ${step}/${o.steps}  loss ${avg.toFixed(3)}  ${((performance.now() - t0) / 1000).toFixed(0)} s\n`);
    }
    if (dir && (step % 100 === 0 || step === o.steps)) {
      saveAtomically(engine, dir, { recipe: want, step, seconds: (performance.now() - t0) / 1000, losses });
    }
  }
  return { engine, cfg, params, seconds: (performance.now() - t0) / 1000, losses, task, reused: false };
}

// ------------------------------------------------------------------------------------------ evaluation

interface Variant {
  name: string;
  window: number;
  sinks: number;
  pinned: Uint8Array | null;
}

/** log-softmax rows of logits [T, V] into lp [T, V]. */
function logSoftmax(logits: Float32Array, T: number, V: number): Float64Array {
  const out = new Float64Array(T * V);
  for (let t = 0; t < T; t++) {
    let mx = -Infinity;
    for (let v = 0; v < V; v++) mx = Math.max(mx, logits[t * V + v]!);
    let z = 0;
    for (let v = 0; v < V; v++) z += Math.exp(logits[t * V + v]! - mx);
    const lz = mx + Math.log(z);
    for (let v = 0; v < V; v++) out[t * V + v] = logits[t * V + v]! - lz;
  }
  return out;
}

/** Runs `evaluate` per sequence so each variant may pin its own positions. */
function evaluateAll(model: Model, variants: (Variant & { pinnedFor?: (s: number[]) => Uint8Array })[], seqs: number[][], buckets: number[][]) {
  const sums = { ppl: variants.map(() => buckets.map(() => 0)), kl: variants.map(() => buckets.map(() => 0)) };
  for (const s of seqs) {
    const r = evaluate(model, variants.map((v) => ({ ...v, pinned: v.pinnedFor ? v.pinnedFor(s) : v.pinned })), [s], buckets);
    r.ppl.forEach((row, i) => row.forEach((x, b) => (sums.ppl[i]![b]! += Math.log(x) / seqs.length)));
    r.kl.forEach((row, i) => row.forEach((x, b) => (sums.kl[i]![b]! += x / seqs.length)));
  }
  return { ppl: sums.ppl.map((row) => row.map(Math.exp)), kl: sums.kl };
}

function evaluate(model: Model, variants: Variant[], seqs: number[][], buckets: number[][]) {
  const V = model.cfg.vocabSize;
  const ws = new TrainWorkspace(model.cfg);
  const nll = variants.map(() => buckets.map(() => ({ sum: 0, n: 0 })));
  const kl = variants.map(() => buckets.map(() => ({ sum: 0, n: 0 })));
  for (const s of seqs) {
    const T = s.length;
    const lps = variants.map((v) => {
      const m: Model = { ...model, attention: { window: v.window, sinks: v.sinks } };
      const logits = sequenceLogits(m, ws, s, { pinned: v.pinned });
      return logSoftmax(logits, T, V);
    });
    const full = lps[0]!;
    for (let t = 0; t + 1 < T; t++) {
      const b = buckets.findIndex(([lo, hi]) => t >= lo! && t < hi!);
      if (b < 0) continue;
      variants.forEach((_, vi) => {
        const lp = lps[vi]!;
        nll[vi]![b]!.sum -= lp[t * V + s[t + 1]!]!;
        nll[vi]![b]!.n++;
        let d = 0;
        for (let v = 0; v < V; v++) d += Math.exp(full[t * V + v]!) * (full[t * V + v]! - lp[t * V + v]!);
        kl[vi]![b]!.sum += d;
        kl[vi]![b]!.n++;
      });
    }
  }
  return {
    ppl: nll.map((row) => row.map((c) => Math.exp(c.sum / c.n))),
    kl: kl.map((row) => row.map((c) => c.sum / c.n)),
  };
}

// ------------------------------------------------------------------------------------------ decode

interface SessionRow {
  context: number;
  /** Median wall time of a decode step. */
  fullMsPerToken: number;
  /** The fastest decode step: the step's own work, with the least of other jobs' in it. */
  fullMsPerTokenMin: number;
  sinkMsPerTokenMin: number;
  fullKvBytes: number;
  fullHeldRows: number;
  sinkMsPerToken: number;
  sinkKvBytes: number;
  sinkHeldRows: number;
}

/**
 * One engine session per context length n and mask: prefill n tokens, then the median time of a decode
 * step and the KV bytes the session holds (its blocks; the sink-window engine evicts what no later query
 * keeps). Full attention and K sinks + window run the same weights. The sessions of one mask are all
 * open at once and take their decode steps in turn (1K, 8K, 32K, 1K, ...), so a burst of other work on a
 * shared machine lands on every length alike instead of on whichever length was measuring then.
 */
function sessionCurve(cfg: ModelConfig, K: number, W: number, lengths: number[], decodeTokens: number, weights: Float32Array | null): SessionRow[] {
  const rng = new Rng(3, "xoshiro128**");
  const prompts = lengths.map((n) => Array.from({ length: n }, () => 4 + (rng.nextU32() % (cfg.vocabSize - 4))));
  const measure = (attention: { window: number; sinks: number }) => {
    const open = prompts.map((prompt) => {
      const engine = createRandomModel(cfg, 5, { kernels: getKernels(), attention });
      if (weights) engine.weights.data.set(weights);
      const s = engine.sessionSync(prompt);
      engine.sampleBatchSync([s], [{ maxTokens: 1, seed: 0, temperature: 1 }]); // the prefill, untimed
      return { engine, s, times: [] as number[] };
    });
    for (let i = 1; i <= decodeTokens; i++) {
      for (const x of open) {
        const t0 = performance.now();
        x.engine.sampleBatchSync([x.s], [{ maxTokens: 1, seed: i, temperature: 1 }]);
        x.times.push(performance.now() - t0);
      }
    }
    return open.map((x) => {
      const out = { ms: median(x.times), min: Math.min(...x.times), bytes: x.s.kvBytes, rows: x.s.heldBlocks * x.engine.pool.blockSize };
      x.engine.dispose();
      return out;
    });
  };
  const full = measure({ window: 0, sinks: 0 });
  const sink = measure({ window: W, sinks: K });
  return lengths.map((n, i) => {
    process.stderr.write(`  session at ${n}: full ${full[i]!.ms.toFixed(2)} ms/token, sinks+window ${sink[i]!.ms.toFixed(2)} ms/token\n`);
    return {
      context: n, fullMsPerToken: full[i]!.ms, fullMsPerTokenMin: full[i]!.min, fullKvBytes: full[i]!.bytes, fullHeldRows: full[i]!.rows,
      sinkMsPerToken: sink[i]!.ms, sinkMsPerTokenMin: sink[i]!.min, sinkKvBytes: sink[i]!.bytes, sinkHeldRows: sink[i]!.rows,
    };
  });
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/**
 * The sink-window figures of a curve in one place: ms/token at the longest context over the shortest
 * (target: within 10%, so 0.9..1.1) and the largest over the smallest across lengths, and the KV bytes
 * held at the longest context over the shortest (the rows held differ by at most one block, with where
 * the window's edge falls in a block).
 */
function flatness(rows: SessionRow[]) {
  const ms = rows.map((r) => r.sinkMsPerToken);
  const fastest = rows.map((r) => r.sinkMsPerTokenMin);
  const kv = rows.map((r) => r.sinkKvBytes);
  return {
    sinkMsPerTokenLongestOverShortest: ms.at(-1)! / ms[0]!,
    sinkMsPerTokenMaxOverMin: Math.max(...ms) / Math.min(...ms),
    sinkFastestMsPerTokenLongestOverShortest: fastest.at(-1)! / fastest[0]!,
    sinkFastestMsPerTokenMaxOverMin: Math.max(...fastest) / Math.min(...fastest),
    sinkKvBytesLongestOverShortest: kv.at(-1)! / kv[0]!,
    sinkKvBytesMaxOverMin: Math.max(...kv) / Math.min(...kv),
    fullMsPerTokenLongestOverShortest: rows.at(-1)!.fullMsPerToken / rows[0]!.fullMsPerToken,
    fullKvBytesLongestOverShortest: rows.at(-1)!.fullKvBytes / rows[0]!.fullKvBytes,
  };
}

function printFlatness(f: ReturnType<typeof flatness>): void {
  console.log(`\nK+W, longest context over shortest: ms/token x${f.sinkMsPerTokenLongestOverShortest.toFixed(3)} (largest over smallest x${f.sinkMsPerTokenMaxOverMin.toFixed(3)}; target within 10%), fastest step x${f.sinkFastestMsPerTokenLongestOverShortest.toFixed(3)} (largest over smallest x${f.sinkFastestMsPerTokenMaxOverMin.toFixed(3)}), KV bytes x${f.sinkKvBytesLongestOverShortest.toFixed(3)}; full attention: ms/token x${f.fullMsPerTokenLongestOverShortest.toFixed(1)}, KV bytes x${f.fullKvBytesLongestOverShortest.toFixed(1)}`);
}

function sessionTable(title: string, rows: SessionRow[]): void {
  table(title, [
    ["context", "full ms/token (median)", "full fastest step", "full KV bytes held", "full rows held", "K+W ms/token (median)", "K+W fastest step", "K+W KV bytes held", "K+W rows held"],
    ...rows.map((r) => [r.context, r.fullMsPerToken, r.fullMsPerTokenMin, r.fullKvBytes, r.fullHeldRows, r.sinkMsPerToken, r.sinkMsPerTokenMin, r.sinkKvBytes, r.sinkHeldRows]),
  ]);
}

/** Decode time and KV bytes vs context, on the trained model (or a random one of its shape). */
function decodeSection(o: Options, engineModel: Model | null) {
  const cfg = benchConfig(o.quick);
  const K = 4;
  const W = o.seq;
  const lengths = o.quick ? [1024, 2048] : [1024, 2048, 4096, 8192, 16384, 32768];
  const decodeTokens = o.quick ? 8 : 64;
  const weightsFrom = engineModel ? "the trained model" : "a random model of the trained shape";
  const rows = sessionCurve(cfg, K, W, lengths, decodeTokens, engineModel ? engineModel.params.data : null);
  sessionTable(`decode: ms per token and KV-cache bytes vs context, one engine session (K = ${K}, W = ${W}; ${weightsFrom}: ${cfg.numLayers} layers, ${cfg.numKvHeads} kv heads x ${cfg.headDim})`, rows);
  const flat = flatness(rows);
  printFlatness(flat);
  return { K, W, decodeTokens, weights: weightsFrom, rows, flatness: flat };
}

/**
 * A random model with Qwen2.5-0.5B's attention layout (14 query heads, 2 kv heads of 64, GQA 7:1, hidden
 * 896) but 2 layers instead of 24 and a narrow MLP and vocabulary, so that prefilling 32K tokens with full
 * attention fits the section's few minutes on a CPU. KV bytes per token scale with layers: the 0.5B figure
 * is the measured one x 12 (the rows held do not depend on the shape).
 */
function qwenSmallConfig(quick: boolean): ModelConfig {
  return {
    arch: "qwen2", hiddenSize: 896, numLayers: quick ? 1 : 2, numHeads: 14, numKvHeads: 2, headDim: 64,
    intermediateSize: quick ? 256 : 1024, vocabSize: 1024, rmsNormEps: 1e-6, ropeTheta: 1000000, ropeScaling: { type: "none" },
    maxPositionEmbeddings: 65536, tieWordEmbeddings: true, qkvBias: true,
  };
}

/** The session sections' settings: K sinks + a window of W, the context lengths, the decode steps timed. */
function sessionSettings(o: Options) {
  return { K: 4, W: 1024, lengths: o.quick ? [1024, 4096] : [1024, 8192, 32768], decodeTokens: o.quick ? 4 : 48 };
}

/** One engine session at 1K, 8K and 32K tokens of context: full attention vs the sink-window mask. */
function sessionSection(o: Options) {
  const cfg = qwenSmallConfig(o.quick);
  const { K, W, lengths, decodeTokens } = sessionSettings(o);
  const rows = sessionCurve(cfg, K, W, lengths, decodeTokens, null);
  const layersOf05B = 24;
  sessionTable(`session: one engine session, full attention vs K = ${K} sinks + W = ${W} (random model, Qwen2.5-0.5B attention layout: 14 heads, 2 kv heads x 64, hidden 896; ${cfg.numLayers} layers, MLP ${cfg.intermediateSize}, vocab ${cfg.vocabSize}; KV bytes at 24 layers = x ${layersOf05B / cfg.numLayers})`, rows);
  const flat = flatness(rows);
  printFlatness(flat);
  return {
    shape: cfg, K, W, decodeTokens, kvBytesScaleTo05B: layersOf05B / cfg.numLayers, flatness: flat,
    rows: rows.map((r) => ({
      ...r,
      fullKvBytesAt05B: (r.fullKvBytes * layersOf05B) / cfg.numLayers,
      sinkKvBytesAt05B: (r.sinkKvBytes * layersOf05B) / cfg.numLayers,
    })),
  };
}

/** The session section's measurement on the benchmark's trained model (its weights, its shape). */
function sessionTrainedSection(o: Options, tr: { engine: EmbeddedEngine; steps: number; reused: boolean }) {
  const cfg = tr.engine.config;
  const { K, W, lengths, decodeTokens } = sessionSettings(o);
  const rows = sessionCurve(cfg, K, W, lengths, decodeTokens, tr.engine.weights.data);
  sessionTable(`session-trained: one engine session, full attention vs K = ${K} sinks + W = ${W}, on the benchmark's trained model (${tr.steps} steps${tr.reused ? ", reused from --checkpoint" : ""}: ${cfg.numLayers} layers, hidden ${cfg.hiddenSize}, ${cfg.numKvHeads} kv heads x ${cfg.headDim}, vocab ${cfg.vocabSize})`, rows);
  const flat = flatness(rows);
  printFlatness(flat);
  return {
    model: { params: tr.engine.weights.data.length, numLayers: cfg.numLayers, hiddenSize: cfg.hiddenSize, numHeads: cfg.numHeads, numKvHeads: cfg.numKvHeads, headDim: cfg.headDim, vocabSize: cfg.vocabSize },
    trainSteps: tr.steps, reused: tr.reused, K, W, decodeTokens, rows, flatness: flat,
  };
}

// ------------------------------------------------------------------------------------------ episode

/** The long-episode suite: the retail customer-service suite with its scripted user (see docs/envs-tau.md). */
const EPISODE_ENV = "sinkflex/tau-retail-v0";

interface TurnKv {
  turn: number;
  /** Tokens in the episode's session after the turn's sample. */
  contextTokens: number;
  /** KV bytes the episode's session holds (its blocks). */
  sessionKvBytes: number;
  sessionHeldRows: number;
  /** KV bytes of every block in use in the engine (the episode, the rollout's shared prompt sessions). */
  engineKvBytes: number;
}

/**
 * The rollout's sampler (the engine) with a record after each sampleBatch: with one episode in flight a
 * call is one turn, and its session is the episode's.
 */
function recordingSampler(engine: EmbeddedEngine, turns: TurnKv[]): PolicySampler {
  return {
    get policyVersion() {
      return engine.policyVersion;
    },
    session: (prefix) => engine.session(prefix),
    sampleBatch: async (sessions, params) => {
      const out = await engine.sampleBatch(sessions, params);
      for (const s of sessions as EmbeddedSession[]) {
        turns.push({
          turn: turns.length + 1, contextTokens: s.length, sessionKvBytes: s.kvBytes, sessionHeldRows: s.heldBlocks * engine.pool.blockSize,
          engineKvBytes: engine.pool.usedBlocks * engine.pool.blockBytes,
        });
      }
      return out;
    },
  };
}

/** The largest |behaviour log-prob - teacher-forced log-prob| over a trajectory's sampled tokens. */
async function logprobGap(engine: EmbeddedEngine, traj: Trajectory): Promise<{ gap: number; scored: number }> {
  let gap = 0;
  let scored = 0;
  for (const seg of traj.segments) {
    const [lp] = await engine.logprobs([seg.tokens]);
    for (let i = 1; i < seg.tokens.length; i++) {
      if (!seg.lossMask[i]) continue;
      gap = Math.max(gap, Math.abs(seg.behaviourLogprobs[i]! - lp![i - 1]!));
      scored++;
    }
  }
  return { gap, scored };
}

/**
 * A real 30-turn episode of the retail suite through the rollout path (the agent loop, its renderer and
 * batch decoder, the engine's sessions), once with full attention and once under K sinks + window: KV
 * bytes the episode's session holds after each turn, and the largest gap between the rollout's behaviour
 * log-probs and the teacher-forced training log-probs of the same tokens under the same mask (fp32).
 * The policy is a random model with the session section's Qwen2.5-0.5B attention layout over a trimmed
 * Qwen3 vocabulary: its turns are noise, which the scripted user answers turn after turn (an episode
 * ends at the user's 40th reply, a transfer or a STOP), so the episode runs its 30 turns.
 */
async function episodeSection(o: Options) {
  registerBundledEnvs();
  const turns = o.quick ? 6 : 30;
  const K = 4;
  const W = o.quick ? 256 : 1024;
  const tokenizer = loadQwen3Tokenizer();
  const template = ChatTemplate.fromTokenizer(tokenizer);
  const env = await makeChatEnv(EPISODE_ENV, {});
  const [obs] = await env.reset({ seed: 0, options: { taskIndex: 0 } });
  await env.close();
  const codec = tokenCodec(tokenizer, TrimmedVocab.build(tokenizer, [tokenizer.encode(template.render(obs.messages, { tools: obs.tools }))]));
  const cfg: ModelConfig = { ...qwenSmallConfig(o.quick), vocabSize: codec.size };
  const runs = [];
  let blockBytes = 0;
  for (const attention of [{ window: 0, sinks: 0 }, { window: W, sinks: K }]) {
    const engine = createRandomModel(cfg, 5, { kernels: getKernels(), attention });
    blockBytes = engine.pool.blockBytes;
    const record: TurnKv[] = [];
    const rollout = new Rollout(recordingSampler(engine, record), codec, template, {
      maxTurns: turns, maxTokensPerTurn: 24, turnLimit: "close", maxContextTokens: 32768, seed: 5, temperature: 1,
    });
    const t0 = performance.now();
    const [traj] = await rollout.runGroup({ envId: EPISODE_ENV, makeEnv: () => makeChatEnv(EPISODE_ENV, {}), reset: { seed: 0, options: { taskIndex: 0 } }, groupSize: 1 });
    const seconds = (performance.now() - t0) / 1000;
    await rollout.close();
    if (traj!.endReason === "error") throw new Error(`the episode failed: ${traj!.error}`);
    const { gap, scored } = await logprobGap(engine, traj!);
    const name = attention.window ? `K = ${K} sinks + W = ${W}` : "full attention";
    process.stderr.write(`  episode (${name}): ${traj!.turns.length} turns, ${record.at(-1)?.contextTokens} tokens, ${seconds.toFixed(1)} s\n`);
    runs.push({
      mask: name, window: attention.window, sinks: attention.sinks, turns: traj!.turns.length, endReason: traj!.endReason, seconds,
      contextTokens: record.at(-1)?.contextTokens ?? 0, maxAbsLogprobGap: gap, scoredTokens: scored, kvPerTurn: record,
    });
    engine.dispose();
  }
  const [full, sink] = runs as [(typeof runs)[0], (typeof runs)[0]];
  // once the window is full (the context holds K + W tokens), the session's KV bytes stay within one block
  const filled = sink.kvPerTurn.filter((r) => r.contextTokens >= K + W);
  const sinkAfterFill = filled.length
    ? { turns: filled.length, minBytes: Math.min(...filled.map((r) => r.sessionKvBytes)), maxBytes: Math.max(...filled.map((r) => r.sessionKvBytes)) }
    : null;
  table(`episode: ${EPISODE_ENV} task 0 through the rollout path, KV bytes of the episode's session after each turn (random model: ${cfg.numLayers} layers, 14 heads, 2 kv heads x 64, vocab ${cfg.vocabSize})`, [
    ["turn", "full: context tokens", "full: KV bytes held", `K+W: context tokens`, `K+W: KV bytes held`, "K+W: rows held"],
    ...Array.from({ length: Math.max(full.kvPerTurn.length, sink.kvPerTurn.length) }, (_, i) => {
      const f = full.kvPerTurn[i];
      const k = sink.kvPerTurn[i];
      return [i + 1, f?.contextTokens ?? "-", f?.sessionKvBytes ?? "-", k?.contextTokens ?? "-", k?.sessionKvBytes ?? "-", k?.sessionHeldRows ?? "-"];
    }),
  ]);
  table("episode: rollout behaviour log-probs vs teacher-forced training log-probs of the same tokens, same mask (fp32)", [
    ["mask", "turns", "end", "context tokens", "sampled tokens scored", "max |rollout - teacher-forced|"],
    ...runs.map((r) => [r.mask, r.turns, r.endReason, r.contextTokens, r.scoredTokens, r.maxAbsLogprobGap.toExponential(2)]),
  ]);
  if (sinkAfterFill) {
    console.log(`\nK+W: after the window filled (${sinkAfterFill.turns} turns) the session held ${sinkAfterFill.minBytes}..${sinkAfterFill.maxBytes} bytes (one block = ${blockBytes} bytes); full attention ended at ${full.kvPerTurn.at(-1)?.sessionKvBytes} bytes`);
  }
  return { env: EPISODE_ENV, task: 0, K, W, maxTokensPerTurn: 24, shape: cfg, blockBytes, runs, sinkKvAfterWindowFull: sinkAfterFill };
}

// ------------------------------------------------------------------------------------------ sink logit

/**
 * The sink logit's step-0 invariance on the benchmark's trained model (or a random model of its shape
 * when none was trained or found): initialized on 8 sequences of the task, checked on 8 others.
 * Target: max |Δlogit| <= 1e-4 on both.
 */
function sinkLogitSection(o: Options, engine: EmbeddedEngine | null) {
  const cfg = benchConfig(o.quick);
  const own = engine ?? createRandomModel(cfg, INIT_SEED, { kernels: getKernels() });
  const model = engine ? "the trained benchmark model" : "a random model of the benchmark's shape";
  const task = new MultiBackcopy(cfg.vocabSize, DATA_SEED, o.triggers, o.triggerRate);
  const rng = new Rng(123, "xoshiro128**");
  const seqs = (n: number) => Array.from({ length: n }, () => task.sequence(rng, o.seq, o.sinkAt));
  const calibration = seqs(8);
  const heldOut = seqs(8);
  const init = initSinkLogits(own.weights, own.kernels, calibration);
  const heldOutChange = maxLogitDifference(buildModel(own.weights, own.kernels), buildModel(init.weights, own.kernels), heldOut);
  const target = 1e-4;
  const r = {
    model, sequences: 8, length: o.seq, epsilon: init.epsilon, maxLogitChangeCalibration: init.maxLogitChange, maxLogitChangeHeldOut: heldOutChange,
    target, withinTarget: init.maxLogitChange <= target && heldOutChange <= target,
  };
  table(`sink logit at step 0 (${model}; 8 calibration and 8 held-out sequences of ${o.seq})`, [
    ["epsilon", "max abs logit change, calibration", "max abs logit change, held-out", "within 1e-4"],
    [r.epsilon, r.maxLogitChangeCalibration.toExponential(2), r.maxLogitChangeHeldOut.toExponential(2), r.withinTarget ? "yes" : "NO"],
  ]);
  if (!engine) own.dispose();
  return r;
}

// ------------------------------------------------------------------------------------------ sections

const tokenName = (id: number) => (id === SINK_TOKEN ? "SINK" : `#${id}`);

/** The probe at the issue's settings, each head's heaviest keys, and the recovery verdict. */
function probeSection(o: Options, tr: TrainResult, evalSeqs: number[][]) {
  const T = o.seq;
  const delta = 64 > T / 2 ? 8 : 64;
  const profile: SinkProfile = probeSinks(tr.engine.model, evalSeqs, { delta, queries: 128, model: "bench model" });
  console.log(`\n## probe (delta ${delta}, threshold 0.3, a quarter of the heads; ${evalSeqs.length} held-out sequences of ${T})\n`);
  console.log(formatProfile(profile, tokenName));
  const found = profile.layers.filter((l) => l.positions.some((p) => p.position === o.sinkAt)).map((l) => l.layer);
  let low: SinkProfile | null = null;
  let foundLow: number[] = [];
  if (found.length === 0) {
    low = probeSinks(tr.engine.model, evalSeqs, { delta, queries: 128, threshold: o.lowThreshold, model: "bench model" });
    console.log(`\n## probe (delta ${delta}, threshold ${o.lowThreshold})\n`);
    console.log(formatProfile(low, tokenName));
    foundLow = low.layers.filter((l) => l.positions.some((p) => p.position === o.sinkAt)).map((l) => l.layer);
  }
  // Where each head's mass goes: α at k and its three heaviest keys.
  const { numLayers: L, numHeads: H } = tr.cfg;
  const acc = new Float64Array(L * H * T);
  const cnt = new Float64Array(T);
  const ws = new TrainWorkspace(tr.cfg);
  for (const s of evalSeqs) {
    const { sum, count } = attentionMass(tr.engine.model, ws, s, delta, 128);
    for (let i = 0; i < sum.length; i++) acc[i]! += sum[i]!;
    for (let i = 0; i < T; i++) cnt[i]! += count[i]!;
  }
  const heads: { layer: number; head: number; alphaAtSink: number; heaviest: { position: number; alpha: number }[] }[] = [];
  for (let l = 0; l < L; l++) {
    for (let h = 0; h < H; h++) {
      const alphas = Array.from({ length: T }, (_, k) => ({ position: k, alpha: cnt[k]! > 0 ? acc[(l * H + h) * T + k]! / cnt[k]! : 0 }));
      const atSink = alphas[o.sinkAt]!.alpha;
      alphas.sort((x, y) => y.alpha - x.alpha);
      heads.push({ layer: l, head: h, alphaAtSink: atSink, heaviest: alphas.slice(0, 3) });
    }
  }
  table(`probe detail: α at position ${o.sinkAt} and the three heaviest keys of each head`, [
    ["layer", "head", `α at ${o.sinkAt}`, "heaviest keys (position: α)"],
    ...heads.map((x) => [x.layer, x.head, x.alphaAtSink.toFixed(3), x.heaviest.map((k) => `${k.position}: ${k.alpha.toFixed(3)}`).join(", ")]),
  ]);
  const headsAtSink = heads.filter((x) => x.alphaAtSink >= 0.3).length;
  const argmaxAt = heads.filter((x) => x.heaviest[0]!.position === o.sinkAt).length;
  const otherSinks = profile.layers.flatMap((l) => l.positions.filter((p) => p.position !== o.sinkAt).map((p) => `${l.layer}:${p.position}`));
  console.log(`\nrecovery: the fixed token is at position ${o.sinkAt}; layers with a sink there at threshold 0.3: ${found.length ? found.join(", ") : "none"}` +
    `${low ? ` (at threshold ${o.lowThreshold}: ${foundLow.length ? foundLow.join(", ") : "none"})` : ""}; sinks elsewhere: ${otherSinks.length ? otherSinks.join(" ") : "none"}; ` +
    `heads with α >= 0.3 at ${o.sinkAt}: ${headsAtSink}/${heads.length}; heads whose heaviest key is ${o.sinkAt}: ${argmaxAt}/${heads.length}` +
    ` -> ${found.length > 0 && otherSinks.length === 0 ? "RECOVERED" : "NOT RECOVERED"}`);
  return {
    profile, recovered: found.length > 0 && otherSinks.length === 0, layers: found, otherSinks,
    lowThreshold: low ? { profile: low, layers: foundLow } : null, headsWithAlphaAtSink: headsAtSink, headsWithHeaviestKeyAtSink: argmaxAt, heads,
  };
}

/** Perplexity and KL by query position for every variant, on sequences of 4W. */
function pplSection(o: Options, tr: TrainResult, profile: SinkProfile, W: number, evalSeqs: number[][]) {
  // The rewriter's layout for this model: no fixed slots (K = 0), the probed sink pinned (budget 1).
  const pinnedFor = (s: number[]) => rewriteForSinks([s], profile, { sinks: 0, window: W, pinBudget: 1 }).pinned;
  const variants: (Variant & { pinnedFor?: (s: number[]) => Uint8Array })[] = [
    { name: "full attention", window: 0, sinks: 0, pinned: null },
    { name: `window only (W = ${W})`, window: W, sinks: 0, pinned: null },
    ...[1, 2, 4].map((K) => ({ name: `K = ${K} sinks + window`, window: W, sinks: K, pinned: null })),
    { name: `rewriter: K = 0, pin budget 1 + window (profile at threshold ${profile.settings.threshold})`, window: W, sinks: 0, pinned: null, pinnedFor },
  ];
  const T = evalSeqs[0]!.length;
  const buckets = [[0, W], [W, 2 * W], [2 * W, 3 * W], [3 * W, 4 * W]];
  const bucketNames = buckets.map(([lo, hi]) => `${lo}-${hi! - 1}`);
  const pins = [...pinnedFor(evalSeqs[0]!)].flatMap((p, i) => (p ? [i] : []));
  console.log(`\nrewriter pins (first sequence): positions ${pins.join(", ") || "none"}`);
  const t0 = performance.now();
  const results = evaluateAll(tr.engine.model, variants, evalSeqs, buckets);
  process.stderr.write(`  evaluated W = ${W} in ${((performance.now() - t0) / 1000).toFixed(0)} s\n`);
  const where = T > o.seq ? `${T / o.seq}x the training length` : "the training length";
  table(`perplexity by query position (W = ${W}; ${evalSeqs.length} held-out sequences of ${T} = 4W, ${where})`, [
    ["variant", ...bucketNames], ...variants.map((v, i) => [v.name, ...results.ppl[i]!]),
  ]);
  table(`KL(full || variant) of the next-token distributions (nats), by query position (W = ${W})`, [
    ["variant", ...bucketNames], ...variants.slice(1).map((v, i) => [v.name, ...results.kl[i + 1]!]),
  ]);
  return {
    window: W, sequence: T, sequences: evalSeqs.length, buckets, rewriterPins: pins,
    variants: variants.map((v, i) => ({ name: v.name, window: v.window, sinks: v.sinks, ppl: results.ppl[i], kl: results.kl[i] })),
  };
}

// ------------------------------------------------------------------------------------------ pipeline

/** The pipeline variants: each trains configs/demo-quick.yaml with this attention section. */
const PIPELINE_VARIANTS: { variant: string; attention: Record<string, unknown> }[] = [
  { variant: "full attention", attention: { mode: "full" } },
  { variant: "fixed first-K (sink-window)", attention: { mode: "sink-window", sinks: 4, window: 512 } },
  { variant: "profile (own sinks)", attention: { mode: "profile", sinks: 4, window: 512, pinBudget: 4 } },
  { variant: "profile + sink logit", attention: { mode: "profile", sinks: 4, window: 512, pinBudget: 4, sinkLogit: true } },
];

async function pipelineSection(): Promise<Record<string, unknown>> {
  const base = loadConfigFile(join(import.meta.dirname, "..", "configs", "demo-quick.yaml"));
  const runsDir = mkdtempSync(join(tmpdir(), "sinkflex-attention-pipeline-"));
  const runs: Record<string, unknown>[] = [];
  let fullFinal: string | null = null;
  for (const v of PIPELINE_VARIANTS) {
    process.stderr.write(`pipeline: ${v.variant}\n`);
    const cfg = validateConfig({ ...base, name: v.variant.replace(/[^a-z0-9]+/gi, "-"), runsDir, attention: v.attention });
    const t0 = performance.now();
    const r = await trainPipeline(cfg, { quiet: true });
    const wallSeconds = (performance.now() - t0) / 1000;
    const after = r.evalAfter ?? {};
    const perSuite = Object.fromEntries(Object.entries(after).map(([k, e]) => [k, { successes: e.successes, tasks: e.trials, rate: e.rate }]));
    const totals = Object.values(after).reduce((a, e) => ({ s: a.s + e.successes, n: a.n + e.trials }), { s: 0, n: 0 });
    const final = join(r.runDir, "final");
    const attention = existsSync(join(final, "sinkflex_attention.json")) ? JSON.parse(readFileSync(join(final, "sinkflex_attention.json"), "utf8")) : null;
    if (v.attention.mode === "full") fullFinal = final;
    // The profile the policy was laid out with (profile modes): its sink positions per layer.
    const profilePath = join(final, SINK_PROFILE_FILE);
    const profile = existsSync(profilePath) ? (JSON.parse(readFileSync(profilePath, "utf8")) as SinkProfile) : null;
    const sinks = profile ? { positionSinks: sinkPositions(profile), prefix: profile.prefix, sequences: profile.sequences } : null;
    runs.push({ variant: v.variant, config: v.attention, heldOutSuccess: totals.n ? totals.s / totals.n : 0, successes: totals.s, tasks: totals.n, perSuite, wallSeconds, attention, profile: sinks });
  }
  table("pipeline (configs/demo-quick.yaml, seed 0)", [
    ["variant", "mask (window, sinks)", "position sinks found", "held-out success", "wall seconds"],
    ...runs.map((r) => {
      const a = r.attention as { window: number; sinks: number } | null;
      const p = r.profile as { positionSinks: number[] } | null;
      return [String(r.variant), a ? `${a.window}, ${a.sinks}` : "-", p ? (p.positionSinks.join(", ") || "none") : "-", `${r.successes}/${r.tasks} (${(r.heldOutSuccess as number).toFixed(3)})`, (r.wallSeconds as number).toFixed(1)];
    }),
  ]);
  // Step-0 invariance of the sink logit on the trained full-attention policy: calibrated on 8 sequences,
  // checked on 8 others (token ids drawn over its vocabulary).
  const engine = loadEngine(fullFinal!, { kernels: getKernels() });
  const rng = new Rng(7, "xoshiro128**");
  const V = engine.usableTokens ?? engine.config.vocabSize;
  const seqs = (n: number) => Array.from({ length: n }, () => Array.from({ length: 96 }, () => rng.int(Math.min(V, engine.config.vocabSize))));
  const calibration = seqs(8);
  const heldOut = seqs(8);
  const init = initSinkLogits(engine.weights, engine.kernels, calibration);
  const heldOutChange = maxLogitDifference(buildModel(engine.weights, engine.kernels), buildModel(init.weights, engine.kernels), heldOut);
  const sinkLogitStep0 = { epsilon: init.epsilon, maxLogitChangeCalibration: init.maxLogitChange, maxLogitChangeHeldOut: heldOutChange };
  table("sink logit at step 0 (trained full-attention policy)", [
    ["epsilon", "max abs logit change, calibration", "max abs logit change, held-out"],
    [init.epsilon, init.maxLogitChange.toExponential(2), heldOutChange.toExponential(2)],
  ]);
  engine.dispose();
  rmSync(runsDir, { recursive: true, force: true });
  return { recipe: "configs/demo-quick.yaml", runs, sinkLogitStep0 };
}

// ------------------------------------------------------------------------------------------ recipe runs

/** The layouts --recipe-runs compares on the demo's recipe (whose own attention section is the second). */
const RECIPE_VARIANTS: { variant: string; attention: Record<string, unknown> }[] = [
  { variant: "full attention", attention: { mode: "full" } },
  { variant: "fixed first-K (sink-window)", attention: { mode: "sink-window", sinks: 4, window: 512 } },
  { variant: "profile (own sinks, pinned token sinks)", attention: { mode: "profile", sinks: 4, window: 512, pinBudget: 4 } },
];

/**
 * The demo's recipe three times (see the file comment): one calibration and plan, as `sinkflex demo`
 * makes them (without its naive replay), then each layout trained under the plan's counts with the
 * deadlines runDemo sets, from its own start.
 */
async function recipeRunsSection(o: Options): Promise<Record<string, unknown>> {
  const runsDir = mkdtempSync(join(tmpdir(), "sinkflex-attention-recipe-"));
  const budgetMs = o.minutes * 60_000;
  // --quick: the demo's smoke-test recipe as written, without calibration or deadlines (checks the mode itself).
  const recipe = demoRecipe({ runsDir, minutes: o.minutes, quick: o.quick });
  let plan: BudgetPlan | null = null;
  let calibrationSeconds = 0;
  if (!o.quick) {
    process.stderr.write(`recipe-runs: calibrating this machine on ${recipe.path} (once for the three runs)\n`);
    const t0 = performance.now();
    const cal = await calibrate(recipe.config, {});
    calibrationSeconds = (performance.now() - t0) / 1000;
    // Every run gets the whole budget: the calibration is not part of any.
    plan = planBudgetRun(budgetMs, { ...cal, elapsedMs: 0 }, planRecipe(recipe.config, recipe.scale, 0));
    for (const line of plan.lines) process.stderr.write(`  ${line}\n`);
  }
  const planned = plan ? plannedConfig(recipe.config, plan) : recipe.config;
  const runs: Record<string, unknown>[] = [];
  const successOf = (table: Record<string, { successes: number; trials: number }> | undefined) => {
    const t = Object.values(table ?? {}).reduce((a, e) => ({ s: a.s + e.successes, n: a.n + e.trials }), { s: 0, n: 0 });
    return { successes: t.s, tasks: t.n, rate: t.n ? t.s / t.n : 0 };
  };
  for (const v of RECIPE_VARIANTS) {
    process.stderr.write(`recipe-runs: ${v.variant}${plan ? ` (${o.minutes} minutes)` : ""}\n`);
    const cfg = validateConfig({ ...planned, name: `recipe-${v.variant.replace(/[^a-z0-9]+/gi, "-")}`, attention: v.attention });
    const start = performance.now();
    // runDemo's deadlines: the evaluation after RL done by the end less the margin; SFT ends where the
    // plan's SFT ends (15% slack), or at 52% of the budget, leaving both evaluations and GRPO's floor.
    let budget = {};
    if (plan) {
      const evalBy = start + budgetMs - plan.ms.margin;
      const grpoFloor = Math.min(plan.grpoSteps, recipe.scale?.grpoMinSteps ?? 1) * (plan.ms.grpo / Math.max(1, plan.grpoSteps));
      const sftDeadline = Math.min(evalBy - (plan.ms.evalBefore + plan.ms.evalAfter) - grpoFloor, Math.max(start + 0.52 * budgetMs, start + 1.15 * (plan.ms.prep + plan.ms.sft)));
      budget = { sftDeadline, evalBy };
    }
    const r = await trainPipeline(cfg, { quiet: true, ...budget });
    const wallSeconds = (performance.now() - start) / 1000;
    const after = successOf(r.evalAfter);
    const before = successOf(r.evalBefore);
    const perSuite = Object.fromEntries(Object.entries(r.evalAfter ?? {}).map(([k, e]) => [k, { successes: e.successes, tasks: e.trials, rate: e.rate, beforeRl: r.evalBefore?.[k]?.rate ?? null }]));
    const final = join(r.runDir, "final");
    const mask = existsSync(join(final, "sinkflex_attention.json")) ? JSON.parse(readFileSync(join(final, "sinkflex_attention.json"), "utf8")) : null;
    const setup = readFileSync(join(r.runDir, "metrics.jsonl"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>).find((m) => m.attentionProfile);
    runs.push({
      variant: v.variant, attention: v.attention, heldOutSuccess: after.rate, successes: after.successes, tasks: after.tasks, beforeRl: before, perSuite,
      wallSeconds, sftSteps: r.sft?.steps ?? 0, sftAllSteps: r.sft?.allSteps ?? 0, grpoSteps: r.rewardCurve.length, grpoPlannedSteps: cfg.grpo.steps, mask,
      profile: setup?.attentionProfile ?? null,
    });
  }
  table(`recipe runs (${recipe.path.split("/").slice(-2).join("/")}, seed ${planned.seed}, ${plan ? `${o.minutes} minutes each, the same planned counts` : "--quick: as written, no budget"})`, [
    ["variant", "mask (window, sinks)", "held-out success after RL", "after SFT", "SFT steps", "GRPO steps", "wall seconds"],
    ...runs.map((r) => {
      const m = r.mask as { window: number; sinks: number } | null;
      const b = r.beforeRl as { successes: number; tasks: number; rate: number };
      return [String(r.variant), m ? `${m.window}, ${m.sinks}` : "full", `${r.successes}/${r.tasks} (${(r.heldOutSuccess as number).toFixed(3)})`, `${b.successes}/${b.tasks} (${b.rate.toFixed(3)})`,
        `${r.sftSteps as number}/${r.sftAllSteps as number}`, `${r.grpoSteps as number}/${r.grpoPlannedSteps as number}`, (r.wallSeconds as number).toFixed(0)];
    }),
  ]);
  const suites = Object.keys((runs[0]!.perSuite as Record<string, unknown>) ?? {});
  table("recipe runs, held-out success after RL per suite", [
    ["variant", ...suites],
    ...runs.map((r) => [String(r.variant), ...suites.map((s) => {
      const e = (r.perSuite as Record<string, { successes: number; tasks: number }>)[s]!;
      return `${e.successes}/${e.tasks}`;
    })]),
  ]);
  for (const r of runs) if (r.profile) console.log(`\n${String(r.variant)}: layout ${JSON.stringify(r.profile)}`);
  rmSync(runsDir, { recursive: true, force: true });
  return { recipe: recipe.path.split("/").slice(-2).join("/"), minutes: plan ? o.minutes : null, calibrationSeconds, plan: plan?.lines ?? null, runs };
}

// ------------------------------------------------------------------------------------------ main

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const out: Record<string, unknown> = { kernels: getKernels().describe() };
  console.log(`# sinkflex attention benchmark (${getKernels().describe()})`);
  if (o.recipeRuns) {
    out.recipeRuns = await recipeRunsSection(o);
    if (o.json) writeFileSync(o.json, `${JSON.stringify(out, null, 2)}\n`);
    return;
  }
  let trained: EmbeddedEngine | null = null;
  let trainedReused = false;
  if (o.only.has("train")) {
    process.stderr.write(`training (${o.steps} steps of ${o.batch} x ${o.seq} tokens, fixed token at ${o.sinkAt})\n`);
    const tr = train(o);
    trained = tr.engine;
    trainedReused = tr.reused;
    table("train", [
      ["params", "layers", "heads", "hidden", "mlp", "vocab", "sequence", "batch", "steps", "lr", "weight decay", "seconds", "final loss (nats)"],
      [tr.params, tr.cfg.numLayers, tr.cfg.numHeads, tr.cfg.hiddenSize, tr.cfg.intermediateSize, tr.cfg.vocabSize, o.seq, o.batch, o.steps, o.lr, o.weightDecay,
        tr.seconds, tr.losses.at(-1)?.loss ?? NaN],
    ]);
    if (tr.reused) console.log(`\n(trained earlier into ${o.checkpoint}; seconds are that run's)`);
    const evalRng = new Rng(99, "xoshiro128**");
    const probeSeqs = Array.from({ length: o.evalSequences }, () => tr.task.sequence(evalRng, o.seq, o.sinkAt));
    const probe = probeSection(o, tr, probeSeqs);
    const rewriteProfile = probe.recovered || !probe.lowThreshold ? probe.profile : probe.lowThreshold.profile;
    const longRng = new Rng(98, "xoshiro128**");
    const longSeqs = Array.from({ length: Math.max(2, o.evalSequences / 2) }, () => tr.task.sequence(longRng, 4 * o.seq, o.sinkAt));
    const inside = pplSection(o, tr, rewriteProfile, o.seq / 4, probeSeqs);
    const beyond = pplSection(o, tr, rewriteProfile, o.seq, longSeqs);
    out.train = { params: tr.params, cfg: tr.cfg, seconds: tr.seconds, reused: tr.reused, losses: tr.losses, recipe: recipe(o, tr.cfg) };
    out.probe = probe;
    out.ppl = [inside, beyond];
  }
  if ((o.only.has("decode") || o.only.has("sinklogit")) && !trained && o.checkpoint && readStamp(o.checkpoint)) {
    const engine = loadEngine(o.checkpoint, { kernels: getKernels() });
    if (JSON.stringify(engine.config) === JSON.stringify(benchConfig(o.quick))) [trained, trainedReused] = [engine, true];
  }
  if (o.only.has("decode")) out.decode = decodeSection(o, trained ? trained.model : null);
  if (o.only.has("session")) out.session = sessionSection(o);
  if (o.only.has("session-trained")) {
    // The trained model of this run, else the train section's training (reusing --checkpoint when it holds it).
    if (!trained) {
      process.stderr.write(`session-trained: the trained model (${o.steps} steps of ${o.batch} x ${o.seq} tokens${o.checkpoint ? `; reused from ${o.checkpoint} when it holds it` : ""})\n`);
      const tr = train(o);
      [trained, trainedReused] = [tr.engine, tr.reused];
    }
    out.sessionTrained = sessionTrainedSection(o, { engine: trained, steps: o.steps, reused: trainedReused });
  }
  if (o.only.has("episode")) out.episode = await episodeSection(o);
  if (o.only.has("sinklogit")) out.sinkLogitStep0 = sinkLogitSection(o, trained);
  if (o.only.has("pipeline")) out.pipeline = await pipelineSection();
  if (o.json) writeFileSync(o.json, `${JSON.stringify(out, null, 2)}\n`);
}

await main();
