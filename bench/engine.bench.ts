/**
 * The engine benchmark: sinkflex's kernels and engine side by side with peers nobody here wrote, in one run
 * on the same threads. Prints one table per section and, with --json FILE, writes every figure.
 *
 *   machine  the measured peak GFLOP/s (a tight FMA loop), so every figure reads as a fraction of it
 *   gemm     fp32 GEMM at 1024^3 and at the model's own shapes: native kernels vs numpy (OpenBLAS) vs
 *            PyTorch (measured in alternating rounds, best of each); on a CPU with a bf16 unit (AMX or
 *            AVX512-BF16), also the native kernels with bf16 products (setMatmulPrecision) and their
 *            speed-up over fp32
 *   train    one training step (forward + backward + AdamW) of a ~20M-parameter Qwen2-shaped model,
 *            batch 8 x sequence 512: tokens/s vs PyTorch eager (transformers' Qwen2ForCausalLM); with a
 *            bf16 unit, also the same step with bf16 products; and the same step training a LoRA adapter
 *            (rank 16 on every projection) on an fp32 base and on a bf16 base, as step time vs the full step
 *   decode   KV-cache greedy decoding, batch 1 and 32: tokens/s vs Hugging Face generate
 *   decode-05b  the same decoding on a Qwen2.5-0.5B shape, one checkpoint of random weights for all:
 *            sinkflex with the weights in fp32, in bf16 and in bf16 sampling from int8 copies vs llama.cpp
 *            (node-llama-cpp, F16 and Q8_0 GGUFs written by bench/peers/gguf_qwen2.py; node-llama-cpp is
 *            no dependency: see bench/README.md) vs Hugging Face generate in fp32; and the int8 sampler's
 *            log-prob gap to the bf16 trainer
 *   stream-05b  (not in the default run) GB/s at which one decoded row reads each weight matrix of that
 *            shape from memory in bf16, int8 and fp32, beside a plain sequential read
 *   memory   peak resident memory of a Qwen2.5-0.5B-shaped training step at sequence 1024, and of sampling
 *            from that shape with its weights held in fp32 and in bf16, side by side (a child process each;
 *            `--only memory-sample` runs the sampling lines alone); and of a LoRA training step of that shape
 *            (rank 16 on every projection) at sequence 4096 on an fp32 base and on a bf16 base (target under
 *            6 GiB; `--only memory-lora` runs those lines alone)
 *
 * Peers run in Python subprocesses (bench/peers/worker.py, one per library). Without Python, numpy or
 * torch the row says "peer unavailable"; the benchmark never fails for that.
 * --simd avx2 runs every contender on its AVX2 code on an AVX-512 CPU (to measure the AVX2 path without an
 * AVX2-only machine): sinkflex's kernels (SINKFLEX_SIMD=avx2, no bf16 unit), numpy's OpenBLAS on its Haswell
 * kernel (OPENBLAS_CORETYPE=Haswell) and PyTorch at CPU capability AVX2 (ATEN_CPU_CAPABILITY=avx2, MKL and
 * oneDNN capped at AVX2). The default, --simd native, lets each pick its own code for the CPU.
 * Usage: npm run bench:engine -- [--quick] [--threads N] [--only gemm,train,decode,decode-05b,stream-05b,memory,memory-sample,memory-lora] [--json FILE]
 *        [--simd native|avx2] [--python PATH]   (default: $SINKFLEX_BENCH_PYTHON, else python3)
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createRandomModel, type EmbeddedEngine, loadEngine } from "../src/engine/embedded.js";
import type { TokenLoss } from "../src/engine/types.js";
import { bf16Unit, getKernels, measurePeakGflops, nativeLoadError, setMatmulPrecision, setNativeThreads } from "../src/kernels/index.js";
import type { Kernels } from "../src/kernels/kernels.js";
import { parseHfConfig } from "../src/model/config.js";
import { createLoraAdapter, type LoraConfig, loraParamCount, roundToBf16, weightBytes, type WeightDtype } from "../src/model/index.js";

const here = dirname(fileURLToPath(import.meta.url));

/**
 * CPU seconds this process spent since `since` (process.cpuUsage: user + system, every thread). On a shared
 * machine the wall-clock time of a contender grows with the others' load; its CPU time does not, so the
 * sections report both (the peers report theirs the same way: Python's process_time, the llama.cpp child's
 * cpuUsage).
 */
function cpuSeconds(since: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(since);
  return (d.user + d.system) / 1e6;
}

// ------------------------------------------------------------------------------------------ options

/** Which SIMD code every contender runs: each its own best for the CPU, or all their AVX2 code. */
type SimdMode = "native" | "avx2";
const SIMD_MODES: readonly SimdMode[] = ["native", "avx2"];

interface Options {
  quick: boolean;
  simd: SimdMode;
  threads: number;
  only: Set<string>;
  json: string | null;
  python: string;
  memoryChild: boolean;
}

const SECTIONS = ["gemm", "train", "decode", "decode-05b", "stream-05b", "memory", "memory-sample", "memory-lora"];

function parseArgs(argv: string[]): Options {
  const o: Options = {
    quick: false,
    simd: "native",
    threads: Number(process.env.SINKFLEX_THREADS) || Math.min(2, cpus().length),
    only: new Set(["gemm", "train", "decode", "decode-05b", "memory"]),
    json: null,
    python: process.env.SINKFLEX_BENCH_PYTHON || "python3",
    memoryChild: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const next = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === "--quick") o.quick = true;
    else if (a === "--threads") o.threads = Number(next());
    else if (a === "--only") o.only = new Set(next().split(","));
    else if (a === "--json") o.json = next();
    else if (a === "--python") o.python = next();
    else if (a === "--simd") {
      const v = next();
      if (!SIMD_MODES.includes(v as SimdMode)) throw new Error(`--simd: unknown mode "${v}" (native: each contender's best code for this CPU; avx2: everyone's AVX2 code)`);
      o.simd = v as SimdMode;
    }
    else if (a === "--memory-child") o.memoryChild = true;
    else if (a === "--help" || a === "-h") {
      console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("*/")[0]);
      process.exit(0);
    } else throw new Error(`unknown option ${a}; see --help`);
  }
  if (!(o.threads >= 1)) throw new Error("--threads must be a positive integer");
  for (const s of o.only) {
    if (!SECTIONS.includes(s)) throw new Error(`--only: unknown section "${s}" (${SECTIONS.join(", ")})`);
  }
  return o;
}

// ------------------------------------------------------------------------------------------- peers

type PeerReply = Record<string, unknown> & { error?: string };

/**
 * What holds the peers to their AVX2 code (--simd avx2): OpenBLAS's Haswell kernel, PyTorch's AVX2 kernels,
 * and MKL's and oneDNN's instruction sets (PyTorch's matrix products). Removed from the peers' environment
 * otherwise, so each picks its own.
 */
const PEER_SIMD_ENV: Readonly<Record<string, string>> = {
  OPENBLAS_CORETYPE: "Haswell",
  ATEN_CPU_CAPABILITY: "avx2",
  MKL_ENABLE_INSTRUCTIONS: "AVX2",
  ONEDNN_MAX_CPU_ISA: "AVX2",
};

