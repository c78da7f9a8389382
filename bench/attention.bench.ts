/**
 * The attention benchmark: evidence for sink-normalized attention, on a small model trained here.
 * Prints one table per section and, with --json FILE, writes every figure.
 *
 *   train     a small Qwen2-shaped model trained with full attention on sequences whose token at position
 *             k (default 3) is one fixed token and whose first k tokens are random; the content is random
 *             blocks and copies of recent blocks (so heads often have nothing to attend to)
 *   probe     the probe's per-layer sink table on held-out sequences; recovery: the sink must be at k
 *   ppl       perplexity by context-distance bucket (up to 4x the window) for full attention, window only,
 *             K in {1, 2, 4} sink slots + window, and the rewriter's layout (the probed sink pinned)
 *   kl        KL(full || masked) of the next-token distributions, by bucket
 *   decode    decode time per token and KV-cache bytes vs context length (1K..32K) on a tiny random
 *             model: full attention (the engine's session) vs K sinks + window (the evicting session)
 *
 * Usage: npm run bench:attention -- [--steps N] [--quick] [--only train,decode] [--json FILE]
 *        (--quick: a short run to check the benchmark itself; its figures mean little)
 */
import { writeFileSync } from "node:fs";
import { createRandomModel, loadEngine, type EmbeddedEngine } from "../src/engine/embedded.js";
import type { TokenLoss } from "../src/engine/types.js";
import { getKernels } from "../src/kernels/index.js";
import type { ModelConfig } from "../src/model/config.js";
import { Rng } from "../src/model/random.js";
import { TrainWorkspace, type Model } from "../src/model/transformer.js";
import {
  attentionMass, formatProfile, MaskedSession, probeSinks, rewriteForSinks, sequenceLogits, type SinkProfile,
} from "../src/attention/index.js";

// ------------------------------------------------------------------------------------------ options

interface Options {
  steps: number;
  quick: boolean;
  only: Set<string>;
  json: string | null;
  sinkAt: number;
  lr: number;
  window: number;
  save: string | null;
  load: string | null;
  weightDecay: number;
  lowThreshold: number;
}

function parseArgs(argv: string[]): Options {
  const o: Options = { steps: 3000, quick: false, only: new Set(["train", "decode"]), json: null, sinkAt: 3, lr: 1e-2, window: 32, save: null, load: null, weightDecay: 0.1, lowThreshold: 0.1 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const val = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === "--steps") o.steps = Number(val());
    else if (a === "--quick") o.quick = true;
    else if (a === "--only") o.only = new Set(val().split(","));
    else if (a === "--json") o.json = val();
    else if (a === "--sink-at") o.sinkAt = Number(val());
    else if (a === "--lr") o.lr = Number(val());
    else if (a === "--window") o.window = Number(val());
    else if (a === "--save") o.save = val();
    else if (a === "--wd") o.weightDecay = Number(val());
    else if (a === "--low-threshold") o.lowThreshold = Number(val());
    else if (a === "--load") o.load = val();
    else if (a === "--help" || a === "-h") {
      console.log("npm run bench:attention -- [--steps N] [--quick] [--only train,decode] [--sink-at K] [--lr X] [--window W] [--wd X] [--low-threshold A] [--save DIR] [--load DIR] [--json FILE]");
      process.exit(0);
    } else throw new Error(`unknown option ${a}; see --help`);
  }
  if (o.quick) o.steps = Math.min(o.steps, 40);
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

// ------------------------------------------------------------------------------------------ data

const SINK_TOKEN = 0;
/** Trigger tokens: after one, the next token copies the token before it. */
const TRIGGERS = [1, 2, 3];

/**
 * The bigram-backcopy task: ids 4..V-1 follow a fixed sparse bigram table (each token has 3 likely
 * successors); after a trigger token the next token is the one just before the trigger. Attention is
 * needed only on triggers, so heads learn to rest on a sink elsewhere. Position k holds the fixed token
 * SINK_TOKEN and positions < k are random, so the one key that is the same in every sequence sits at k.
 */
class BigramBackcopy {
  private readonly next: number[][];

  constructor(readonly V: number, seed: number) {
    const rng = new Rng(seed);
    const plain = V - 4;
    this.next = Array.from({ length: V }, () => Array.from({ length: 3 }, () => 4 + (rng.nextU32() % plain)));
  }

