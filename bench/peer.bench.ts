/**
 * The GRPO peer benchmark: the same GRPO on the same model and tasks with sinkflex (`sinkflex train
 * --config`, the pipeline's GRPO stage) and with Hugging Face TRL's GRPOTrainer (bench/peers/trl_grpo.py),
 * alternating, on the same threads. It is not a benchmark of either library's SFT or of its defaults.
 *
 *   policy   one Hugging Face checkpoint folder (--checkpoint DIR: one that already solves some arith
 *            tasks, e.g. the demo's post-SFT checkpoint, so that success can rise), or else a tiny model
 *            SFT'd here on the arith suite; TRL loads it through transformers and encodes with the
 *            checkpoint's trimmed vocabulary as sinkflex does. Both sides run it with full attention: a
 *            checkpoint trained with a sink window is copied with full attention, and sinkflex evaluates
 *            it under both masks first, to show the held-out answers do not change
 *   tasks    the steps' training tasks (sinkflex's `stepTasks`) and the held-out tasks (`planSuites`,
 *            --eval-tasks, greedy), the same on both sides; TRL reaches the env through `sinkflex envs
 *            serve` on 127.0.0.1, so the verifier is the same code
 *   figures  wall time per GRPO step (rollout and update), tokens processed per step, peak resident
 *            memory, held-out success before and after with 95% intervals; ratios sinkflex / TRL; the
 *            load average at each run's start and end
 *
 * Without Python, trl or its dependencies the TRL column says "peer unavailable"; the benchmark goes on.
 * Usage: npm run bench:peer -- [--json FILE] [--checkpoint DIR] [--steps N] [--rounds N] [--eval-tasks N]
 *        [--trl-eval-tasks N] [--threads N]
 *        [--python PATH]   (default: $SINKFLEX_BENCH_PYTHON, else python3)  [--keep] (keep the work folder)
 */
import { spawn } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { registerBundledEnvs } from "../src/envs/index.js";
import { validateConfig } from "../src/pipeline/config.js";
import { planSuites } from "../src/pipeline/tasks.js";
import { stepTasks } from "../src/pipeline/train.js";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..");
const cli = join(root, "bin", "sinkflex.mjs");
const ENV_ID = "sinkflex/arith-v0";
// The demo's arith task set: with its seed and suite position, the held-out tasks here are among the demo's
// own held-out ones, so a demo checkpoint never saw them in SFT.
const ENV_OPTIONS = { count: 12000 };

interface Options {
  json: string | null;
  checkpoint: string | null;
  steps: number;
  rounds: number;
  evalTasks: number;
  trlEvalTasks: number;
  threads: number;
  python: string;
  keep: boolean;
}

function parseArgs(argv: string[]): Options {
  const o: Options = { json: null, checkpoint: null, steps: 3, rounds: 2, evalTasks: 256, trlEvalTasks: 32, threads: 2, python: process.env.SINKFLEX_BENCH_PYTHON || "python3", keep: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const next = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === "--json") o.json = next();
    else if (a === "--checkpoint") o.checkpoint = resolve(next());
    else if (a === "--steps") o.steps = Number(next());
    else if (a === "--rounds") o.rounds = Number(next());
    else if (a === "--eval-tasks") o.evalTasks = Number(next());
    else if (a === "--trl-eval-tasks") o.trlEvalTasks = Number(next());
    else if (a === "--threads") o.threads = Number(next());
    else if (a === "--python") o.python = next();
    else if (a === "--keep") o.keep = true;
    else if (a === "--help" || a === "-h") {
      console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("*/")[0]);
      process.exit(0);
    } else throw new Error(`unknown option ${a}; see --help`);
  }
  for (const [k, flag] of [["steps", "steps"], ["rounds", "rounds"], ["evalTasks", "eval-tasks"], ["trlEvalTasks", "trl-eval-tasks"], ["threads", "threads"]] as const) {
    if (!Number.isInteger(o[k]) || o[k] < 1) throw new Error(`--${flag} must be a positive integer, got ${o[k]}`);
  }
  if (o.checkpoint && !existsSync(join(o.checkpoint, "config.json"))) throw new Error(`--checkpoint ${o.checkpoint} is not a checkpoint folder (no config.json): give a folder sinkflex wrote, e.g. <run>/final`);
  return o;
}

