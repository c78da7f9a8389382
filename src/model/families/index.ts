/**
 * The model family registry: every checkpoint family sinkflex loads (Qwen2/Qwen2.5, Qwen3, Llama 3.x,
 * Phi-3/3.5), found by config.json's `model_type` or `architectures`, or by the engine's `arch`. Any
 * backend that reads Hugging Face checkpoints looks families up here, so that the accepted model types,
 * weight-name mappings and chat formats are declared once.
 *
 * This file is a lookup (and reads a checkpoint's config.json for its family); each family's declaration is in its own file, the contract in types.ts.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ModelConfigError, type ModelArch } from "../config-types.js";
import { llamaFamily } from "./llama.js";
import { phi3Family } from "./phi3.js";
import { qwen2Family } from "./qwen2.js";
import { qwen3Family } from "./qwen3.js";
import type { ModelFamily } from "./types.js";

export type { ChatFormat, FamilyConfigPart, ModelFamily, StoredTensor } from "./types.js";
export { TOOL_CONVENTIONS, TOOL_FORMATS, templateToolFormat, toolConvention, type ToolConvention, type ToolFormat } from "./tool-formats.js";
export { llamaFamily, phi3Family, qwen2Family, qwen3Family };

/** Every family, in the order config.json is matched against them. */
export const MODEL_FAMILIES: readonly ModelFamily[] = [qwen2Family, qwen3Family, llamaFamily, phi3Family];

/** The family of an engine config's `arch`. */
export function familyOf(arch: ModelArch): ModelFamily {
  const f = MODEL_FAMILIES.find((x) => x.arch === arch);
  if (!f) throw new ModelConfigError(`unknown model arch ${JSON.stringify(arch)}; known: ${MODEL_FAMILIES.map((x) => x.arch).join(", ")}`);
  return f;
}

/**
 * The family a config.json belongs to: by `model_type` when present, else by `architectures`. An unknown
 * model_type is an error naming it, the file and the supported ones (even if `architectures` names a
 * known class: a model_type says more about the weights than a class name does).
 */
export function familyForConfig(raw: Record<string, unknown>, src = "config.json"): ModelFamily {
  const modelType = raw.model_type;
  const archs = Array.isArray(raw.architectures) ? (raw.architectures as unknown[]) : [];
  const supported = MODEL_FAMILIES.map((f) => `"${f.modelTypes.join('"/"')}" (${f.architectures.join(", ")}: ${f.label})`).join(", ");
  if (modelType !== undefined && modelType !== null) {
    const f = MODEL_FAMILIES.find((x) => x.modelTypes.includes(modelType as string));
    if (f) return f;
  } else {
    const f = MODEL_FAMILIES.find((x) => archs.some((a) => x.architectures.includes(a as string)));
    if (f) return f;
  }
  throw new ModelConfigError(
    `${src}: unsupported model_type ${JSON.stringify(modelType)} / architectures ${JSON.stringify(archs)}; sinkflex supports ${supported}`,
  );
}

/**
 * The family of a checkpoint folder, from its config.json; undefined when the folder has none (a
 * tokenizer folder). A config.json of no known family is an error (familyForConfig).
 */
export function checkpointFamily(dir: string): ModelFamily | undefined {
  const path = join(dir, "config.json");
  if (!existsSync(path)) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new ModelConfigError(`${path} is not valid JSON: ${(err as Error).message}`);
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) throw new ModelConfigError(`${path} must hold a JSON object`);
  return familyForConfig(raw as Record<string, unknown>, path);
}
