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
 *            load average at each run's start and end; with --eval-every N a learning curve: both sides
 *            save their weights every N steps and `sinkflex eval` scores each on the held-out tasks
 *            (after the run, outside the timed steps)
 *
 * Without Python, trl or its dependencies the TRL column says "peer unavailable"; the benchmark goes on.
 * Usage: npm run bench:peer -- [options]
 *   --checkpoint DIR      the policy both sides start from (default: a tiny policy SFT'd here first)
 *   --steps N             GRPO steps per side and round (default 3); the learning-rate schedule is planned
 *                         over N steps on both sides
 *   --rounds N            alternating rounds, sinkflex then TRL, each from the checkpoint (default 2)
 *   --batch-tasks N       tasks per step on both sides (default 4)
 *   --group-size N        samples per task on both sides (default 8)
 *   --eval-tasks N        held-out tasks `sinkflex eval` scores, greedy (default 256)
 *   --eval-every N        also score the held-out tasks every N steps on both sides: a learning curve
 *                         (default 0: before and after only)
 *   --trl-eval-tasks N    held-out tasks TRL's own loop plays before and after, as a check (default 32;
 *                         0 skips it)
 *   --threads N           threads per side (default 2)
 *   --json FILE           every figure, written after every run (keys: summary, curve, settings, ...)
 *   --python PATH         the TRL side's Python (default: $SINKFLEX_BENCH_PYTHON, else python3)
 *   --keep                keep the work folder
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
  batchTasks: number;
  groupSize: number;
  evalTasks: number;
  evalEvery: number;
  trlEvalTasks: number;
  threads: number;
  python: string;
  keep: boolean;
}

function parseArgs(argv: string[]): Options {
  const o: Options = { json: null, checkpoint: null, steps: 3, rounds: 2, batchTasks: 4, groupSize: 8, evalTasks: 256, evalEvery: 0, trlEvalTasks: 32, threads: 2, python: process.env.SINKFLEX_BENCH_PYTHON || "python3", keep: false };
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
    else if (a === "--batch-tasks") o.batchTasks = Number(next());
    else if (a === "--group-size") o.groupSize = Number(next());
    else if (a === "--eval-tasks") o.evalTasks = Number(next());
    else if (a === "--eval-every") o.evalEvery = Number(next());
    else if (a === "--trl-eval-tasks") o.trlEvalTasks = Number(next());
    else if (a === "--threads") o.threads = Number(next());
    else if (a === "--python") o.python = next();
    else if (a === "--keep") o.keep = true;
    else if (a === "--help" || a === "-h") {
      console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("*/")[0]);
      process.exit(0);
    } else throw new Error(`unknown option ${a}; see --help`);
  }
  for (const [k, flag] of [["steps", "steps"], ["rounds", "rounds"], ["batchTasks", "batch-tasks"], ["groupSize", "group-size"], ["evalTasks", "eval-tasks"], ["threads", "threads"]] as const) {
    if (!Number.isInteger(o[k]) || o[k] < 1) throw new Error(`--${flag} must be a positive integer, got ${o[k]}`);
  }
  for (const [k, flag] of [["evalEvery", "eval-every"], ["trlEvalTasks", "trl-eval-tasks"]] as const) {
    if (!Number.isInteger(o[k]) || o[k] < 0) throw new Error(`--${flag} must be 0 or a positive integer, got ${o[k]}`);
  }
  if (o.groupSize < 2) throw new Error(`--group-size must be at least 2 (GRPO compares the samples of a task), got ${o.groupSize}`);
  if (o.checkpoint && !existsSync(join(o.checkpoint, "config.json"))) throw new Error(`--checkpoint ${o.checkpoint} is not a checkpoint folder (no config.json): give a folder sinkflex wrote, e.g. <run>/final`);
  return o;
}

// ----------------------------------------------------------------------------------------- recipes