  sequence(rng: Rng, T: number, k: number): number[] {
    const s: number[] = [];
    const plain = () => 4 + (rng.nextU32() % (this.V - 4));
    for (let i = 0; i < k; i++) s.push(plain());
    s.push(SINK_TOKEN);
    s.push(plain());
    while (s.length < T) {
      const cur = s[s.length - 1]!;
      if (TRIGGERS.includes(cur)) s.push(s[s.length - 2]!);
      else if (rng.uniform() < 0.2) s.push(TRIGGERS[rng.nextU32() % TRIGGERS.length]!);
      else s.push(this.next[cur]![rng.nextU32() % 3]!);
    }
    return s;
  }
}

// ------------------------------------------------------------------------------------------ training

const meanNll: TokenLoss = (lps) => {
  const n = lps.reduce((a, l) => a + l.length, 0);
  let loss = 0;
  for (const l of lps) for (const x of l) loss -= x;
  return { loss: loss / n, dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-1 / n)) };
};

interface TrainResult {
  engine: EmbeddedEngine;
  cfg: ModelConfig;
  params: number;
  seconds: number;
  losses: { step: number; loss: number }[];
  task: BigramBackcopy;
}

function train(o: Options, T: number): TrainResult {
  const cfg: ModelConfig = {
    arch: "qwen2", hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 4, headDim: 16, intermediateSize: 128,
    vocabSize: 64, rmsNormEps: 1e-6, ropeTheta: 10000, ropeScaling: { type: "none" }, maxPositionEmbeddings: 65536,
    tieWordEmbeddings: true, qkvBias: true,
  };
  const engine = o.load ? loadEngine(o.load) : createRandomModel(cfg, 1, { kernels: getKernels() });
  const params = engine.weights.data.length;
  const rng = new Rng(7);
  const task = new BigramBackcopy(cfg.vocabSize, 11);
  const batch = 8;
  const losses: { step: number; loss: number }[] = [];
  const t0 = performance.now();
  let avg = 0;
  for (let step = 1; step <= o.steps; step++) {
    const seqs = Array.from({ length: batch }, () => task.sequence(rng, T, o.sinkAt));
    const { loss } = engine.forwardBackwardSync(seqs, meanNll);
    const warm = Math.min(1, step / 50);
    const decay = 0.5 * (1 + Math.cos((Math.PI * step) / o.steps));
    engine.optimStepSync({ lr: o.lr * warm * (0.1 + 0.9 * decay), weightDecay: o.weightDecay, maxGradNorm: 1 });
    avg = step === 1 ? loss : 0.9 * avg + 0.1 * loss;
    if (step % 50 === 0 || step === o.steps) {
      losses.push({ step, loss: avg });
      process.stderr.write(`  step ${step}/${o.steps}  loss ${avg.toFixed(3)}  ${((performance.now() - t0) / 1000).toFixed(0)} s\n`);
    }
  }
  return { engine, cfg, params, seconds: (performance.now() - t0) / 1000, losses, task };
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

function decodeSection(o: Options) {
  const cfg: ModelConfig = {
    arch: "qwen2", hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, intermediateSize: 128,
    vocabSize: 64, rmsNormEps: 1e-6, ropeTheta: 10000, ropeScaling: { type: "none" }, maxPositionEmbeddings: 65536,
    tieWordEmbeddings: true, qkvBias: true,
  };
  const K = 4;
  const W = 256;
  const lengths = o.quick ? [1024, 2048] : [1024, 2048, 4096, 8192, 16384, 32768];
  const decodeTokens = o.quick ? 8 : 32;
  const rng = new Rng(3);
  const rows: { context: number; fullMsPerToken: number; fullKvBytes: number; sinkMsPerToken: number; sinkKvBytes: number; sinkEntries: number }[] = [];
  for (const n of lengths) {
    const prompt = Array.from({ length: n }, () => rng.nextU32() % cfg.vocabSize);
    // full attention: the engine's own session (append-only paged cache)
    const engine = createRandomModel(cfg, 5, { kernels: getKernels() });
    const s = engine.sessionSync([]);
    for (let i = 0; i < n; i += 2048) s.appendSync(prompt.slice(i, i + 2048));
    let t0 = performance.now();
    engine.sampleBatchSync([s], [{ maxTokens: decodeTokens, seed: 1, temperature: 1 }]);
    const fullMs = (performance.now() - t0) / decodeTokens;
    const fullBytes = engine.pool.usedBlocks * engine.pool.blockSize * cfg.numKvHeads * cfg.headDim * 4 * 2 * cfg.numLayers;
    engine.dispose();
    // K sinks + window: the evicting session
    const ms = new MaskedSession(engine.model, { sinks: K, window: W }, { maxChunk: 256 });
    ms.append(prompt);
    t0 = performance.now();
    ms.sample({ maxTokens: decodeTokens, seed: 1 });
    ms.lastLogits();
    const sinkMs = (performance.now() - t0) / decodeTokens;
    rows.push({ context: n, fullMsPerToken: fullMs, fullKvBytes: fullBytes, sinkMsPerToken: sinkMs, sinkKvBytes: ms.kvBytes, sinkEntries: ms.cachedCount });
    process.stderr.write(`  decode at ${n}: full ${fullMs.toFixed(2)} ms/token, sinks+window ${sinkMs.toFixed(2)} ms/token\n`);
  }
  table(`decode: ms per token and KV-cache bytes vs context (K = ${K}, W = ${W}; ${cfg.numLayers} layers, ${cfg.numKvHeads} kv heads x ${cfg.headDim})`, [
    ["context", "full ms/token", "full KV bytes", `K+W ms/token`, "K+W KV bytes (allocated)", "K+W cached entries"],
    ...rows.map((r) => [r.context, r.fullMsPerToken, r.fullKvBytes, r.sinkMsPerToken, r.sinkKvBytes, r.sinkEntries]),
  ]);
  return { K, W, decodeTokens, rows };
}

// ------------------------------------------------------------------------------------------ main

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const out: Record<string, unknown> = { kernels: getKernels().describe() };
  console.log(`# sinkflex attention benchmark (${getKernels().describe()})`);
  if (o.only.has("train")) {
    const W = o.quick ? 32 : o.window;
    const T = 4 * W;
    process.stderr.write(`training (${o.steps} steps, sequence ${T}, sink token at ${o.sinkAt})\n`);
    const tr = train(o, T);
    if (o.save) tr.engine.saveSync(o.save);
    table("train", [
      ["params", "layers", "heads", "hidden", "sequence", "batch", "steps", "seconds", "final loss (nats)"],
      [tr.params, tr.cfg.numLayers, tr.cfg.numHeads, tr.cfg.hiddenSize, T, 8, o.steps, tr.seconds, tr.losses.at(-1)?.loss ?? NaN],
    ]);
    const evalRng = new Rng(99);
    const evalSeqs = Array.from({ length: o.quick ? 4 : 16 }, () => tr.task.sequence(evalRng, T, o.sinkAt));
    const delta = 64 > T / 2 ? 8 : 64;
    const profile: SinkProfile = probeSinks(tr.engine.model, evalSeqs, { delta, queries: 128, model: "bench model" });
    console.log(`\n## probe (delta ${delta}, threshold 0.3)\n`);
    console.log(formatProfile(profile, (id) => (id === SINK_TOKEN ? "SINK" : `#${id}`)));
    const low: SinkProfile = probeSinks(tr.engine.model, evalSeqs, { delta, queries: 128, threshold: o.lowThreshold, model: "bench model" });
    console.log(`\n## probe (delta ${delta}, threshold ${o.lowThreshold})\n`);
    console.log(formatProfile(low, (id) => (id === SINK_TOKEN ? "SINK" : `#${id}`)));
    // Where each head's mass goes: its three heaviest keys (position: mean α over the probed queries).
    const heavy: (string | number)[][] = [["layer", "head", "heaviest keys (position: α)"]];
    const L = tr.cfg.numLayers;
    const Hh = tr.cfg.numHeads;
    const acc = new Float64Array(L * Hh * T);
    const cnt = new Float64Array(T);
    const probeWs = new TrainWorkspace(tr.cfg);
    for (const s of evalSeqs) {
      const { sum, count } = attentionMass(tr.engine.model, probeWs, s, profile.settings.delta, 128);
      for (let i = 0; i < sum.length; i++) acc[i]! += sum[i]!;
      for (let i = 0; i < T; i++) cnt[i]! += count[i]!;
    }
    for (let l = 0; l < L; l++) {
      for (let h = 0; h < Hh; h++) {
        const alphas = Array.from({ length: T }, (_, k) => ({ k, a: cnt[k]! > 0 ? acc[(l * Hh + h) * T + k]! / cnt[k]! : 0 }));
        alphas.sort((x, y) => y.a - x.a);
        heavy.push([l, h, alphas.slice(0, 3).map((x) => `${x.k}: ${x.a.toFixed(3)}`).join(", ")]);
      }
    }
    table("probe detail: where each head's attention mass goes", heavy);
    const found = profile.layers.filter((l) => l.positions.some((p) => p.position === o.sinkAt)).map((l) => l.layer);
    const foundLow = low.layers.filter((l) => l.positions.some((p) => p.position === o.sinkAt)).map((l) => l.layer);
    const argmaxAt = heavy.slice(1).filter((r) => String(r[2]).startsWith(`${o.sinkAt}: `)).length;
    console.log(`\nrecovery: sink token at position ${o.sinkAt}; layers with a sink there: ${found.length ? found.join(", ") : "none"} at threshold 0.3, ${foundLow.length ? foundLow.join(", ") : "none"} at threshold ${o.lowThreshold}; heads whose heaviest key is ${o.sinkAt}: ${argmaxAt}/${heavy.length - 1}`);
    out.train = { ...tr, engine: undefined, task: undefined, T, W };
    out.probe = { profile, lowThresholdProfile: low, recovered: found.length > 0, layers: found, layersAtLowThreshold: foundLow, headsWithHeaviestKeyAtSink: argmaxAt, heads: heavy.length - 1 };
    const rewriteProfile = found.length > 0 ? profile : low;

    // The rewriter's layout for this model: no fixed slots (K = 0), the probed sink pinned (budget 1).
    const pinnedFor = (s: number[]) => rewriteForSinks([s], rewriteProfile, { sinks: 0, window: W, pinBudget: 1 }).pinned;
    const variants: (Variant & { pinnedFor?: (s: number[]) => Uint8Array })[] = [
      { name: "full attention", window: 0, sinks: 0, pinned: null },
      { name: `window only (W = ${W})`, window: W, sinks: 0, pinned: null },
      ...[1, 2, 4].map((K) => ({ name: `K = ${K} sinks + window`, window: W, sinks: K, pinned: null })),
      { name: `rewriter (profile at threshold ${rewriteProfile.settings.threshold}): K = 0, pin budget 1 + window`, window: W, sinks: 0, pinned: null, pinnedFor },
    ];
    const buckets = [[0, W], [W, 2 * W], [2 * W, 3 * W], [3 * W, 4 * W]];
    const bucketNames = buckets.map(([lo, hi]) => `${lo}-${hi! - 1}`);
    const pinnedRows = evalSeqs.map((s) => pinnedFor(s));
    console.log(`
rewriter pins (first sequence): positions ${[...pinnedRows[0]!].flatMap((p, i) => (p ? [i] : [])).join(", ") || "none"}`);
    const results = evaluateAll(tr.engine.model, variants, evalSeqs, buckets);
    table(`perplexity by query position (window W = ${W}, sequences of ${T} = 4W, ${evalSeqs.length} held-out sequences)`, [
      ["variant", ...bucketNames], ...variants.map((v, i) => [v.name, ...results.ppl[i]!]),
    ]);
    table("KL(full || variant) per next-token distribution (nats), by query position", [
      ["variant", ...bucketNames], ...variants.slice(1).map((v, i) => [v.name, ...results.kl[i + 1]!]),
    ]);
    out.ppl = { buckets, variants: variants.map((v, i) => ({ name: v.name, window: v.window, sinks: v.sinks, ppl: results.ppl[i], kl: results.kl[i] })) };
  }
  if (o.only.has("decode")) out.decode = decodeSection(o);
  if (o.json) writeFileSync(o.json, `${JSON.stringify(out, null, 2)}\n`);
}

await main();