/** One Python worker process serving one library's measurements. */
class Peer {
  private readonly lines: string[] = [];
  private waiter: ((line: string | null) => void) | null = null;
  private closed = false;
  private lastId = 0;
  info: PeerReply = {};

  private constructor(readonly lib: string, private readonly child: ChildProcess) {
    const rl = createInterface({ input: child.stdout! });
    rl.on("line", (line) => {
      if (this.waiter) {
        const w = this.waiter;
        this.waiter = null;
        w(line);
      } else this.lines.push(line);
    });
    child.on("exit", () => {
      this.closed = true;
      if (this.waiter) this.waiter(null);
    });
  }

  static async start(lib: "numpy" | "torch", python: string, threads: number, simd: SimdMode): Promise<Peer | { unavailable: string }> {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      SINKFLEX_BENCH_THREADS: String(threads),
      OPENBLAS_NUM_THREADS: String(threads),
      OMP_NUM_THREADS: String(threads),
      MKL_NUM_THREADS: String(threads),
    };
    for (const name of Object.keys(PEER_SIMD_ENV)) delete env[name];
    // A fair numpy: OpenBLAS picks its own cache sizes, and its own kernel for this CPU unless every
    // contender is held to AVX2.
    delete env.OPENBLAS_L2_SIZE;
    if (simd === "avx2") Object.assign(env, PEER_SIMD_ENV);
    let child: ChildProcess;
    try {
      child = spawn(python, [join(here, "peers", "worker.py"), lib], { env, stdio: ["pipe", "pipe", "pipe"] });
    } catch (err) {
      return { unavailable: `cannot start ${python}: ${(err as Error).message}` };
    }
    let stderr = "";
    child.stderr!.on("data", (d) => (stderr += String(d)));
    // A Python that exits at once makes the first write fail (EPIPE): its exit is the answer ("peer process
    // exited", the peer then unavailable), not a crash of the benchmark.
    child.stdin!.on("error", () => {});
    const spawned = await new Promise<string | null>((resolve) => {
      child.once("error", (err) => resolve(err.message));
      child.once("spawn", () => resolve(null));
    });
    if (spawned) return { unavailable: `cannot start ${python}: ${spawned}` };
    const peer = new Peer(lib, child);
    const info = await peer.request({ op: "info" }, 120_000);
    if (info.error) {
      peer.close();
      return { unavailable: `${info.error}${stderr ? ` (${stderr.trim().split("\n").pop()})` : ""}` };
    }
    peer.info = info;
    return peer;
  }

  /**
   * Sends one command and waits for its answer. Commands carry a number that the worker echoes: an answer
   * that arrives after its command timed out is dropped, never taken for the next command's.
   */
  async request(cmd: Record<string, unknown>, timeoutMs = 600_000): Promise<PeerReply> {
    if (this.closed) return { error: "peer process exited" };
    const id = ++this.lastId;
    this.child.stdin!.write(JSON.stringify({ ...cmd, id }) + "\n");
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const line = this.lines.shift() ?? (await this.nextLine(deadline - Date.now()));
      if (line === null) return { error: this.closed ? "peer process exited" : `no answer within ${timeoutMs / 1000} s` };
      let reply: PeerReply;
      try {
        reply = JSON.parse(line) as PeerReply;
      } catch {
        return { error: `unreadable answer: ${line.slice(0, 200)}` };
      }
      if (reply.id !== id) continue; // a late answer to a command that timed out
      delete reply.id;
      return reply;
    }
  }

  private nextLine(timeoutMs: number): Promise<string | null> {
    if (this.closed || timeoutMs <= 0) return Promise.resolve(null);
    return new Promise<string | null>((resolve) => {
      const timer = setTimeout(() => {
        this.waiter = null;
        resolve(null);
      }, timeoutMs);
      this.waiter = (l) => {
        clearTimeout(timer);
        resolve(l);
      };
    });
  }

  close(): void {
    if (!this.closed) this.child.kill();
    this.closed = true;
  }
}

// ------------------------------------------------------------------------------------------ tables

function fmt(x: number | null | undefined, digits = 1): string {
  return x === null || x === undefined || !Number.isFinite(x) ? "-" : x.toFixed(digits);
}

function printTable(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => "| " + cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(" | ") + " |";
  console.log(`\n${title}\n`);
  console.log(line(header));
  console.log("| " + widths.map((w, i) => (i === 0 ? "-".repeat(w) : "-".repeat(w - 1) + ":")).join(" | ") + " |");
  for (const r of rows) console.log(line(r));
}

// ------------------------------------------------------------------------------------------ models

/** The ~20M-parameter Qwen2-shaped model of the train and decode sections (a Hugging Face config). */
const SMALL_QWEN2 = {
  model_type: "qwen2",
  architectures: ["Qwen2ForCausalLM"],
  hidden_size: 512,
  num_hidden_layers: 6,
  num_attention_heads: 8,
  num_key_value_heads: 2,
  intermediate_size: 1408,
  vocab_size: 8192,
  max_position_embeddings: 4096,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  tie_word_embeddings: true,
  hidden_act: "silu",
  use_sliding_window: false,
};

/** Qwen2.5-0.5B's shapes (random weights) for the memory section. */
const QWEN25_05B = {
  ...SMALL_QWEN2,
  hidden_size: 896,
  num_hidden_layers: 24,
  num_attention_heads: 14,
  num_key_value_heads: 2,
  intermediate_size: 4864,
  vocab_size: 151936,
  max_position_embeddings: 32768,
};

function parameterCount(c: typeof SMALL_QWEN2): number {
  const C = c.hidden_size;
  const D = C / c.num_attention_heads;
  const kv = c.num_key_value_heads * D;
  const layer = C * C + C + 2 * (C * kv + kv) + C * C + 3 * C * c.intermediate_size + 2 * C;
  return c.num_hidden_layers * layer + c.vocab_size * C * (c.tie_word_embeddings ? 1 : 2) + C;
}

function randomTokens(n: number, V: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s % V;
  });
}

/** Mean negative log-likelihood over every predicted token. */
const meanNll: TokenLoss = (logprobs) => {
  const count = logprobs.reduce((a, l) => a + l.length, 0);
  let loss = 0;
  for (const l of logprobs) for (const x of l) loss -= x;
  return { loss: loss / count, dLogprobs: logprobs.map((l) => new Float32Array(l.length).fill(-1 / count)) };
};

// ------------------------------------------------------------------------------------------ sections

interface GemmShape {
  name: string;
  M: number;
  N: number;
  K: number;
  ta: boolean;
  tb: boolean;
}

