/**
 * The backend benchmark: the embedded engine and the torch engine (a PyTorch worker, python/) side by side
 * on the CPU, in one run, on the same model (a ~21M-parameter Qwen2 shape, random weights saved once and
 * loaded by both) and the same threads:
 *
 *   train      one training step (forwardBackward with mean cross-entropy + AdamW), batch B x sequence T:
 *              tokens/s; for torch also the share of the step spent outside the worker's ops (framing,
 *              the socket, the TypeScript loss and checks: the step's wall time minus the `ms` the worker
 *              reports for its ops), the transport's cost (target: under 5%)
 *   decode     greedy KV-cache decoding at batch 1 and 32 (sampleBatch): sampled tokens/s
 *
 * It is not the kernel or peer benchmark (bench/engine.bench.ts). Without a Python that imports torch
 * and transformers the torch rows say why; the benchmark never fails for that.
 * Usage: npm run bench:backends -- [--quick] [--threads N] [--json FILE] [--python PATH]
 *        (python default: $SINKFLEX_TORCH_PYTHON, else python3)
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRandomModel } from "../src/engine/embedded.js";
import { openTorchEngine } from "../src/engine/torch/index.js";
import type { Engine, TokenLoss } from "../src/engine/types.js";
import { setNativeThreads } from "../src/kernels/index.js";
import { parseHfConfig } from "../src/model/config.js";

interface Options {
  quick: boolean;
  threads: number;
  json: string | null;
  python: string;
}

function parseArgs(argv: string[]): Options {
  const o: Options = { quick: false, threads: Number(process.env.SINKFLEX_THREADS) || Math.min(2, cpus().length), json: null, python: process.env.SINKFLEX_TORCH_PYTHON || "python3" };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const next = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === "--quick") o.quick = true;
    else if (a === "--threads") o.threads = Number(next());
    else if (a === "--json") o.json = next();
    else if (a === "--python") o.python = next();
    else if (a === "--help" || a === "-h") {
      console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("*/")[0]);
      process.exit(0);
    } else throw new Error(`unknown option ${a}; see --help`);
  }
  if (!(Number.isInteger(o.threads) && o.threads >= 1)) throw new Error("--threads must be a positive integer");
  return o;
}

/** The ~21M-parameter shape of bench/engine.bench.ts's training step. */
const MODEL = {
  architectures: ["Qwen2ForCausalLM"], model_type: "qwen2", hidden_size: 512, num_hidden_layers: 6, num_attention_heads: 8,
  num_key_value_heads: 2, intermediate_size: 1408, vocab_size: 8192, rms_norm_eps: 1e-6, rope_theta: 10000,
  max_position_embeddings: 2048, tie_word_embeddings: true, hidden_act: "silu",
};

/** Mean cross-entropy over every prediction: dLoss/dLogprob = -1/N. */
const meanCrossEntropy: TokenLoss = (lps) => {
  const n = lps.reduce((a, l) => a + l.length, 0);
  return { loss: -lps.reduce((a, l) => a + l.reduce((x, y) => x + y, 0), 0) / n, dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-1 / n)) };
};

function tokens(seed: number, n: number, V: number): number[] {
  let x = seed * 2654435761 + 1;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) >>> 0;
    return x % V;
  });
}

interface TrainFigures { tokensPerSec: number; msPerStep: number; outsideWorkerShare?: number }
interface DecodeFigures { batch: number; tokensPerSec: number }

async function trainStep(engine: Engine, B: number, T: number, steps: number, workerMs?: () => number): Promise<TrainFigures> {
  const seqs = Array.from({ length: B }, (_, i) => tokens(i + 1, T, MODEL.vocab_size));
  const step = async () => {
    await engine.forwardBackward(seqs, meanCrossEntropy);
    await engine.optimStep({ lr: 1e-4, maxGradNorm: 1 });
  };
  await step(); // warm-up (allocations, the optimizer's state)
  const w0 = workerMs?.() ?? 0;
  const t0 = performance.now();
  for (let i = 0; i < steps; i++) await step();
  const ms = performance.now() - t0;
  const out: TrainFigures = { tokensPerSec: (B * T * steps) / (ms / 1000), msPerStep: ms / steps };
  if (workerMs) out.outsideWorkerShare = Math.max(0, 1 - (workerMs() - w0) / ms);
  return out;
}

