/**
 * The check test/engine/batch-independence.test.ts runs in a child process (SINKFLEX_SIMD is read once per
 * process by the native kernels): one random model (head size 12, so no SIMD level's whole-vector path
 * fits it), held in fp32, in bf16, and in bf16 sampling from int8 copies; a session samples 12 tokens alone,
 * then beside 1 to 4 others. Prints one JSON line: the SIMD level, and for each of the three and number of
 * others whether the tokens and
 * log-probs were bit-identical. Not a test by itself.
 */
import { createRandomModel } from "../../src/engine/embedded.js";
import { loadNativeKernels } from "../../src/kernels/index.js";
import { BF16_TEST_CONFIG } from "../model/bf16-compare.js";
import { randomTokens } from "./helpers.js";

export interface BatchIndependence {
  simd: string;
  /** "fp32 +2": the session's samples beside 2 others equal its samples alone ("fp32", "bf16", "int8"). */
  same: Record<string, boolean>;
}

export function checkBatchIndependence(): BatchIndependence {
  const kernels = loadNativeKernels();
  if (!kernels) throw new Error("the native kernels are not built");
  const V = BF16_TEST_CONFIG.vocabSize;
  const params = { maxTokens: 12, temperature: 1, seed: 5 };
  const same: Record<string, boolean> = {};
  for (const variant of ["fp32", "bf16", "int8"] as const) {
    const dtype = variant === "fp32" ? "fp32" : "bf16";
    const e = createRandomModel(BF16_TEST_CONFIG, 7, { kernels, std: 0.08, dtype, samplingWeights: variant === "int8" ? "int8" : "same" });
    const alone = e.sampleBatchSync([e.sessionSync(randomTokens(1, 30, V))], [params])[0]!;
    for (let n = 1; n <= 4; n++) {
      const others = [45, 7, 60, 20].slice(0, n).map((len, i) => e.sessionSync(randomTokens(2 + i, len, V)));
      const together = e.sampleBatchSync([e.sessionSync(randomTokens(1, 30, V)), ...others], [params, ...others.map((_, i) => ({ ...params, seed: 10 + i }))])[0]!;
      same[`${variant} +${n}`] = together.tokens.length === alone.tokens.length && together.tokens.every((t, i) => t === alone.tokens[i])
        && together.logprobs.every((l, i) => l === alone.logprobs[i]);
    }
    e.dispose();
  }
  return { simd: (kernels.describe().match(/\((\w+)/) ?? [])[1] ?? "?", same };
}

if (process.argv[1]?.endsWith("batch-independence.ts")) process.stdout.write(JSON.stringify(checkBatchIndependence()) + "\n");