function gemmShapes(quick: boolean): GemmShape[] {
  const c = SMALL_QWEN2;
  const tokens = quick ? 512 : 8 * 512;
  const C = c.hidden_size;
  const F = c.intermediate_size;
  const KV = (C / c.num_attention_heads) * c.num_key_value_heads;
  const V = c.vocab_size;
  const sq = quick ? 512 : 1024;
  return [
    { name: `square ${sq}^3`, M: sq, N: sq, K: sq, ta: false, tb: false },
    { name: "q/o proj: x W^T", M: tokens, N: C, K: C, ta: false, tb: true },
    { name: "k/v proj: x W^T", M: tokens, N: KV, K: C, ta: false, tb: true },
    { name: "mlp gate/up: x W^T", M: tokens, N: F, K: C, ta: false, tb: true },
    { name: "mlp down: x W^T", M: tokens, N: C, K: F, ta: false, tb: true },
    { name: "lm head: x E^T", M: tokens, N: V, K: C, ta: false, tb: true },
    { name: "mlp gate/up dX: dY W", M: tokens, N: C, K: F, ta: false, tb: false },
    { name: "mlp gate/up dW: dY^T X", M: F, N: C, K: tokens, ta: true, tb: false },
    { name: "lm head dX: dY E", M: tokens, N: C, K: V, ta: false, tb: false },
    { name: "lm head dE: dY^T X", M: V, N: C, K: tokens, ta: true, tb: false },
  ];
}

function nativeGemmSeconds(k: Kernels, s: GemmShape, seconds: number): number {
  const A = new Float32Array(s.M * s.K).map((_, i) => ((i * 2654435761) % 1000) / 1000 - 0.5);
  const B = new Float32Array(s.K * s.N).map((_, i) => ((i * 40503) % 1000) / 1000 - 0.5);
  const C = new Float32Array(s.M * s.N);
  const lda = s.ta ? s.M : s.K;
  const ldb = s.tb ? s.K : s.N;
  const run = () => k.sgemm(s.ta, s.tb, s.M, s.N, s.K, 1, A, lda, B, ldb, 0, C, s.N);
  run();
  let best = Infinity;
  const start = performance.now();
  let n = 0;
  while (n < 2 || performance.now() - start < seconds * 1000) {
    const t0 = performance.now();
    run();
    best = Math.min(best, performance.now() - t0);
    n++;
  }
  return best / 1000;
}

async function gemmSection(o: Options, k: Kernels, peak: number, peers: Map<string, Peer>, out: Record<string, unknown>) {
  const rounds = o.quick ? 1 : 2;
  const seconds = o.quick ? 0.2 : 0.4;
  const rows: Record<string, unknown>[] = [];
  const unit = bf16Unit();
  const hasBf16 = unit !== "none";
  for (const s of gemmShapes(o.quick)) {
    const flops = 2 * s.M * s.N * s.K;
    let nat = Infinity;
    let bf16 = Infinity;
    const peerBest: Record<string, number> = {};
    // alternate rounds so a burst of other load on the machine hits every contender alike
    for (let r = 0; r < rounds; r++) {
      nat = Math.min(nat, nativeGemmSeconds(k, s, seconds));
      if (hasBf16) {
        setMatmulPrecision("bf16");
        bf16 = Math.min(bf16, nativeGemmSeconds(k, s, seconds));
        setMatmulPrecision("fp32");
      }
      for (const [lib, peer] of peers) {
        const res = await peer.request({ op: "gemm", M: s.M, N: s.N, K: s.K, ta: s.ta, tb: s.tb, seconds });
        if (!res.error) peerBest[lib] = Math.min(peerBest[lib] ?? Infinity, res.best_s as number);
      }
    }
    const gf = (t: number | undefined) => (t === undefined ? null : flops / t / 1e9);
    rows.push({ ...s, native: gf(nat), numpy: gf(peerBest.numpy), torch: gf(peerBest.torch), nativeBf16: hasBf16 ? gf(bf16) : null });
  }
  printTable(
    `fp32 GEMM, GFLOP/s (best of ${rounds} alternating rounds; peak ${fmt(peak)} GFLOP/s on ${o.threads} threads)`,
    ["shape", "M x N x K", "op", "sinkflex", "% peak", "numpy", "torch", "sinkflex / numpy", `sinkflex bf16 (${unit})`, "bf16 / fp32"],
    rows.map((r: any) => [
      r.name, `${r.M} x ${r.N} x ${r.K}`, `${r.ta ? "T" : "N"}${r.tb ? "T" : "N"}`, fmt(r.native),
      fmt((100 * r.native) / peak, 0), r.numpy === null ? "peer unavailable" : fmt(r.numpy),
      r.torch === null ? "peer unavailable" : fmt(r.torch), r.numpy === null ? "-" : fmt(r.native / r.numpy, 2),
      r.nativeBf16 === null ? "no bf16 unit" : fmt(r.nativeBf16), r.nativeBf16 === null ? "-" : fmt(r.nativeBf16 / r.native, 2),
    ]),
  );
  out.gemm = rows.map((r: any) => ({ ...r, ratioVsNumpy: r.numpy ? r.native / r.numpy : null, ratioVsTorch: r.torch ? r.native / r.torch : null }));
}

async function trainSection(o: Options, k: Kernels, peers: Map<string, Peer>, out: Record<string, unknown>) {
  const B = o.quick ? 2 : 8;
  const T = o.quick ? 128 : 512;
  const steps = o.quick ? 1 : 2;
  const cfg = parseHfConfig(SMALL_QWEN2);
  const seqs = Array.from({ length: B }, (_, b) => randomTokens(T, cfg.vocabSize, 100 + b));
  // Each contender is an engine and its step, warmed up (workspaces, optimizer state); a full step trains
  // every weight, a LoRA step a BENCH_LORA adapter on a base held in `dtype`.
  const contender = (lora: { dtype: WeightDtype } | null = null) => {
    const engine = createRandomModel(cfg, 1, { kernels: k, ...(lora ? { dtype: lora.dtype } : {}) });
    if (lora) engine.enableLora(createLoraAdapter(cfg, BENCH_LORA, 1));
    const cpu: number[] = [];
    const step = () => {
      const t0 = performance.now();
      const c0 = process.cpuUsage();
      engine.forwardBackwardSync(seqs, meanNll);
      engine.optimStepSync({ lr: 1e-4, weightDecay: 0 });
      cpu.push(cpuSeconds(c0));
      return (performance.now() - t0) / 1000;
    };
    step();
    cpu.length = 0;
    return { engine, step, times: [] as number[], cpu };
  };
  // Steps of each contender in alternating rounds, so a burst of other load hits every one alike.
  let fullCpu: number[] = [];
  const stepTimes = (...lora: ({ dtype: WeightDtype } | null)[]) => {
    const cs = lora.map((l) => contender(l));
    for (let i = 0; i < steps; i++) for (const c of cs) c.times.push(c.step());
    for (const c of cs) c.engine.dispose();
    if (lora[0] === null && fullCpu.length === 0) fullCpu = cs[0]!.cpu;
    return cs.map((c) => c.times);
  };
  const [times, loraTimes, loraBf16Times] = stepTimes(null, { dtype: "fp32" }, { dtype: "bf16" }) as [number[], number[], number[]];
  const ours = (B * T) / Math.min(...times);
  const oursCpu = (B * T) / Math.min(...fullCpu);
  const lora = (B * T) / Math.min(...loraTimes);
  const loraBf16 = (B * T) / Math.min(...loraBf16Times);
  let bf16: number | null = null;
  const unit = bf16Unit();
  if (unit !== "none") {
    setMatmulPrecision("bf16");
    bf16 = (B * T) / Math.min(...stepTimes(null)[0]!);
    setMatmulPrecision("fp32");
  }
  let torch: PeerReply | null = null;
  const peer = peers.get("torch");
  if (peer) torch = await peer.request({ op: "train_step", config: SMALL_QWEN2, batch: B, seq: T, steps });
  const theirs = torch && !torch.error ? (torch.tokens_per_s as number) : null;
  const theirsCpu = torch && !torch.error && typeof torch.best_cpu_s === "number" ? (B * T) / torch.best_cpu_s : null;
  const params = parameterCount(SMALL_QWEN2);
  printTable(
    `Training step (forward + backward + AdamW), ${(params / 1e6).toFixed(1)}M-parameter Qwen2 shape, batch ${B} x seq ${T}, tokens/s`,
    ["", "sinkflex", "PyTorch eager", "sinkflex / PyTorch"],
    [
      ["tokens/s", fmt(ours, 0), theirs === null ? `peer unavailable${torch?.error ? ` (${torch.error})` : ""}` : fmt(theirs, 0), theirs ? fmt(ours / theirs, 2) : "-"],
      ["tokens per CPU second (the process's CPU time: other load does not count)", fmt(oursCpu, 0), fmt(theirsCpu, 0), theirsCpu ? fmt(oursCpu / theirsCpu, 2) : "-"],
      ...(bf16 === null ? [] : [[`tokens/s, bf16 products on ${unit} (${fmt(bf16 / ours, 2)}x fp32)`, fmt(bf16, 0), "-", "-"]]),
      [`tokens/s, LoRA r${BENCH_LORA.rank} on every projection, fp32 base (step time ${fmt(ours / lora, 2)}x full)`, fmt(lora, 0), "-", "-"],
      [`tokens/s, LoRA r${BENCH_LORA.rank} on every projection, bf16 base (step time ${fmt(ours / loraBf16, 2)}x full)`, fmt(loraBf16, 0), "-", "-"],
    ],
  );
  out.train = {
    batch: B, seq: T, params, sinkflexTokensPerS: ours, sinkflexStepS: times, sinkflexStepCpuS: fullCpu, sinkflexBf16TokensPerS: bf16, torch, ratio: theirs ? ours / theirs : null,
    sinkflexTokensPerCpuS: oursCpu, torchTokensPerCpuS: theirsCpu, ratioCpu: theirsCpu ? oursCpu / theirsCpu : null,
    lora: {
      config: BENCH_LORA, params: loraParamCount(cfg, BENCH_LORA),
      fp32Base: { tokensPerS: lora, stepS: loraTimes, stepTimeVsFull: ours / lora },
      bf16Base: { tokensPerS: loraBf16, stepS: loraBf16Times, stepTimeVsFull: ours / loraBf16 },
    },
  };
}

