/**
 * The pipeline's face: the run's config schema and recipe files, `train` and its stages, evaluation, the
 * demo, policies (create, load, save) and run folders. Commands and the dashboard import these from here.
 * Re-exports only.
 */
export { DEMO_NAIVE_STEPS, formatDemoTable, runDemo } from "./demo.js";
export { readJson, RunDir, type RunStatus, writeJsonAtomic } from "./run-dir.js";
export { readChatJsonl } from "./sft-data.js";
export { ConfigError, drillLossSteps, drillMaxExamples, type EngineConfig, loadConfigFile, readConfigFile, recipeScale, type RecipeScale, referenceGrpo, type SamplerConfig, SCALABLE_COUNTS, scaledCount, scaleRecipe, ScaleSchema, type TrainConfig, TrainConfigSchema, validateConfig } from "./config.js";
export { evalOptionsOf, evaluate, type SuiteEval } from "./evaluate.js";
export { createPolicy, loadPolicy, type Policy, savePolicy } from "./policy.js";
export { planSuites } from "./tasks.js";
export { attentionOf, policyEvalOptions, RunFolderError, runStage, type StageName, STAGES, train, type TrainOptions, type TrainResult } from "./train.js";
export { importModules, ModuleLoadError } from "./user-modules.js";