// ----------------------------------------------------------------------------------------- recipes

/**
 * The GRPO hyperparameters both sides run with (each side's own name for them in the table). Sized for a
 * shared 2-core CPU, where a TRL step takes minutes: 4 tasks x 4 samples a step. (At lr 1e-3 with 8
 * samples, two steps took the demo checkpoint's held-out success from 66% to 27% on the sinkflex side.)
 */
const GRPO = {
  batchTasks: 4,
  groupSize: 4,
  lr: 3e-4,
  epochs: 1,
  klCoef: 0.04,
  clipLow: 0.2,
  clipHigh: 0.28,
  temperature: 1,
  maxTurns: 4,
  maxTokensPerTurn: 48,
  maxGradNorm: 1,
  weightDecay: 0,
};
function sftConfig(runsDir: string, evalTasks: number) {
  return {
    name: "peer-sft",
    seed: 0,
    runsDir,
    suites: [{ env: ENV_ID, options: ENV_OPTIONS }],
    model: { init: { hiddenSize: 64, layers: 2, heads: 4, kvHeads: 2, intermediateSize: 128 }, matmul: "fp32" },
    attention: { mode: "full" },
    sft: { expertEpisodes: 1000, epochs: 2, batchSize: 8, lr: 3e-3 },
    grpo: { enabled: false, maxTurns: GRPO.maxTurns, maxTokensPerTurn: GRPO.maxTokensPerTurn, maxContextTokens: 2048 },
    eval: { tasksPerSuite: evalTasks, samples: 1, temperature: 0 },
  };
}

function grpoConfig(runsDir: string, name: string, checkpoint: string, steps: number, evalTasks: number, attention: { mode: "full" } | { mode: "sink-window"; sinks: number; window: number } = { mode: "full" }) {
  return validateConfig({
    name,
    seed: 0,
    runsDir,
    suites: [{ env: ENV_ID, options: ENV_OPTIONS }],
    model: { checkpoint, matmul: "fp32" },
    attention,
    sft: { enabled: false },
    // tisCap 0 and no degenerate-group filter: TRL has neither without vLLM, so both run the plain loss.
    grpo: { ...GRPO, steps, maxContextTokens: 2048, concurrency: 16, tisCap: 0, filterDegenerateGroups: false, aggregation: "token", estimator: "grpo" },
    eval: { tasksPerSuite: evalTasks, samples: 1, temperature: 0 },
    checkpointEvery: 1000,
  });
}

// ----------------------------------------------------------------------------------------- processes

interface Child {
  code: number | null;
  stdout: string;
  stderr: string;
  wallS: number;
  peakRssKiB: number | null;
}

/** Runs a command to its end; its peak resident memory through /usr/bin/time where that exists. */
function run(cmd: string, args: string[], env: NodeJS.ProcessEnv, work: string): Promise<Child> {
  const timeFile = join(work, `time-${process.hrtime.bigint()}.txt`);
  const timed = existsSync("/usr/bin/time");
  const [c, a] = timed ? ["/usr/bin/time", ["-f", "%M", "-o", timeFile, cmd, ...args]] : [cmd, args];
  const t0 = performance.now();
  return new Promise((done) => {
    const child = spawn(c, a, { env, cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += String(d)));
    child.stderr.on("data", (d) => (stderr += String(d)));
    child.on("error", (err) => done({ code: -1, stdout, stderr: stderr + err.message, wallS: 0, peakRssKiB: null }));
    child.on("close", (code) => {
      const rss = timed && existsSync(timeFile) ? Number(readFileSync(timeFile, "utf8").trim().split("\n").pop()) : NaN;
      done({ code, stdout, stderr, wallS: (performance.now() - t0) / 1000, peakRssKiB: Number.isFinite(rss) ? rss : null });
    });
  });
}