async function decodeSection(o: Options, k: Kernels, peers: Map<string, Peer>, out: Record<string, unknown>) {
  const cfg = parseHfConfig(SMALL_QWEN2);
  const prompt = o.quick ? 32 : 128;
  const newTokens = o.quick ? 16 : 64;
  const rows: Record<string, unknown>[] = [];
  for (const batch of [1, 32]) {
    // the warm-up is the peer's: 8 prompt tokens, 2 new, at the same batch
    const engine = createRandomModel(cfg, 1, { kernels: k });
    const ours = await sinkflexDecode(engine, batch, prompt, newTokens);
    engine.dispose();
    const peer = peers.get("torch");
    const hf = peer ? await peer.request({ op: "decode", config: SMALL_QWEN2, batch, prompt, new_tokens: newTokens }) : null;
    const theirs = hf && !hf.error ? (hf.tokens_per_s as number) : null;
    const theirsCpu = hf && !hf.error && typeof hf.cpu_seconds === "number" ? (hf.new_tokens as number) * batch / hf.cpu_seconds : null;
    rows.push({
      batch, prompt, newTokens, sinkflexTokensPerS: ours.tokensPerS, sinkflexSeconds: ours.seconds, hf, ratio: theirs ? ours.tokensPerS / theirs : null,
      sinkflexTokensPerCpuS: ours.tokensPerCpuS, hfTokensPerCpuS: theirsCpu, ratioCpu: theirsCpu ? ours.tokensPerCpuS / theirsCpu : null,
    });
  }
  printTable(
    `KV-cache greedy decoding (prompt ${prompt} + ${newTokens} new tokens per sequence, prefill included), new tokens/s and new tokens per CPU second`,
    ["batch", "sinkflex", "HF generate (PyTorch)", "sinkflex / HF", "sinkflex per CPU s", "HF per CPU s", "sinkflex / HF, CPU time"],
    rows.map((r: any) => [
      String(r.batch), fmt(r.sinkflexTokensPerS, 0),
      r.hf && !r.hf.error ? fmt(r.hf.tokens_per_s, 0) : `peer unavailable${r.hf?.error ? ` (${r.hf.error})` : ""}`,
      r.ratio === null ? "-" : fmt(r.ratio, 2), fmt(r.sinkflexTokensPerCpuS, 0), fmt(r.hfTokensPerCpuS, 0), r.ratioCpu === null ? "-" : fmt(r.ratioCpu, 2),
    ]),
  );
  out.decode = rows;
}

/** Greedy decoding of `batch` prompts on `engine`, after a warm-up of the same batch (8 prompt tokens, 2 new); new tokens/s. */
async function sinkflexDecode(
  engine: EmbeddedEngine, batch: number, prompt: number, newTokens: number,
): Promise<{ tokensPerS: number; seconds: number; cpuSeconds: number; tokensPerCpuS: number }> {
  const V = engine.config.vocabSize;
  const prompts = Array.from({ length: batch }, (_, b) => randomTokens(prompt, V, 500 + b));
  const warm = await Promise.all(prompts.map((p) => engine.session(p.slice(0, 8))));
  await engine.sampleBatch(warm, warm.map(() => ({ temperature: 0, maxTokens: 2 })));
  for (const w of warm) w.close();
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const sessions = [];
  for (const p of prompts) sessions.push(await engine.session(p));
  const res = await engine.sampleBatch(sessions, sessions.map(() => ({ temperature: 0, maxTokens: newTokens })));
  const seconds = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(c0);
  for (const s of sessions) s.close();
  const produced = res.reduce((a, r) => a + r.tokens.length, 0);
  return { tokensPerS: produced / seconds, seconds, cpuSeconds: cpu, tokensPerCpuS: produced / cpu };
}

/** llama.cpp through node-llama-cpp (bench/peers/llama_cpp.mjs) decoding `gguf`; its JSON answer, or { error }. */
function llamaCppDecode(gguf: string, threads: number, batch: number, prompt: number, newTokens: number, vocab: number): PeerReply {
  const cmd = JSON.stringify({ gguf, batch, prompt, new_tokens: newTokens, threads, vocab });
  const res = spawnSync(process.execPath, [join(here, "peers", "llama_cpp.mjs"), cmd], { encoding: "utf8", maxBuffer: 1 << 20, timeout: 1_800_000 });
  try {
    return JSON.parse(res.stdout.trim().split("\n").pop() ?? "") as PeerReply;
  } catch {
    return { error: `llama_cpp.mjs failed (status ${res.status}${res.signal ? `, ${res.signal}` : ""}): ${res.stderr.trim().slice(-300)}` };
  }
}

