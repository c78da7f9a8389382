/**
 * What `sinkflex serve` and `sinkflex gateway` share before they listen: the exposure check (a key or
 * `--insecure` beyond loopback), a checkpoint folder loaded into the embedded engine with its tokenizer,
 * chat template (with the checkpoint family's tool format where the template's text declares none) and
 * trimmed vocabulary, the context limit checked against the model's positions, and
 * the option parsers (integers, `--dtype`, `--tool-format`). Each failure is a usage error that says what to pass instead.
 *
 * This file loads; it serves nothing (src/serve, src/gateway do).
 */
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { loadEngine, type EmbeddedEngine } from "../../engine/index.js";
import { ChatTemplate, checkpointFamily, SAMPLING_WEIGHTS, type SamplingWeights, TOOL_FORMATS, type ToolFormat, WEIGHT_DTYPES, type WeightDtype } from "../../model/index.js";
import { Tokenizer } from "../../model/index.js";
import { tokenCodec, TrimmedVocab, type TokenCodec } from "../../model/index.js";
import { checkExposure } from "../../serve/index.js";
import { UsageError } from "../usage-error.js";

/** `checkExposure` as a usage error: the warning to print, or undefined. */
export function exposure(host: string, apiKey: string | undefined, insecure: boolean | undefined): string | undefined {
  try {
    return checkExposure(host, apiKey, insecure);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

export interface ServedCheckpoint {
  dir: string;
  engine: EmbeddedEngine;
  codec: TokenCodec;
  template: ChatTemplate;
  /** The context limit: the one asked for, or the model's positions. */
  maxContextTokens: number;
}

/**
 * Loads `checkpoint` for serving, its weights held as `dtype` (default fp32; bf16 halves their memory),
 * sampling from `samplingWeights` (default "same": the weights; "int8": int8 copies of them); the engine is
 * disposed again if anything after loading the weights fails (a check, the tokenizer, the vocabulary, the
 * chat template).
 */
export function loadServedCheckpoint(checkpoint: string, maxContext?: number, dtype?: WeightDtype, samplingWeights?: SamplingWeights): ServedCheckpoint {
  const dir = resolve(checkpoint);
  if (!existsSync(dir)) throw new UsageError(`no checkpoint folder at ${dir}; pass a folder with config.json, safetensors and tokenizer files`);
  if (!existsSync(resolve(dir, "tokenizer.json"))) {
    throw new UsageError(`${dir} has no tokenizer.json; copy the model's tokenizer.json and tokenizer_config.json into the checkpoint folder`);
  }
  const engine = loadEngine(dir, { dtype, samplingWeights });
  try {
    const positions = engine.config.maxPositionEmbeddings;
    const maxContextTokens = maxContext ?? positions;
    if (maxContextTokens > positions) {
      throw new UsageError(
        `--max-context ${maxContextTokens} is more than the model's ${positions} positions (max_position_embeddings in ${dir}/config.json); pass --max-context ${positions} or less, or leave it out`,
      );
    }
    const tokenizer = Tokenizer.fromDir(dir);
    const vocab = TrimmedVocab.load(dir);
    const codec = tokenCodec(tokenizer, vocab);
    if (codec.size > engine.config.vocabSize) {
      throw new UsageError(
        `the model has ${engine.config.vocabSize} embedding rows but the tokenizer${vocab ? " (trimmed)" : ""} has ${codec.size} ids; the checkpoint's tokenizer files do not belong to its weights`,
      );
    }
    engine.usableTokens = codec.size; // embedding rows past the tokenizer's ids are padding: never sampled
    // The family's tool format where the template's text declares none (Phi-3), as the pipeline's policy.
    const template = ChatTemplate.fromTokenizer(tokenizer, "auto", checkpointFamily(dir)?.toolFormat);
    return { dir, engine, codec, template, maxContextTokens };
  } catch (err) {
    engine.dispose(); // whatever failed after the weights loaded: no engine is left behind
    throw err;
  }
}

/** The commander parser of `--dtype`: fp32 or bf16. */
export function parseDtype(v: string): WeightDtype {
  if (!(WEIGHT_DTYPES as readonly string[]).includes(v)) throw new UsageError(`--dtype must be ${WEIGHT_DTYPES.join(" or ")}, got "${v}"`);
  return v as WeightDtype;
}

/** The commander parser of `--sampling-weights`: same or int8. */
export function parseSamplingWeights(v: string): SamplingWeights {
  if (!(SAMPLING_WEIGHTS as readonly string[]).includes(v)) throw new UsageError(`--sampling-weights must be ${SAMPLING_WEIGHTS.join(" or ")}, got "${v}"`);
  return v as SamplingWeights;
}

/** The help of `--sampling-weights`. */
export const SAMPLING_WEIGHTS_HELP =
  "what completions sample from: same (the weights) or int8 (copies quantized in blocks of 32: about half the bytes of bf16 read per token; sampled log-probs then differ slightly from the echoed, teacher-forced ones, which read the weights)";

/** The commander parser of `--tool-format`: one of the tool-call formats the families use. */
export function parseToolFormat(v: string): ToolFormat {
  if (!(TOOL_FORMATS as readonly string[]).includes(v)) {
    throw new UsageError(`--tool-format must be one of ${TOOL_FORMATS.join(", ")}, got "${v}"; leave it out to read the format the checkpoint's chat template (or family) declares`);
  }
  return v as ToolFormat;
}

/** The help of `--tool-format`. */
export const TOOL_FORMAT_HELP =
  `the tool-call format sampled turns are read in: ${TOOL_FORMATS.join(", ")} (hermes: Qwen's tool_call blocks, llama3-json: Llama 3.1's JSON calls, phi3-hermes: Hermes blocks in Phi-3's turns; default: the checkpoint's chat template's, else its family's)`;

/** The help of `--dtype`. */
export const DTYPE_HELP = "how the weights are held in memory: fp32, or bf16 (the weight matrices as bf16: half the memory, products accumulate in fp32)";

/** A commander parser for an integer option of at least `min`. */
export function intAtLeast(name: string, min: number) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new UsageError(`${name} must be an integer of at least ${min}, got "${v}"`);
    return n;
  };
}