function threadEnv(threads: number): NodeJS.ProcessEnv {
  const t = String(threads);
  return { ...process.env, SINKFLEX_THREADS: t, OMP_NUM_THREADS: t, MKL_NUM_THREADS: t, OPENBLAS_NUM_THREADS: t };
}

async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => done(port));
    });
  });
}

/** The TRL side's held-out sessions wait through its whole training (many minutes on a busy CPU). */
const IDLE_MS = 4 * 3600 * 1000;

/**
 * `sinkflex envs serve` on 127.0.0.1 until stopped: the suite's options fixed by the server (a client may
 * not ask for 12,000 tasks), and room for every held-out episode's session at once.
 */
async function serveEnv(port: number, threads: number, work: string, sessions: number) {
  const optionsFile = join(work, "env-options.json");
  writeFileSync(optionsFile, JSON.stringify(ENV_OPTIONS));
  const args = [cli, "envs", "serve", ENV_ID, "--port", String(port), "--options-file", optionsFile, "--max-sessions", String(sessions), "--idle-timeout", String(IDLE_MS)];
  const child = spawn(process.execPath, args, { env: threadEnv(threads), cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  child.stdout.on("data", (d) => (log += String(d)));
  child.stderr.on("data", (d) => (log += String(d)));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`${url}/health`)).ok) return { url, stop: () => child.kill("SIGTERM") };
    } catch {
      // not up yet
    }
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill("SIGKILL");
  throw new Error(`sinkflex envs serve did not come up on ${url}: ${log.trim().slice(-400)}`);
}

// ----------------------------------------------------------------------------------------- sides

interface SideRun {
  stepS: number[];
  rolloutS: number[];
  updateS: number[];
  tokens: number[];
  peakRssKiB: number | null;
  evalBefore: { successes: number; trials: number } | null;
  evalAfter: { successes: number; trials: number } | null;
  /** Held-out success after, scored by sinkflex's evaluator (`sinkflex eval`) on the side's final weights. */
  evalAfterCommon: { successes: number; trials: number } | null;
  wallS: number;
  /** The 1-minute load average when the run started and when it ended. */
  load: [number, number];
  extra?: Record<string, unknown>;
}

async function runSinkflex(o: Options, work: string, round: number, checkpoint: string): Promise<SideRun> {
  const runs = join(work, "runs");
  const name = `sinkflex-grpo-${round}`;
  const file = join(work, `${name}.json`);
  writeFileSync(file, JSON.stringify(grpoConfig(runs, name, checkpoint, o.steps, o.evalTasks)));
  const load0 = loadavg()[0]!;
  const res = await run(process.execPath, [cli, "train", "--config", file, "--no-dashboard", "--quiet"], threadEnv(o.threads), work);
  if (res.code !== 0) throw new Error(`sinkflex train failed (exit ${res.code}): ${res.stderr.trim().slice(-800)}`);
  const dir = join(runs, name);
  const steps = readFileSync(join(dir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l)).filter((m) => m.stage === "grpo");
  const ev = JSON.parse(readFileSync(join(dir, "eval.json"), "utf8")).stages;
  return {
    stepS: steps.map((m) => (m.phaseMs.rollout + m.phaseMs.train) / 1000),
    rolloutS: steps.map((m) => m.phaseMs.rollout / 1000),
    updateS: steps.map((m) => m.phaseMs.train / 1000),
    tokens: steps.map((m) => m.tokens.prefill + m.tokens.sampled + m.tokens.trained),
    peakRssKiB: res.peakRssKiB,
    evalBefore: ev["before-rl"]?.arith ?? null,
    evalAfter: ev["after-rl"]?.arith ?? null,
    evalAfterCommon: ev["after-rl"]?.arith ?? null,
    wallS: res.wallS,
    load: [load0, loadavg()[0]!],
    extra: { runDir: dir, rewardMean: steps.map((m) => m.rewardMean), rolloutTokens: steps.map((m) => m.tokens.prefill + m.tokens.sampled), trainTokens: steps.map((m) => m.tokens.trained) },
  };
}