/**
 * The sampler/trainer log-prob gap of int8 sampling: one session of `engine` (sampling from int8 copies)
 * samples `newTokens` at temperature 1 after `prompt`, and the same engine scores the sequence teacher-forced
 * with its weights (what GRPO's trainer computes); mean and largest |sampler - trainer| over the sampled
 * tokens, and the same for a session sampling from the weights themselves (the gap without int8).
 */
async function int8Gap(engine: EmbeddedEngine, prompt: number[], newTokens: number): Promise<{ meanAbs: number; maxAbs: number; meanAbsSame: number; tokens: number }> {
  const gapOf = async (): Promise<number[]> => {
    const session = await engine.session(prompt);
    const res = await session.sample({ temperature: 1, maxTokens: newTokens, seed: 3 });
    session.close();
    const seq = [...prompt, ...res.tokens];
    const [lp] = await engine.logprobs([seq]);
    return res.tokens.map((_, j) => Math.abs(res.logprobs[j]! - lp![prompt.length - 1 + j]!));
  };
  engine.useSamplingWeights("int8");
  const int8 = await gapOf();
  engine.useSamplingWeights("same");
  const same = await gapOf();
  const mean = (a: number[]) => a.reduce((x, y) => x + y, 0) / Math.max(a.length, 1);
  return { meanAbs: mean(int8), maxAbs: Math.max(...int8), meanAbsSame: mean(same), tokens: int8.length };
}

/**
 * Greedy decoding of the Qwen2.5-0.5B shape, one checkpoint of random weights for every contender:
 * sinkflex with the weights in fp32, in bf16, and in bf16 sampling from int8 copies; llama.cpp on an F16
 * and a Q8_0 GGUF written from the checkpoint (bench/peers/gguf_qwen2.py); Hugging Face generate (fp32);
 * at batch 1 and 32. Then the int8 sampler's log-prob gap to the bf16 trainer (int8Gap).
 */