/**
 * The GRPO hyperparameters both sides run with (each side's own name for them in the settings table): the
 * demo's GRPO (configs/demo.yaml: group size 8, lr 2e-4 with a 5-step linear warm-up and a cosine decay to
 * 0.1 x lr over the planned steps, KL 0.04, temperature 1) where TRL can run it the same way. Not the demo's:
 * its estimator (dr-grpo with negative advantages scaled by 0.25: TRL has no such scaling), so both use
 * GRPO's (r - mean) / std with token-level aggregation; tasks per step (the demo's 32 would make a TRL step
 * take many minutes here: --batch-tasks); turns and tokens per turn (arith needs few: 4 x 48).
 */
const GRPO = {
  batchTasks: 4,
  groupSize: 8,
  lr: 2e-4,
  warmupSteps: 5,
  lrSchedule: "cosine" as const,
  minLrRatio: 0.1,
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
type Hparams = typeof GRPO;
const hparamsOf = (o: Options): Hparams => ({ ...GRPO, batchTasks: o.batchTasks, groupSize: o.groupSize });

interface SettingRow {
  setting: string;
  sinkflex: string;
  trl: string;
  /** The two sides do not do the same here (the rest are the same setting under each side's name). */
  differs: boolean;
}

/** The settings table: each setting under each side's name; the rows that differ marked. */
function settingsRows(o: Options, hp: Hparams, heldOut: number): SettingRow[] {
  const same = (setting: string, sinkflex: string, trl: string): SettingRow => ({ setting, sinkflex, trl, differs: false });
  const differs = (setting: string, sinkflex: string, trl: string): SettingRow => ({ setting, sinkflex, trl, differs: true });
  const warm = Math.min(hp.warmupSteps, o.steps);
  const schedule = `${warm}-step linear warm-up from lr/${warm}, cosine to ${hp.minLrRatio} x lr at step ${o.steps}`;
  return [
    same("steps", `steps ${o.steps}`, `max_steps ${o.steps}`),
    same("group size", `groupSize ${hp.groupSize}`, `num_generations ${hp.groupSize}`),
    same("tasks per step", `batchTasks ${hp.batchTasks}`, `per_device_train_batch_size ${hp.batchTasks * hp.groupSize} (${hp.batchTasks} x ${hp.groupSize}), 1 generation a step`),
    same("turns, new tokens per turn", `maxTurns ${hp.maxTurns}, maxTokensPerTurn ${hp.maxTokensPerTurn}`, `${hp.maxTurns} turns (rollout_func), max_new_tokens ${hp.maxTokensPerTurn}`),
    same("learning rate", `lr ${hp.lr}, ${schedule}`, `learning_rate ${hp.lr}, the same schedule (a LambdaLR)`),
    same("optimizer", `AdamW (0.9, 0.999, eps 1e-8), weight decay ${hp.weightDecay}, grad clip ${hp.maxGradNorm}`, `adam_beta1 0.9, adam_beta2 0.999, adam_epsilon 1e-8, weight_decay ${hp.weightDecay}, max_grad_norm ${hp.maxGradNorm}`),
    same("clip", `clipLow ${hp.clipLow}, clipHigh ${hp.clipHigh}`, `epsilon ${hp.clipLow}, epsilon_high ${hp.clipHigh}`),
    same("KL to the reference", `klCoef ${hp.klCoef} (k3)`, `beta ${hp.klCoef} (k3)`),
    same("sampling", `temperature ${hp.temperature}, top-p 1`, `temperature ${hp.temperature}, top_p 1, top_k 0`),
    same("passes over each batch", `epochs ${hp.epochs}`, `num_iterations ${hp.epochs}`),
    same("loss aggregation", `aggregation "token"`, `loss_type "dapo" (token level)`),
    same("advantages", `estimator "grpo": (r - group mean) / group std`, `scale_rewards "group"`),
    same("held-out evaluation", `${heldOut} tasks, greedy: \`sinkflex eval\` on the weights`, "the same command on TRL's saved weights"),
    differs("importance correction", "tisCap 0 (off, to match)", "none without vLLM"),
    differs("groups whose rewards are all equal", "filterDegenerateGroups false (kept, to match)", "kept (zero advantage)"),
    differs("episodes whose text re-renders differently (malformed calls)", "left out of the update", "trained on (`drifted` in the JSON)"),
    differs("group std", "population, + 1e-6", "torch's unbiased, + 1e-4"),
  ];
}
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

function grpoConfig(runsDir: string, name: string, checkpoint: string, hp: Hparams, steps: number, evalTasks: number, checkpointEvery = 0, attention: { mode: "full" } | { mode: "sink-window"; sinks: number; window: number } = { mode: "full" }) {
  return validateConfig({
    name,
    seed: 0,
    runsDir,
    suites: [{ env: ENV_ID, options: ENV_OPTIONS }],
    model: { checkpoint, matmul: "fp32" },
    attention,
    sft: { enabled: false },
    // tisCap 0 and no degenerate-group filter: TRL has neither without vLLM, so both run the plain loss.
    grpo: { ...hp, steps, maxContextTokens: 2048, concurrency: 16, tisCap: 0, filterDegenerateGroups: false, aggregation: "token", estimator: "grpo" },
    eval: { tasksPerSuite: evalTasks, samples: 1, temperature: 0 },
    // Every N steps for the learning curve (all kept), else only the last step's.
    checkpointEvery: checkpointEvery > 0 ? checkpointEvery : 1_000_000,
    keepCheckpoints: 1000,
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

interface Score {
  successes: number;
  trials: number;
}
interface CurvePoint extends Score {
  step: number;
  rate: number;
  /** 95% Wilson interval of the rate. */
  ci95: [number, number];
}
const curvePoint = (step: number, e: Score): CurvePoint => ({ step, successes: e.successes, trials: e.trials, rate: e.successes / e.trials, ci95: wilson(e.successes, e.trials) });

/**
 * The curve of one side: step 0 and the last step from the run's own before and after scores, each Nth step
 * between from `sinkflex eval` on the weights the side saved there (`dirs`: step -> folder).
 */
async function learningCurve(o: Options, work: string, name: string, before: Score | null, after: Score | null, dirs: Map<number, string>): Promise<CurvePoint[]> {
  const out: CurvePoint[] = [];
  if (before) out.push(curvePoint(0, before));
  for (const [step, dir] of [...dirs].sort((a, b) => a[0] - b[0])) {
    if (step <= 0 || step >= o.steps) continue; // step 0 (the starting checkpoint) and the last are the run's own scores
    console.log(`  held-out success at step ${step} (${name}) ...`);
    out.push(curvePoint(step, await sinkflexEval(o, work, `${name}-step-${step}`, dir)));
  }
  if (after) out.push(curvePoint(o.steps, after));
  return out;
}

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
  /** The learning curve (--eval-every): held-out success by `sinkflex eval` after each Nth step, 0 and the last included. */
  curve: CurvePoint[];
  wallS: number;
  /** The 1-minute load average when the run started and when it ended. */
  load: [number, number];
  extra?: Record<string, unknown>;
}

async function runSinkflex(o: Options, work: string, round: number, checkpoint: string): Promise<SideRun> {
  const runs = join(work, "runs");
  const name = `sinkflex-grpo-${round}`;
  const file = join(work, `${name}.json`);
  writeFileSync(file, JSON.stringify(grpoConfig(runs, name, checkpoint, hparamsOf(o), o.steps, o.evalTasks, o.evalEvery)));
  const load0 = loadavg()[0]!;
  const res = await run(process.execPath, [cli, "train", "--config", file, "--no-dashboard", "--quiet"], threadEnv(o.threads), work);
  if (res.code !== 0) throw new Error(`sinkflex train failed (exit ${res.code}): ${res.stderr.trim().slice(-800)}`);
  const dir = join(runs, name);
  const steps = readFileSync(join(dir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l)).filter((m) => m.stage === "grpo");
  const ev = JSON.parse(readFileSync(join(dir, "eval.json"), "utf8")).stages;
  const load1 = loadavg()[0]!;
  const saved = new Map<number, string>();
  if (o.evalEvery > 0) {
    for (const n of readdirSync(join(dir, "checkpoints"))) {
      const m = /^grpo-(\d+)$/.exec(n);
      if (m && Number(m[1]) % o.evalEvery === 0) saved.set(Number(m[1]), join(dir, "checkpoints", n));
    }
  }
  const before = ev["before-rl"]?.arith ?? null;
  const after = ev["after-rl"]?.arith ?? null;
  return {
    stepS: steps.map((m) => (m.phaseMs.rollout + m.phaseMs.train) / 1000),
    rolloutS: steps.map((m) => m.phaseMs.rollout / 1000),
    updateS: steps.map((m) => m.phaseMs.train / 1000),
    tokens: steps.map((m) => m.tokens.prefill + m.tokens.sampled + m.tokens.trained),
    peakRssKiB: res.peakRssKiB,
    evalBefore: before,
    evalAfter: after,
    evalAfterCommon: after,
    curve: o.evalEvery > 0 ? await learningCurve(o, work, name, before, after, saved) : [],
    wallS: res.wallS,
    load: [load0, load1],
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

async function runTrl(o: Options, work: string, round: number, checkpoint: string, envUrl: string, plan: Record<string, unknown>, start: Score | null): Promise<SideRun | { unavailable: string }> {
  const planFile = join(work, `trl-plan-${round}.json`);
  const outFile = join(work, `trl-out-${round}.json`);
  writeFileSync(planFile, JSON.stringify({ ...plan, checkpoint, envUrl, workDir: join(work, `trl-${round}`), threads: o.threads, saveEvery: o.evalEvery }));
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
  const common = out.finalDir ? await sinkflexEval(o, work, `trl-final-${round}`, out.finalDir as string) : null;
  const saved = new Map(((out.savedDirs ?? []) as { step: number; dir: string }[]).map((x) => [x.step, x.dir] as const));
  return {
    stepS: steps.map((s) => s.stepS),
    rolloutS: steps.map((s) => s.rolloutS),
    updateS: steps.map((s) => s.updateS),
    tokens: steps.map((s) => s.rolloutTokens + s.trainTokens),
    peakRssKiB: res.peakRssKiB ?? out.peakRssKiB,
    evalBefore: out.evalBefore,
    evalAfter: out.evalAfter,
    evalAfterCommon: common,
    curve: o.evalEvery > 0 ? await learningCurve(o, work, `trl-${round}`, start, common, saved) : [],
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
async function sinkflexEval(o: Options, work: string, name: string, dir: string, attention: Parameters<typeof grpoConfig>[7] = { mode: "full" }) {
  const cfgFile = join(work, `${name}.json`);
  const out = join(work, `${name}-eval.json`);
  writeFileSync(cfgFile, JSON.stringify(grpoConfig(join(work, "runs"), name, dir, hparamsOf(o), 1, o.evalTasks, 0, attention)));
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
  const evaluate = (name: string, dir: string, attention: Parameters<typeof grpoConfig>[7]) => sinkflexEval(o, work, name, dir, attention);
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
    const hp = hparamsOf(o);
    const cfg = grpoConfig(join(work, "runs"), "plan", checkpoint, hp, o.steps, o.evalTasks);
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
      hparams: hp,
    };
    server = await serveEnv(await freePort(), o.threads, work, plan.evalTasks.length + hp.batchTasks * hp.groupSize + 16);
    const settings = settingsRows(o, hp, plan0.evalTasks.length);

    // 3. Alternating rounds: sinkflex, then TRL, each from the same checkpoint. The JSON is written after
    // every run, so a benchmark stopped part way keeps what it measured.
    const sink: SideRun[] = [];
    const trl: SideRun[] = [];
    let unavailable: string | null = null;
    const heldOut = plan0.evalTasks.length;
    const all = (runs: SideRun[], k: "stepS" | "rolloutS" | "updateS" | "tokens") => median(runs.flatMap((x) => x[k]));
    const rss = (runs: SideRun[]) => Math.max(...runs.map((x) => x.peakRssKiB ?? NaN)) / 1024 / 1024;
    const figures = () => [
      { key: "stepSeconds", name: "wall time per step (s)", s: all(sink, "stepS"), t: all(trl, "stepS") },
      { key: "rolloutSeconds", name: "  rollout (s)", s: all(sink, "rolloutS"), t: all(trl, "rolloutS") },
      { key: "updateSeconds", name: "  update (s)", s: all(sink, "updateS"), t: all(trl, "updateS") },
      { key: "tokensPerStep", name: "tokens processed per step", s: all(sink, "tokens"), t: all(trl, "tokens") },
      { key: "peakMemoryGiB", name: "peak memory (GiB)", s: rss(sink), t: rss(trl) },
    ];
    const score = (e: Score | null) => (e && e.trials > 0 ? curvePoint(NaN, e) : null);
    const summary = () => ({
      // Medians over every step of every round; ratio = sinkflex / TRL.
      ...Object.fromEntries(figures().map((f) => [f.key, { sinkflex: f.s, trl: unavailable ? null : f.t, ratio: unavailable ? null : f.s / f.t }])),
      heldOut: {
        tasks: heldOut,
        evaluator: "sinkflex eval, greedy",
        before: score(sink[0]?.evalBefore ?? null),
        // One entry per round.
        after: { sinkflex: sink.map((x) => score(x.evalAfterCommon)), trl: trl.map((x) => score(x.evalAfterCommon)) },
      },
    });
    const commit = await gitCommit(); // at the start: others may commit while a long run goes on
    const results = async () => ({
      commit,
      date: new Date().toISOString(),
      cpu: cpuInfo(),
      threads: o.threads,
      node: process.version,
      env: ENV_ID,
      envOptions: ENV_OPTIONS,
      steps: o.steps,
      rounds: o.rounds,
      hparams: hp,
      settings,
      summary: summary(),
      // Held-out success every --eval-every steps; one list per round.
      curve: { every: o.evalEvery, sinkflex: sink.map((x) => x.curve), trl: trl.map((x) => x.curve) },
      evalTasks: heldOut,
      trlOwnEvalTasks: plan.evalTasks.length,
      checkpoint: o.checkpoint ?? "made by this run (sinkflex SFT)",
      maskCheck: policy.check,
      sftS,
      totalS: (performance.now() - t0) / 1000,
      sinkflex: sink,
      trl: unavailable ? { unavailable } : trl,
    });
    const save = async () => {
      if (o.json) writeFileSync(o.json, JSON.stringify(await results(), null, 1));
    };
    for (let r = 0; r < o.rounds; r++) {
      console.log(`round ${r + 1}/${o.rounds}: sinkflex GRPO, ${o.steps} steps ... (load ${loadavg().map((x) => x.toFixed(1)).join(" ")})`);
      const s = await runSinkflex(o, work, r, checkpoint);
      sink.push(s);
      await save();
      if (unavailable) continue;
      console.log(`round ${r + 1}/${o.rounds}: TRL GRPOTrainer, ${o.steps} steps ... (load ${loadavg().map((x) => x.toFixed(1)).join(" ")})`);
      const t = await runTrl(o, work, r, checkpoint, server.url, { ...plan, tokenCheck: tokenSamples(s.extra!.runDir as string) }, s.evalBefore);
      if ("unavailable" in t) {
        unavailable = t.unavailable;
        console.log(`TRL: peer unavailable (${unavailable})`);
      } else trl.push(t);
      await save();
    }

    // 4. The tables: the settings (each side's name for each; "differs" where they are not the same), then
    // the figures: medians over every step of every round (the first step of a run included).
    console.log(`\nsettings (the same on both sides unless marked "differs")\n`);
    printTable(["setting", "sinkflex", "TRL GRPOTrainer"], settings.map((x) => [(x.differs ? "differs: " : "") + x.setting, x.sinkflex, x.trl]));
    const rate = (e: Score | null) => {
      if (!e || e.trials === 0) return "-";
      const [lo, hi] = wilson(e.successes, e.trials);
      return `${e.successes}/${e.trials} (${fmt((100 * e.successes) / e.trials, 1)}%, ${fmt(100 * lo, 0)}-${fmt(100 * hi, 0)})`;
    };
    const rates = (runs: SideRun[], k: "evalBefore" | "evalAfter" | "evalAfterCommon") => runs.map((x) => rate(x[k])).join("; ");
    const loads = (runs: SideRun[]) => runs.map((x) => `${fmt(x.load[0], 1)}-${fmt(x.load[1], 1)}`).join("; ");
    const curveSteps = [...new Set([...sink, ...trl].flatMap((x) => x.curve.map((p) => p.step)))].filter((k) => k > 0 && k < o.steps).sort((a, b) => a - b);
    const atStep = (runs: SideRun[], k: number) => runs.map((x) => rate(x.curve.find((p) => p.step === k) ?? null)).join("; ");
    console.log(`\nGRPO on ${ENV_ID}, ${o.steps} steps x ${o.rounds} alternating round(s), ${hp.batchTasks} tasks x ${hp.groupSize} samples a step, ${o.threads} threads (medians over steps)\n`);
    const peer = (x: number, d: number) => (unavailable ? "peer unavailable" : fmt(x, d));
    printTable(
      ["", "sinkflex", "TRL GRPOTrainer", "sinkflex / TRL"],
      [
        ...figures().map((f) => [f.name, fmt(f.s, f.key === "tokensPerStep" ? 0 : 2), peer(f.t, f.key === "tokensPerStep" ? 0 : 2), unavailable ? "-" : fmt(f.s / f.t, 3)]),
        [`held-out success before (${heldOut} tasks)`, rates(sink, "evalBefore"), unavailable ? "peer unavailable" : "the same checkpoint", "-"],
        ...curveSteps.map((k) => [`held-out success after step ${k}`, atStep(sink, k), unavailable ? "peer unavailable" : atStep(trl, k), "-"]),
        [`held-out success after (step ${o.steps})`, rates(sink, "evalAfterCommon"), unavailable ? "peer unavailable" : rates(trl, "evalAfterCommon"), "-"],
        ...(plan.evalTasks.length > 0
          ? [
              [`TRL's own loop, first ${plan.evalTasks.length} tasks: before`, "-", unavailable ? "peer unavailable" : rates(trl, "evalBefore"), "-"],
              [`TRL's own loop, first ${plan.evalTasks.length} tasks: after`, "-", unavailable ? "peer unavailable" : rates(trl, "evalAfter"), "-"],
            ]
          : []),
        ["wall time of the run (s)", sink.map((x) => fmt(x.wallS, 0)).join("; "), unavailable ? "-" : trl.map((x) => fmt(x.wallS, 0)).join("; "), "-"],
        ["load average (start-end)", loads(sink), unavailable ? "-" : loads(trl), "-"],
      ],
    );
    console.log("(success: per round, greedy, with 95% Wilson intervals in points; sinkflex's evaluator (`sinkflex eval`) on each side's weights, and TRL's own rollout loop on the first held-out tasks as a check that both loops play the policy alike)");
    if (policy.check) {
      const c = policy.check;
      console.log(`mask check: the checkpoint's own mask (window ${c.mask.window}, ${c.mask.sinks} sinks) ${c.own.successes}/${c.own.trials}, ${c.own.tokens} tokens; full attention ${c.full.successes}/${c.full.trials}, ${c.full.tokens} tokens`);
    }
    const tc = trl[0]?.extra?.tokenCheck as { checked: number; equal: number } | undefined;
    if (tc) console.log(`\nsame token ids: ${tc.equal} of ${tc.checked} sinkflex trajectories re-rendered and encoded by the TRL side match sinkflex's ids`);
    await save();
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