/** Trajectories sinkflex recorded with their token ids: the TRL side re-renders them to check the ids. */
function tokenSamples(runDir: string) {
  const dir = join(runDir, "trajectories");
  const out: unknown[] = [];
  for (const f of readdirSync(dir).filter((n) => n.startsWith("grpo-"))) {
    for (const line of readFileSync(join(dir, f), "utf8").trim().split("\n")) {
      const r = JSON.parse(line);
      if (r.tokens) out.push({ messages: r.messages, tokens: r.tokens, taskIndex: r.taskIndex });
    }
  }
  return out;
}

async function runTrl(o: Options, work: string, round: number, checkpoint: string, envUrl: string, plan: Record<string, unknown>): Promise<SideRun | { unavailable: string }> {
  const planFile = join(work, `trl-plan-${round}.json`);
  const outFile = join(work, `trl-out-${round}.json`);
  writeFileSync(planFile, JSON.stringify({ ...plan, checkpoint, envUrl, workDir: join(work, `trl-${round}`), threads: o.threads }));
  const load0 = loadavg()[0]!;
  const res = await run(o.python, [join(here, "peers", "trl_grpo.py"), planFile, outFile], threadEnv(o.threads), work);
  if (res.code !== 0 || !existsSync(outFile)) {
    if (res.code === -1) return { unavailable: `cannot start ${o.python}: ${res.stderr.trim().slice(-300)}` };
    throw new Error(`the TRL peer failed (exit ${res.code}): ${res.stderr.trim().slice(-1500)}`);
  }
  const out = JSON.parse(readFileSync(outFile, "utf8"));
  if (out.unavailable) return { unavailable: out.unavailable };
  const steps = out.steps as { stepS: number; rolloutS: number; updateS: number; rolloutTokens: number; trainTokens: number }[];
  const load1 = loadavg()[0]!;
  const common = out.finalDir ? await sinkflexEval(o, work, `trl-final-${round}`, out.finalDir as string, { mode: "full" }) : null;
  return {
    stepS: steps.map((s) => s.stepS),
    rolloutS: steps.map((s) => s.rolloutS),
    updateS: steps.map((s) => s.updateS),
    tokens: steps.map((s) => s.rolloutTokens + s.trainTokens),
    peakRssKiB: res.peakRssKiB ?? out.peakRssKiB,
    evalBefore: out.evalBefore,
    evalAfter: out.evalAfter,
    evalAfterCommon: common,
    wallS: res.wallS,
    load: [load0, load1],
    extra: { versions: out.versions, tokenCheck: out.tokenCheck, loadS: out.loadS, threads: out.threads, log: out.log, drifted: out.drifted, rolloutTokens: steps.map((s) => s.rolloutTokens), trainTokens: steps.map((s) => s.trainTokens) },
  };
}

// ----------------------------------------------------------------------------------------- attention

interface MaskCheck {
  /** The checkpoint's own mask (sinkflex_attention.json). */
  mask: { window: number; sinks: number };
  /** Held-out success and sampled tokens under that mask and under full attention (greedy, sinkflex). */
  own: { successes: number; trials: number; tokens: number };
  full: { successes: number; trials: number; tokens: number };
}

/** sinkflex's evaluator (`sinkflex eval --config`) on the held-out tasks of the plan, greedy. */
async function sinkflexEval(o: Options, work: string, name: string, dir: string, attention: Parameters<typeof grpoConfig>[5]) {
  const cfgFile = join(work, `${name}.json`);
  const out = join(work, `${name}-eval.json`);
  writeFileSync(cfgFile, JSON.stringify(grpoConfig(join(work, "runs"), name, dir, 1, o.evalTasks, attention)));
  const res = await run(process.execPath, [cli, "eval", "--config", cfgFile, dir, "--json", out], threadEnv(o.threads), work);
  if (res.code !== 0) throw new Error(`sinkflex eval of ${dir} failed (exit ${res.code}): ${res.stderr.trim().slice(-800)}`);
  const a = JSON.parse(readFileSync(out, "utf8")).suites.arith as { successes: number; trials: number; tokens: number };
  return { successes: a.successes, trials: a.trials, tokens: a.tokens };
}

