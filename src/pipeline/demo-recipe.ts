/**
 * The demo's recipe, loaded: configs/demo.yaml (or configs/demo-quick.yaml for --quick) with the file's
 * `scale` section applied for the run's minutes and matrix-product precision, in the caller's run folder.
 * The recipe's values and the reasons for them are in the files; this is only their loader, not the
 * demo's run (demo.ts) nor the training pipeline.
 */
import { fileURLToPath } from "node:url";
import { bf16Available, type MatmulPrecision } from "../kernels/index.js";
import { readConfigFile, recipeScale, scaleRecipe, validateConfig, type RecipeScale, type TrainConfig } from "./config.js";

export interface DemoConfigOptions {
  /** The smoke-test recipe (configs/demo-quick.yaml). */
  quick?: boolean;
  runsDir: string;
  /** Default: the file's (0). */
  seed?: number;
  /** Default: the file's ("demo" or "demo-quick"). */
  name?: string;
  /** The demo's time budget, for the file's `scale` (default its baseMinutes, 20). */
  minutes?: number;
  /** Default: bf16 where the CPU has a bf16 unit (AMX or AVX512-BF16), fp32 elsewhere. */
  matmul?: MatmulPrecision;
}

/** The demo's recipe file: configs/demo.yaml, or configs/demo-quick.yaml with `quick`. */
export function demoConfigFile(quick = false): string {
  return fileURLToPath(new URL(`../../configs/${quick ? "demo-quick" : "demo"}.yaml`, import.meta.url));
}

/** The demo's config: its recipe file scaled for the run's minutes and matmul, validated. */
export function demoConfig(options: DemoConfigOptions): TrainConfig {
  return demoRecipe(options).config;
}

/** The demo's config (as demoConfig) with the file's `scale` section, whose shares and minimums a planned run reads. */
export function demoRecipe(options: DemoConfigOptions): { config: TrainConfig; scale?: RecipeScale; path: string } {
  const path = demoConfigFile(options.quick);
  const matmul = options.matmul ?? (bf16Available() ? "bf16" : "fp32");
  const raw = readConfigFile(path);
  const recipe = scaleRecipe(raw, path, { minutes: options.minutes, matmul }) as Record<string, unknown>;
  const config = validateConfig(
    { ...recipe, runsDir: options.runsDir, ...(options.seed !== undefined ? { seed: options.seed } : {}), ...(options.name !== undefined ? { name: options.name } : {}) },
    path,
  );
  const scale = recipeScale(raw, path);
  return { config, ...(scale ? { scale } : {}), path };
}
