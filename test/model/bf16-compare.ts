/**
 * The comparison the bf16-weights tests run in a child process (so that SINKFLEX_SIMD, read once per
 * process by the native kernels, can differ per run): one random model held in fp32 and in bf16, and the
 * largest differences of their teacher-forced log-probs and of their decoding logits (a session's
 * `nextLogits`, through the KV-cache forward). Prints one JSON line. Not a test by itself.
 */
import { createRandomModel, EmbeddedEngine } from "../../src/engine/embedded.js";
import { convertWeights, randomWeights } from "../../src/model/index.js";
import { bf16Unit, loadNativeKernels } from "../../src/kernels/index.js";
import type { ModelConfig } from "../../src/model/config.js";

/** Depths not a multiple of 32 and widths not a multiple of 16, so the kernels' edges run too. */
export const BF16_TEST_CONFIG: ModelConfig = {
  arch: "qwen2", hiddenSize: 72, numLayers: 2, numHeads: 6, numKvHeads: 2, headDim: 12, intermediateSize: 136,
  vocabSize: 150, rmsNormEps: 1e-6, ropeTheta: 10000, ropeScaling: { type: "none" }, maxPositionEmbeddings: 512,
  tieWordEmbeddings: false, qkvBias: true,
};

export interface Bf16Comparison {
  /** The SIMD level the native kernels ran at, and the bf16 unit ("none": bf16 widened to fp32). */
  simd: string;
  bf16Unit: string;
  /** max |log p_bf16 - log p_fp32| over every scored token. */
  logprobDiff: number;
  /** The same against an fp32 model holding the bf16-rounded weights (the products' own error). */
  logprobDiffRounded: number;
  /** max |logit_bf16 - logit_fp32| of the next token after each prompt, from the KV-cache forward. */
  decodeDiff: number;
  /** max |log p| (the scale of the values compared). */
  logprobScale: number;
}

function maxDiff(a: Float32Array[], b: Float32Array[]): number {
  let d = 0;
  a.forEach((x, i) => x.forEach((v, j) => (d = Math.max(d, Math.abs(v - b[i]![j]!)))));
  return d;
}

function tokens(seed: number, n: number, V: number): number[] {
  let x = seed * 2654435761 + 12345;
  return Array.from({ length: n }, () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 8) % V);
}

/** Compares the fp32 and bf16 models of BF16_TEST_CONFIG (seed 7, std 0.08) on a few sequences. */
export function compareBf16(): Bf16Comparison {
  const kernels = loadNativeKernels();
  if (!kernels) throw new Error("the native kernels are not built");
  const cfg = BF16_TEST_CONFIG;
  const opts = { std: 0.08, kernels };
  const fp32 = createRandomModel(cfg, 7, opts);
  const bf16 = createRandomModel(cfg, 7, { ...opts, dtype: "bf16" });
  const rounded = new EmbeddedEngine(convertWeights(randomWeights(cfg, 7, { std: 0.08, dtype: "bf16" }), "fp32"), { kernels });
  const seqs = [tokens(1, 40, cfg.vocabSize), tokens(2, 23, cfg.vocabSize), tokens(3, 1 + 64, cfg.vocabSize)];
  const a = fp32.logprobsSync(seqs);
  const b = bf16.logprobsSync(seqs);
  const r = rounded.logprobsSync(seqs);
  let scale = 0;
  a.forEach((x) => x.forEach((v) => (scale = Math.max(scale, Math.abs(v)))));
  const decode = (e: EmbeddedEngine) => seqs.map((s) => e.sessionSync(s).nextLogits().slice());
  const info = (kernels.describe().match(/\((\w+)/) ?? [])[1] ?? "?";
  return {
    simd: info,
    bf16Unit: bf16Unit(),
    logprobDiff: maxDiff(b, a),
    logprobDiffRounded: maxDiff(b, r),
    decodeDiff: maxDiff(decode(bf16), decode(fp32)),
    logprobScale: scale,
  };
}

if (process.argv[1]?.endsWith("bf16-compare.ts")) process.stdout.write(JSON.stringify(compareBf16()) + "\n");