async function decode(engine: Engine, batch: number, newTokens: number): Promise<DecodeFigures> {
  const run = async (n: number) => {
    const sessions = await Promise.all(Array.from({ length: batch }, (_, i) => engine.session(tokens(100 + i, 16, MODEL.vocab_size))));
    const t0 = performance.now();
    const res = await engine.sampleBatch(sessions, sessions.map(() => ({ temperature: 0, maxTokens: n })));
    const ms = performance.now() - t0;
    for (const s of sessions) s.close();
    return res.reduce((a, r) => a + r.tokens.length, 0) / (ms / 1000);
  };
  await run(2); // warm-up
  return { batch, tokensPerSec: await run(newTokens) };
}

function torchMissing(python: string): string | null {
  const r = spawnSync(python, ["-c", "import torch, transformers, safetensors"], { encoding: "utf8", timeout: 120_000 });
  if (r.error) return `${python} cannot run (${r.error.message})`;
  return r.status === 0 ? null : `${python} cannot import torch/transformers/safetensors`;
}

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const [B, T, steps] = o.quick ? [2, 128, 2] : [8, 512, 3];
  const decodeTokens = o.quick ? [16, 4] : [64, 16];
  setNativeThreads(o.threads);
  const dir = join(mkdtempSync(join(tmpdir(), "sinkflex-bench-backends-")), "model");
  const embedded = createRandomModel(parseHfConfig(MODEL), 1);
  embedded.saveSync(dir);
  const results: Record<string, { train?: TrainFigures; decode?: DecodeFigures[]; unavailable?: string }> = {};
  try {
    console.log(`model: Qwen2 ${(embedded.weights.data.length / 1e6).toFixed(1)}M parameters; train batch ${B} x ${T}; ${o.threads} threads; ${cpus()[0]?.model ?? "cpu"}`);
    results.embedded = { train: await trainStep(embedded, B, T, steps), decode: [await decode(embedded, 1, decodeTokens[0]!), await decode(embedded, 32, decodeTokens[1]!)] };
    const missing = torchMissing(o.python);
    if (missing) results.torch = { unavailable: missing };
    else {
      const torch = await openTorchEngine({ model: dir, threads: o.threads, python: o.python });
      try {
        results.torch = {
          train: await trainStep(torch, B, T, steps, () => torch.client.workerMs),
          decode: [await decode(torch, 1, decodeTokens[0]!), await decode(torch, 32, decodeTokens[1]!)],
        };
      } finally {
        torch.dispose();
      }
    }
  } finally {
    embedded.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
  const f = (x: number | undefined, d = 0) => (x === undefined ? "-" : x.toFixed(d));
  console.log("\n| backend | train tokens/s | ms/step | outside the worker | decode b=1 tok/s | decode b=32 tok/s |");
  console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
  for (const [name, r] of Object.entries(results)) {
    if (r.unavailable) {
      console.log(`| ${name} | ${r.unavailable} | | | | |`);
      continue;
    }
    const share = r.train?.outsideWorkerShare;
    console.log(`| ${name} | ${f(r.train?.tokensPerSec)} | ${f(r.train?.msPerStep)} | ${share === undefined ? "-" : `${(100 * share).toFixed(2)}%`} | ${f(r.decode?.[0]?.tokensPerSec, 1)} | ${f(r.decode?.[1]?.tokensPerSec, 1)} |`);
  }
  if (o.json) {
    writeFileSync(o.json, JSON.stringify({ model: MODEL, batch: B, seq: T, steps, threads: o.threads, results }, null, 2));
    console.log(`\nwrote ${o.json}`);
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