/**
 * The checkpoint both sides train: the given one where it has full attention, else a copy of it with full
 * attention (TRL's model has no sink window), after sinkflex evaluates the held-out tasks under both masks.
 */
async function fullAttentionPolicy(o: Options, work: string, checkpoint: string): Promise<{ checkpoint: string; check: MaskCheck | null }> {
  const file = join(checkpoint, "sinkflex_attention.json");
  const mask = existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as { window: number; sinks: number }) : { window: 0, sinks: 0 };
  if (!(mask.window > 0)) return { checkpoint, check: null };
  const full = join(work, "policy-full-attention");
  cpSync(checkpoint, full, { recursive: true });
  writeFileSync(join(full, "sinkflex_attention.json"), JSON.stringify({ format: "sinkflex-sink-window-v1", window: 0, sinks: 0 }));
  const evaluate = (name: string, dir: string, attention: Parameters<typeof grpoConfig>[5]) => sinkflexEval(o, work, name, dir, attention);
  console.log(`the checkpoint has a sink window (${mask.window}, ${mask.sinks} sinks): both sides run a copy with full attention; held-out success under both masks ...`);
  const own = await evaluate("mask-own", checkpoint, { mode: "sink-window", sinks: mask.sinks, window: mask.window });
  const fullRes = await evaluate("mask-full", full, { mode: "full" });
  console.log(`  own mask ${own.successes}/${own.trials} (${own.tokens} tokens), full attention ${fullRes.successes}/${fullRes.trials} (${fullRes.tokens} tokens)`);
  return { checkpoint: full, check: { mask: { window: mask.window, sinks: mask.sinks }, own, full: fullRes } };
}

// ----------------------------------------------------------------------------------------- report

const median = (xs: number[]) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const fmt = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : "-");

/** The 95% Wilson score interval of k successes in n trials. */
function wilson(k: number, n: number): [number, number] {
  if (n === 0) return [NaN, NaN];
  const z = 1.96;
  const p = k / n;
  const d = 1 + (z * z) / n;
  const c = (p + (z * z) / (2 * n)) / d;
  const h = (z * Math.sqrt((p * (1 - p)) / n + (z * z) / (4 * n * n))) / d;
  return [Math.max(0, c - h), Math.min(1, c + h)];
}

function printTable(header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => "| " + cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(" | ") + " |";
  console.log(line(header));
  console.log("| " + widths.map((w, i) => (i === 0 ? "-".repeat(w) : "-".repeat(w - 1) + ":")).join(" | ") + " |");
  for (const r of rows) console.log(line(r));
}

function cpuInfo(): { model: string; avx512: boolean; avx512bf16: boolean; amx: boolean } {
  let text = "";
  try {
    text = readFileSync("/proc/cpuinfo", "utf8");
  } catch {
    return { model: cpus()[0]?.model ?? "unknown", avx512: false, avx512bf16: false, amx: false };
  }
  const flags = /^flags\s*:\s*(.*)$/m.exec(text)?.[1]?.split(/\s+/) ?? [];
  return { model: /^model name\s*:\s*(.*)$/m.exec(text)?.[1] ?? "unknown", avx512: flags.includes("avx512f"), avx512bf16: flags.includes("avx512_bf16"), amx: flags.includes("amx_tile") };
}