async function decode05bSection(o: Options, k: Kernels, peers: Map<string, Peer>, out: Record<string, unknown>) {
  const prompt = o.quick ? 32 : 128;
  const newTokens = o.quick ? 16 : 64;
  const dir = mkdtempSync(join(tmpdir(), "sinkflex-bench-05b-"));
  try {
    const ckpt = join(dir, "ckpt");
    {
      const engine = createRandomModel(parseHfConfig(QWEN25_05B), 1, { kernels: k });
      engine.saveSync(ckpt);
      engine.dispose();
    }
    const ggufs: Record<"f16" | "q8_0", { path: string; error: string | null }> = { f16: { path: "", error: null }, q8_0: { path: "", error: null } };
    for (const kind of ["f16", "q8_0"] as const) {
      const path = join(dir, `model-${kind}.gguf`);
      const conv = spawnSync(o.python, [join(here, "peers", "gguf_qwen2.py"), ckpt, path, kind], { encoding: "utf8", maxBuffer: 1 << 20 });
      ggufs[kind] = { path, error: conv.status === 0 ? null : `gguf_qwen2.py failed (status ${conv.status}): ${(conv.stderr || conv.stdout).trim().split("\n").pop()}` };
    }
    const llama = (kind: "f16" | "q8_0", batch: number) =>
      ggufs[kind].error ? { error: ggufs[kind].error } : llamaCppDecode(ggufs[kind].path, o.threads, batch, prompt, newTokens, QWEN25_05B.vocab_size);
    const rows: Record<string, unknown>[] = [];
    for (const batch of [1, 32]) {
      const row: Record<string, any> = { batch, prompt, newTokens };
      for (const variant of ["fp32", "bf16", "int8"] as const) {
        const engine = loadEngine(ckpt, { kernels: k, dtype: variant === "fp32" ? "fp32" : "bf16", samplingWeights: variant === "int8" ? "int8" : "same" });
        row[variant] = await sinkflexDecode(engine, batch, prompt, newTokens);
        engine.dispose();
      }
      row.llamaCpp = llama("f16", batch);
      row.llamaCppQ8 = llama("q8_0", batch);
      const peer = peers.get("torch");
      row.hf = peer ? await peer.request({ op: "decode", checkpoint: ckpt, batch, prompt, new_tokens: newTokens }, 1_800_000) : { error: "torch peer not started" };
      rows.push(row);
    }
    const tps = (r: any) => (r && !r.error ? (r.tokens_per_s as number) : null);
    const cell = (r: any) => (tps(r) === null ? `peer unavailable${r?.error ? ` (${String(r.error).slice(0, 120)})` : ""}` : fmt(tps(r), 1));
    const best = (r: any) => Math.max(r.fp32.tokensPerS, r.bf16.tokensPerS);
    const ratio = (a: number | null, b: number | null) => (a !== null && b ? fmt(a / b, 2) : "-");
    const columns = ["batch", "sinkflex fp32", "sinkflex bf16", "sinkflex int8", "llama.cpp F16", "llama.cpp Q8_0", "HF generate fp32", "bf16 / llama.cpp F16", "int8 / llama.cpp Q8_0", "best fp32/bf16 / HF"];
    printTable(
      `KV-cache greedy decoding, Qwen2.5-0.5B shape (one checkpoint of random weights), prompt ${prompt} + ${newTokens} new tokens per sequence, prefill included, new tokens/s`,
      columns,
      rows.map((r: any) => [
        String(r.batch), fmt(r.fp32.tokensPerS, 1), fmt(r.bf16.tokensPerS, 1), fmt(r.int8.tokensPerS, 1), cell(r.llamaCpp), cell(r.llamaCppQ8), cell(r.hf),
        ratio(r.bf16.tokensPerS, tps(r.llamaCpp)), ratio(r.int8.tokensPerS, tps(r.llamaCppQ8)), ratio(best(r), tps(r.hf)),
      ]),
    );
    // The same runs in new tokens per CPU second of each contender's process (other load does not count).
    const perCpu = (r: any) => (r && !r.error && typeof r.cpu_seconds === "number" ? (r.produced ?? r.new_tokens * r.batch) / r.cpu_seconds : null);
    const bestCpu = (r: any) => Math.max(r.fp32.tokensPerCpuS, r.bf16.tokensPerCpuS);
    printTable(
      "The same decoding, new tokens per CPU second",
      columns,
      rows.map((r: any) => [
        String(r.batch), fmt(r.fp32.tokensPerCpuS, 1), fmt(r.bf16.tokensPerCpuS, 1), fmt(r.int8.tokensPerCpuS, 1), fmt(perCpu(r.llamaCpp), 1), fmt(perCpu(r.llamaCppQ8), 1), fmt(perCpu(r.hf), 1),
        ratio(r.bf16.tokensPerCpuS, perCpu(r.llamaCpp)), ratio(r.int8.tokensPerCpuS, perCpu(r.llamaCppQ8)), ratio(bestCpu(r), perCpu(r.hf)),
      ]),
    );
    console.log("targets: batch 1 bf16 >= llama.cpp F16; batch 32 >= 2x HF generate; int8 (optional) reported against Q8_0");
    // int8's sampler/trainer gap, on the same checkpoint held in bf16
    const engine = loadEngine(ckpt, { kernels: k, dtype: "bf16" });
    const gap = await int8Gap(engine, randomTokens(prompt, QWEN25_05B.vocab_size, 900), newTokens);
    engine.dispose();
    console.log(
      `int8 sampling vs the bf16 trainer, ${gap.tokens} tokens sampled at temperature 1: mean |log-prob gap| ${gap.meanAbs.toExponential(2)} (largest ${gap.maxAbs.toExponential(2)}); ` +
        `sampling from the bf16 weights themselves: ${gap.meanAbsSame.toExponential(2)}`,
    );
    out.decode05b = rows.map((r: any) => ({
      ...r,
      ratioVsLlamaCpp: tps(r.llamaCpp) ? r.bf16.tokensPerS / tps(r.llamaCpp)! : null,
      ratioInt8VsQ8: tps(r.llamaCppQ8) ? r.int8.tokensPerS / tps(r.llamaCppQ8)! : null,
      ratioVsHf: tps(r.hf) ? best(r) / tps(r.hf)! : null,
      ratioVsLlamaCppCpu: perCpu(r.llamaCpp) ? r.bf16.tokensPerCpuS / perCpu(r.llamaCpp)! : null,
      ratioInt8VsQ8Cpu: perCpu(r.llamaCppQ8) ? r.int8.tokensPerCpuS / perCpu(r.llamaCppQ8)! : null,
      ratioVsHfCpu: perCpu(r.hf) ? bestCpu(r) / perCpu(r.hf)! : null,
    }));
    out.decode05bInt8Gap = gap;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * How fast one decoded row reads each weight matrix of the Qwen2.5-0.5B shape from memory: y = x W^T with
 * W in bf16 (gemmW16), in int8 (gemmQ8) and in fp32 (sgemv), in GB/s of the weights' own bytes, beside a
 * plain sequential read of as many bytes (sumSquares over fp32) in the same run. Each kind rotates through
 * enough copies of W to pass 64 MB (so none stays in cache); rounds alternate the kinds; medians of 3.
 */
function stream05bSection(o: Options, k: Kernels, out: Record<string, unknown>) {
  const C = QWEN25_05B.hidden_size;
  const F = QWEN25_05B.intermediate_size;
  const shapes: [string, number, number][] = [["q, o", C, C], ["k, v", 128, C], ["gate, up", F, C], ["down", C, F], ["LM head", QWEN25_05B.vocab_size, C]];
  if (o.quick) shapes.pop(); // the head's copies alone are 1.4 GB
  const budget = o.quick ? 16 << 20 : 64 << 20;
  const rounds = o.quick ? 1 : 3;
  const median = (a: number[]) => a.slice().sort((x, y) => x - y)[a.length >> 1]!;
  const rows: Record<string, unknown>[] = [];
  for (const [name, N, K] of shapes) {
    const copies = Math.max(2, Math.ceil(budget / (N * K * 2)));
    const rnd = (n: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37));
    const wf = rnd(N * K);
    const bf16 = Array.from({ length: copies }, () => roundToBf16(wf));
    const int8 = Array.from({ length: copies }, () => k.quantizeWeight(N, K, wf, K));
    const fp32 = Array.from({ length: Math.max(2, Math.ceil(budget / (N * K * 4))) }, () => wf.slice());
    const x = rnd(K);
    const y = new Float32Array(N);
    const kinds = {
      bf16: { bytes: N * K * 2, run: (i: number) => k.gemmW16(true, 1, N, K, 1, x, K, bf16[i % bf16.length]!, K, 0, y, N) },
      int8: { bytes: N * (Math.ceil(K / 32) * 32) * 1.125, run: (i: number) => k.gemmQ8(1, 1, x, K, int8[i % int8.length]!, 0, y, N) },
      fp32: { bytes: N * K * 4, run: (i: number) => k.sgemv(false, N, K, 1, fp32[i % fp32.length]!, K, x, 0, y) },
      read: { bytes: N * K * 4, run: (i: number) => k.sumSquares(N * K, fp32[i % fp32.length]!) },
    };
    const rates: Record<string, number[]> = { bf16: [], int8: [], fp32: [], read: [] };
    for (let r = 0; r < rounds; r++) {
      for (const [kind, { bytes, run }] of Object.entries(kinds)) {
        const reps = Math.max(4, Math.ceil((o.quick ? 2e8 : 1e9) / bytes));
        run(0);
        const t0 = performance.now();
        for (let i = 0; i < reps; i++) run(i + 1);
        rates[kind]!.push((reps * bytes) / ((performance.now() - t0) / 1000) / 1e9);
      }
    }
    rows.push({ matrix: name, N, K, ...Object.fromEntries(Object.entries(rates).map(([kind, v]) => [kind, median(v)])) });
  }
  printTable(
    `One decoded row, y = x W^T, Qwen2.5-0.5B shape: GB/s of W's bytes read from memory (median of ${rounds}), beside a plain sequential read`,
    ["matrix", "N x K", "bf16 (gemmW16)", "int8 (gemmQ8)", "fp32 (sgemv)", "sequential read", "bf16 / read", "int8 / read"],
    rows.map((r: any) => [r.matrix, `${r.N} x ${r.K}`, fmt(r.bf16, 1), fmt(r.int8, 1), fmt(r.fp32, 1), fmt(r.read, 1), fmt(r.bf16 / r.read, 2), fmt(r.int8 / r.read, 2)]),
  );
  out.stream05b = rows;
}

/** Which run a memory child makes (SFX_BENCH_MEMORY): the training step, or sampling in a dtype. */
const MEMORY_RUNS = {
  train: null,
  "sample-fp32": { dtype: "fp32", label: "sample, fp32 weights" },
  "sample-fp32-unpacked": { dtype: "fp32", label: "sample, fp32 weights, no packed copies", packWeights: false },
  "sample-bf16": { dtype: "bf16", label: "sample, bf16 weights" },
} as const satisfies Record<string, { dtype: WeightDtype; label: string; packWeights?: boolean } | null>;
type MemoryRun = keyof typeof MEMORY_RUNS;

/**
 * In a child process: one session of the Qwen2.5-0.5B shape (random weights held in `dtype`) prefilling a
 * 128-token prompt and sampling 32 tokens (8 with --quick); prints JSON with the peak RSS.
 */
function memorySampleChild(o: Options, run: Exclude<MemoryRun, "train">): void {
  const k = getKernels();
  const spec = MEMORY_RUNS[run];
  const cfg = parseHfConfig(QWEN25_05B);
  const t0 = performance.now();
  const engine = createRandomModel(cfg, 1, { kernels: k, dtype: spec.dtype, ...("packWeights" in spec ? { packWeights: spec.packWeights } : {}) });
  const tBuilt = performance.now();
  const session = engine.sessionSync(randomTokens(128, cfg.vocabSize, 7));
  const maxTokens = o.quick ? 8 : 32;
  const tokens = engine.sampleBatchSync([session], [{ maxTokens, temperature: 1, seed: 1 }])[0]!.tokens.length;
  const tDone = performance.now();
  console.log(JSON.stringify({
    run, params: parameterCount(QWEN25_05B), maxRssBytes: process.resourceUsage().maxRSS * 1024,
    weightBytes: weightBytes(engine.weights), packedBytes: engine.model.packed?.bytes ?? 0, tokens,
    buildSeconds: (tBuilt - t0) / 1000, sampleSeconds: (tDone - tBuilt) / 1000,
  }));
}

/** The LoRA adapter of the memory and train sections: rank 16 on every projection (q/k/v/o/gate/up/down). */
/** Rank 16 on every projection of a Qwen2 layer (the benchmark's models are Qwen2-shaped). */
const BENCH_LORA: LoraConfig = { rank: 16, alpha: 32, targets: ["q", "k", "v", "o", "gate", "up", "down"] };

/** The LoRA training steps the memory section measures, each in its own child (SFX_BENCH_MEMORY). */
const LORA_MEMORY_RUNS = {
  "lora-fp32": { dtype: "fp32", label: "LoRA step, fp32 base" },
  "lora-bf16": { dtype: "bf16", label: "LoRA step, bf16 base" },
} as const satisfies Record<string, { dtype: WeightDtype; label: string }>;
type LoraMemoryRun = keyof typeof LORA_MEMORY_RUNS;

/**
 * In a child process: one LoRA training step (forward + backward + AdamW on the adapter) of the
 * Qwen2.5-0.5B shape (random weights held in `dtype`) at batch 1 x seq 4096 (512 with --quick); prints JSON
 * with the peak RSS.
 */
function loraMemoryChild(o: Options, run: LoraMemoryRun): void {
  const k = getKernels();
  const spec = LORA_MEMORY_RUNS[run];
  const T = o.quick ? 512 : 4096;
  const cfg = parseHfConfig(QWEN25_05B);
  const t0 = performance.now();
  const engine = createRandomModel(cfg, 1, { kernels: k, dtype: spec.dtype });
  engine.enableLora(createLoraAdapter(cfg, BENCH_LORA, 1));
  const seq = randomTokens(T, cfg.vocabSize, 7);
  const tBuilt = performance.now();
  engine.forwardBackwardSync([seq], meanNll);
  engine.optimStepSync({ lr: 1e-4, weightDecay: 0 });
  const tStep = performance.now();
  console.log(JSON.stringify({
    run, dtype: spec.dtype, seq: T, params: parameterCount(QWEN25_05B), lora: BENCH_LORA, loraParams: loraParamCount(cfg, BENCH_LORA),
    activationCheckpointing: engine.checkpointsBatch(T), maxRssBytes: process.resourceUsage().maxRSS * 1024, weightBytes: weightBytes(engine.weights), packedBytes: engine.model.packed?.bytes ?? 0,
    buildSeconds: (tBuilt - t0) / 1000, stepSeconds: (tStep - tBuilt) / 1000,
  }));
}

/** In a child process: one training step of the Qwen2.5-0.5B shape at seq 1024; prints JSON. */
async function memoryChild(o: Options): Promise<void> {
  const run = (process.env.SFX_BENCH_MEMORY ?? "train") as MemoryRun | LoraMemoryRun;
  if (run in LORA_MEMORY_RUNS) return loraMemoryChild(o, run as LoraMemoryRun);
  if (!(run in MEMORY_RUNS)) throw new Error(`SFX_BENCH_MEMORY: unknown run "${run}" (${[...Object.keys(MEMORY_RUNS), ...Object.keys(LORA_MEMORY_RUNS)].join(", ")})`);
  if (run !== "train") return memorySampleChild(o, run as Exclude<MemoryRun, "train">);
  const k = getKernels();
  const T = o.quick ? 256 : 1024;
  const cfg = parseHfConfig(QWEN25_05B);
  const t0 = performance.now();
  const engine = createRandomModel(cfg, 1, { kernels: k });
  const seq = randomTokens(T, cfg.vocabSize, 7);
  const tBuilt = performance.now();
  engine.forwardBackwardSync([seq], meanNll);
  engine.optimStepSync({ lr: 1e-5, weightDecay: 0.01 });
  const tStep = performance.now();
  const ru = process.resourceUsage();
  console.log(JSON.stringify({
    seq: T, params: parameterCount(QWEN25_05B), maxRssBytes: ru.maxRSS * 1024,
    buildSeconds: (tBuilt - t0) / 1000, stepSeconds: (tStep - tBuilt) / 1000,
  }));
}

/** Runs one memory child; its JSON line, or { error }. */
function runMemoryChild(o: Options, run: MemoryRun | LoraMemoryRun): any {
  const tsx = join(here, "..", "node_modules", "tsx", "dist", "cli.mjs");
  const args = [tsx, fileURLToPath(import.meta.url), "--memory-child", "--threads", String(o.threads), ...(o.quick ? ["--quick"] : [])];
  const env = { ...process.env, SINKFLEX_THREADS: String(o.threads), SFX_BENCH_MEMORY: run };
  const res = spawnSync(process.execPath, args, { encoding: "utf8", env, maxBuffer: 1 << 20 });
  const line = res.stdout.trim().split("\n").pop() ?? "";
  try {
    return JSON.parse(line);
  } catch {
    return { error: `the child process failed (status ${res.status}): ${res.stderr.trim().slice(-500)}` };
  }
}

function memorySection(o: Options, out: Record<string, unknown>) {
  sampleMemorySection(o, out);
  const m = runMemoryChild(o, "train");
  if (m.error) {
    console.log(`\nmemory: ${m.error}`);
    out.memory = { error: m.error };
    return;
  }
  const gib = m.maxRssBytes / 2 ** 30;
  printTable(
    `Peak memory, one training step (forward + backward + AdamW) of a Qwen2.5-0.5B shape (${(m.params / 1e6).toFixed(0)}M params, random weights), batch 1 x seq ${m.seq}`,
    ["", "peak RSS (GiB)", "limit (GiB)", "fits", "step (s)"],
    [["sinkflex", fmt(gib, 2), "16", gib <= 16 ? "yes" : "NO", fmt(m.stepSeconds, 1)]],
  );
  out.memory = { ...m, peakGiB: gib, fits16GiB: gib <= 16 };
  loraMemorySection(o, out);
}

/** Peak RSS of a LoRA training step of the Qwen2.5-0.5B shape at seq 4096, on an fp32 base and on a bf16 base. */
function loraMemorySection(o: Options, out: Record<string, unknown>) {
  const runs = Object.keys(LORA_MEMORY_RUNS) as LoraMemoryRun[];
  const limitGiB = 6;
  const results = runs.map((run) => runMemoryChild(o, run));
  const gib = (b: number) => b / 2 ** 30;
  const T = o.quick ? 512 : 4096;
  printTable(
    `Peak memory, one LoRA training step (rank ${BENCH_LORA.rank}, alpha ${BENCH_LORA.alpha}, ${BENCH_LORA.targets.join("/")}; forward + backward + AdamW on the adapter) of a Qwen2.5-0.5B shape (random weights), batch 1 x seq ${T}`,
    ["", "peak RSS (GiB)", "target (GiB)", "fits", "weights (GiB)", "packed copies (GiB)", "adapter params", "activation checkpointing", "step (s)"],
    results.map((m, i) => m.error
      ? [LORA_MEMORY_RUNS[runs[i]!].label, "failed", String(limitGiB), "-", "-", "-", "-", "-", "-"]
      : [LORA_MEMORY_RUNS[runs[i]!].label, fmt(gib(m.maxRssBytes), 2), String(limitGiB), gib(m.maxRssBytes) < limitGiB ? "yes" : "NO",
        fmt(gib(m.weightBytes), 2), fmt(gib(m.packedBytes), 2), String(m.loraParams), m.activationCheckpointing ? "on" : "off", fmt(m.stepSeconds, 1)]),
  );
  for (const m of results) if (m.error) console.log(`memory: ${m.error}`);
  out.memoryLora = Object.fromEntries(results.map((m, i) => [runs[i]!, m.error ? m : { ...m, peakGiB: gib(m.maxRssBytes), targetGiB: limitGiB, fits: gib(m.maxRssBytes) < limitGiB }]));
}

/** Peak RSS of sampling the Qwen2.5-0.5B shape with its weights in fp32 (with and without packed copies) and in bf16. */
function sampleMemorySection(o: Options, out: Record<string, unknown>) {
  const runs = ["sample-fp32", "sample-fp32-unpacked", "sample-bf16"] as const;
  const results = runs.map((run) => runMemoryChild(o, run));
  const gib = (b: number) => b / 2 ** 30;
  const rows = results.map((m, i) => m.error
    ? [MEMORY_RUNS[runs[i]!].label, "failed", "-", "-", "-"]
    : [MEMORY_RUNS[runs[i]!].label, fmt(gib(m.maxRssBytes), 2), fmt(gib(m.weightBytes), 2), fmt(gib(m.packedBytes), 2), fmt(m.tokens / m.sampleSeconds, 1)]);
  printTable(
    `Peak memory, sampling a Qwen2.5-0.5B shape (random weights): a 128-token prompt, then ${o.quick ? 8 : 32} tokens`,
    ["", "peak RSS (GiB)", "weights (GiB)", "packed copies (GiB)", "tokens/s (with prefill)"],
    rows,
  );
  for (const m of results) if (m.error) console.log(`memory: ${m.error}`);
  out.memorySample = Object.fromEntries(results.map((m, i) => [runs[i]!, m.error ? m : { ...m, peakGiB: gib(m.maxRssBytes) }]));
}

// ------------------------------------------------------------------------------------------ main

function commitOf(): string {
  const r = spawnSync("git", ["rev-parse", "--short", "HEAD"], { cwd: join(here, ".."), encoding: "utf8" });
  const dirty = spawnSync("git", ["status", "--porcelain", "--untracked-files=no", "--", "src/kernels", "src/model", "src/engine", "native", "bench/engine.bench.ts", "bench/peers"], {
    cwd: join(here, ".."), encoding: "utf8",
  });
  return (r.stdout.trim() || "unknown") + (dirty.stdout.trim() ? "+dirty" : "");
}

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  process.env.SINKFLEX_THREADS = String(o.threads);
  // Before the addon loads (it reads SINKFLEX_SIMD once); the memory child inherits it.
  if (o.simd === "avx2") process.env.SINKFLEX_SIMD = "avx2";
  if (o.memoryChild) {
    setNativeThreads(o.threads);
    return memoryChild(o);
  }
  const k = getKernels();
  if (k.name !== "native") console.log(`note: native kernels unavailable (${nativeLoadError()}); measuring the reference`);
  else setNativeThreads(o.threads);
  if (o.simd === "avx2" && k.name === "native" && !k.describe().startsWith("native (avx2")) {
    throw new Error(`--simd avx2: the native kernels run ${k.describe()}, not their AVX2 code (this CPU lacks AVX2 and FMA, or SINKFLEX_SIMD lowers it further); run without --simd`);
  }
  const cpu = cpus()[0]?.model ?? "unknown CPU";
  const peak1 = k.name === "native" ? measurePeakGflops(o.quick ? 0.3 : 1, 1) : NaN;
  const peak = k.name === "native" ? measurePeakGflops(o.quick ? 0.3 : 1, o.threads) : NaN;
  const out: Record<string, unknown> = {
    commit: commitOf(), date: new Date().toISOString(), quick: o.quick, simd: o.simd,
    peerSimdEnv: o.simd === "avx2" ? PEER_SIMD_ENV : null,
    machine: {
      cpu, cores: cpus().length, threads: o.threads, kernels: k.describe(), peakGflops1Thread: peak1, peakGflops: peak,
      loadAverageAtStart: loadavg(),
    },
  };
  console.log(`sinkflex engine benchmark  commit ${out.commit as string}  ${out.date as string}${o.quick ? "  (--quick: small sizes)" : ""}`);
  console.log(`machine: ${cpu}, ${cpus().length} cores; ${o.threads} threads for every contender; kernels: ${k.describe()}`);
  console.log(
    o.simd === "avx2"
      ? `simd: avx2 for every contender (sinkflex SINKFLEX_SIMD=avx2, no bf16 unit; peers ${Object.entries(PEER_SIMD_ENV).map(([n, v]) => `${n}=${v}`).join(" ")})`
      : "simd: native (each contender picks its own code for this CPU)",
  );
  console.log(`measured peak (FMA loop): ${fmt(peak1)} GFLOP/s on 1 thread, ${fmt(peak)} GFLOP/s on ${o.threads}`);
  // Other processes on the machine slow every contender alike; the load average says how busy it was.
  console.log(`load average at start: ${loadavg().map((x) => x.toFixed(1)).join(" ")}`);

  const peers = new Map<string, Peer>();
  const needTorch = o.only.has("gemm") || o.only.has("train") || o.only.has("decode") || o.only.has("decode-05b");
  for (const lib of ["numpy", "torch"] as const) {
    if (lib === "numpy" && !o.only.has("gemm")) continue;
    if (lib === "torch" && !needTorch) continue;
    const p = await Peer.start(lib, o.python, o.threads, o.simd);
    if (p instanceof Peer) {
      peers.set(lib, p);
      console.log(`peer ${lib}: ${JSON.stringify(p.info)}`);
    } else console.log(`peer ${lib}: peer unavailable (${p.unavailable})`);
  }
  out.peers = Object.fromEntries([...peers].map(([lib, p]) => [lib, p.info]));
  try {
    if (o.only.has("gemm")) await gemmSection(o, k, peak, new Map([...peers]), out);
    if (o.only.has("train")) await trainSection(o, k, peers, out);
    if (o.only.has("decode")) await decodeSection(o, k, peers, out);
    if (o.only.has("decode-05b")) await decode05bSection(o, k, peers, out);
    if (o.only.has("stream-05b")) stream05bSection(o, k, out);
  } finally {
    for (const p of peers.values()) p.close();
  }
  if (o.only.has("memory")) memorySection(o, out);
  else if (o.only.has("memory-sample")) sampleMemorySection(o, out);
  if (!o.only.has("memory") && o.only.has("memory-lora")) loraMemorySection(o, out);
  (out.machine as Record<string, unknown>).loadAverageAtEnd = loadavg();
  console.log(`\nload average at end: ${loadavg().map((x) => x.toFixed(1)).join(" ")}`);
  if (o.json) {
    writeFileSync(o.json, JSON.stringify(out, null, 2) + "\n");
    console.log(`\nwrote ${o.json}`);
  }
}

main().catch((err) => {
  console.error(`bench:engine: ${(err as Error).stack ?? String(err)}`);
  process.exit(1);
});