// ----------------------------------------------------------------------------------------- main

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const work = mkdtempSync(join(tmpdir(), "sinkflex-peer-"));
  const t0 = performance.now();
  let server: { url: string; stop: () => void } | undefined;
  try {
    // 1. The policy: sinkflex SFT on arith, or the given checkpoint.
    let checkpoint = o.checkpoint;
    let sftS: number | null = null;
    if (!checkpoint) {
      const file = join(work, "sft.json");
      writeFileSync(file, JSON.stringify(sftConfig(join(work, "runs"), o.evalTasks)));
      console.log("making the policy: sinkflex SFT on arith ...");
      const res = await run(process.execPath, [cli, "train", "--config", file, "--no-dashboard", "--quiet"], threadEnv(o.threads), work);
      if (res.code !== 0) throw new Error(`the SFT run failed (exit ${res.code}): ${res.stderr.trim().slice(-800)}`);
      checkpoint = join(work, "runs", "peer-sft", "final");
      sftS = res.wallS;
    }
    const policy = await fullAttentionPolicy(o, work, checkpoint);
    checkpoint = policy.checkpoint;

    // 2. The plan: each step's tasks and the held-out tasks, from sinkflex's own planning.
    registerBundledEnvs();
    const cfg = grpoConfig(join(work, "runs"), "plan", checkpoint, o.steps, o.evalTasks);
    const plans = await planSuites(cfg);
    const plan0 = plans[0]!;
    const evalSeed = cfg.seed + 1_000_003; // evalOptionsOf(cfg).seed: each held-out task resets with seed + taskIndex
    const plan = {
      seed: cfg.seed,
      // The server fixes the suite's options (plan0.options; no separate eval set): sessions ask for none.
      envOptions: {},
      evalEnvOptions: {},
      steps: Array.from({ length: o.steps }, (_, s) => stepTasks(cfg, plans, s + 1).map((t) => ({ taskIndex: t.taskIndex, seed: t.seed }))),
      evalTasks: plan0.evalTasks.map((taskIndex) => ({ taskIndex, seed: evalSeed + taskIndex })).slice(0, o.trlEvalTasks),
      evalTemperature: cfg.eval.temperature,
      hparams: GRPO,
    };
    server = await serveEnv(await freePort(), o.threads, work, plan.evalTasks.length + GRPO.batchTasks * GRPO.groupSize + 16);

    // 3. Alternating rounds: sinkflex, then TRL, each from the same checkpoint. The JSON is written after
    // every run, so a benchmark stopped part way keeps what it measured.
    const sink: SideRun[] = [];
    const trl: SideRun[] = [];
    let unavailable: string | null = null;
    const results = async () => ({
      commit: await gitCommit(),
      date: new Date().toISOString(),
      cpu: cpuInfo(),
      threads: o.threads,
      node: process.version,
      env: ENV_ID,
      envOptions: ENV_OPTIONS,
      steps: o.steps,
      rounds: o.rounds,
      hparams: GRPO,
      evalTasks: plan0.evalTasks.length,
      trlOwnEvalTasks: plan.evalTasks.length,
      checkpoint: o.checkpoint ?? "made by this run (sinkflex SFT)",
      maskCheck: policy.check,
      sftS,
      totalS: (performance.now() - t0) / 1000,
      sinkflex: sink,
      trl: unavailable ? { unavailable } : trl,
    });
    const save = async (extra: Record<string, unknown> = {}) => {
      if (o.json) writeFileSync(o.json, JSON.stringify({ ...(await results()), ...extra }, null, 1));
    };
    for (let r = 0; r < o.rounds; r++) {
      console.log(`round ${r + 1}/${o.rounds}: sinkflex GRPO, ${o.steps} steps ... (load ${loadavg().map((x) => x.toFixed(1)).join(" ")})`);
      const s = await runSinkflex(o, work, r, checkpoint);
      sink.push(s);
      await save();
      if (unavailable) continue;
      console.log(`round ${r + 1}/${o.rounds}: TRL GRPOTrainer, ${o.steps} steps ... (load ${loadavg().map((x) => x.toFixed(1)).join(" ")})`);
      const t = await runTrl(o, work, r, checkpoint, server.url, { ...plan, tokenCheck: tokenSamples(s.extra!.runDir as string) });
      if ("unavailable" in t) {
        unavailable = t.unavailable;
        console.log(`TRL: peer unavailable (${unavailable})`);
      } else trl.push(t);
      await save();
    }

    // 4. The table: medians over every step of every round (the first step of a run included).
    const heldOut = plan0.evalTasks.length;
    const all = (runs: SideRun[], k: "stepS" | "rolloutS" | "updateS" | "tokens") => median(runs.flatMap((x) => x[k]));
    const rss = (runs: SideRun[]) => Math.max(...runs.map((x) => x.peakRssKiB ?? NaN)) / 1024 / 1024;
    const rate = (e: { successes: number; trials: number } | null) => {
      if (!e) return "-";
      const [lo, hi] = wilson(e.successes, e.trials);
      return `${e.successes}/${e.trials} (${fmt((100 * e.successes) / e.trials, 1)}%, ${fmt(100 * lo, 0)}-${fmt(100 * hi, 0)})`;
    };
    const rates = (runs: SideRun[], k: "evalBefore" | "evalAfter" | "evalAfterCommon") => runs.map((x) => rate(x[k])).join("; ");
    const loads = (runs: SideRun[]) => runs.map((x) => `${fmt(x.load[0], 1)}-${fmt(x.load[1], 1)}`).join("; ");
    const figures = [
      { name: "wall time per step (s)", s: all(sink, "stepS"), t: all(trl, "stepS") },
      { name: "  rollout (s)", s: all(sink, "rolloutS"), t: all(trl, "rolloutS") },
      { name: "  update (s)", s: all(sink, "updateS"), t: all(trl, "updateS") },
      { name: "tokens processed per step", s: all(sink, "tokens"), t: all(trl, "tokens") },
      { name: "peak memory (GiB)", s: rss(sink), t: rss(trl) },
    ];
    console.log(`\nGRPO on ${ENV_ID}, ${o.steps} steps x ${o.rounds} alternating rounds, ${o.threads} threads (medians over steps)\n`);
    const peer = (x: number, d: number) => (unavailable ? "peer unavailable" : fmt(x, d));
    printTable(
      ["", "sinkflex", "TRL GRPOTrainer", "sinkflex / TRL"],
      [
        ...figures.map((f) => [f.name, fmt(f.s, f.name.startsWith("tokens") ? 0 : 2), peer(f.t, f.name.startsWith("tokens") ? 0 : 2), unavailable ? "-" : fmt(f.s / f.t, 2)]),
        [`held-out success before (${heldOut} tasks)`, rates(sink, "evalBefore"), unavailable ? "peer unavailable" : "the same checkpoint", "-"],
        [`held-out success after (${heldOut} tasks)`, rates(sink, "evalAfterCommon"), unavailable ? "peer unavailable" : rates(trl, "evalAfterCommon"), "-"],
        [`TRL's own loop, first ${plan.evalTasks.length} tasks: before`, "-", unavailable ? "peer unavailable" : rates(trl, "evalBefore"), "-"],
        [`TRL's own loop, first ${plan.evalTasks.length} tasks: after`, "-", unavailable ? "peer unavailable" : rates(trl, "evalAfter"), "-"],
        ["load average (start-end)", loads(sink), unavailable ? "-" : loads(trl), "-"],
      ],
    );
    console.log("(success: per round, greedy, with 95% Wilson intervals in points; sinkflex's evaluator (`sinkflex eval`) on each side's final weights, and TRL's own rollout loop on the first held-out tasks as a check that both loops play the policy alike)");
    if (policy.check) {
      const c = policy.check;
      console.log(`mask check: the checkpoint's own mask (window ${c.mask.window}, ${c.mask.sinks} sinks) ${c.own.successes}/${c.own.trials}, ${c.own.tokens} tokens; full attention ${c.full.successes}/${c.full.trials}, ${c.full.tokens} tokens`);
    }
    const tc = trl[0]?.extra?.tokenCheck as { checked: number; equal: number } | undefined;
    if (tc) console.log(`\nsame token ids: ${tc.equal} of ${tc.checked} sinkflex trajectories re-rendered and encoded by the TRL side match sinkflex's ids`);
    await save({ figures: figures.map((f) => ({ ...f, ratio: unavailable ? null : f.s / f.t })) });
    console.log(`\ntotal ${fmt((performance.now() - t0) / 1000, 0)} s${o.keep ? `; work folder ${work}` : ""}`);
  } finally {
    server?.stop();
    if (!o.keep) rmSync(work, { recursive: true, force: true });
  }
}

async function gitCommit(): Promise<string> {
  const res = await run("git", ["rev-parse", "--short", "HEAD"], process.env, tmpdir());
  return res.stdout.trim() || "unknown";
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
});
