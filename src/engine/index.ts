/**
 * The engine's public API: the engine primitives (types.ts), the embedded CPU engine, and the model
 * pieces callers need to build one (configs, checkpoints, random models). Re-exports only.
 */
export type { Engine, EngineSession, OptimHparams, SampleParams, SampleResult, SequenceMasks, SessionPins, TokenLoss } from "./types.js";
export {
  createRandomModel, EmbeddedEngine, EmbeddedSession, EngineError, loadEngine,
  type EmbeddedEngineOptions, type EngineSaveOptions,
} from "./embedded.js";
export { KvBlockPool } from "./kv-cache.js";
export { Sampler, SampleParamsError } from "./sampler.js";
export { ModelConfigError, parameterCount, parseHfConfig, toHfConfig, type ModelConfig, type RopeScaling } from "../model/index.js";
export { CheckpointError, loadCheckpoint, saveCheckpoint, type LoadedCheckpoint } from "../model/index.js";
export { readSafetensors, readSafetensorsDir, SafetensorsError, writeSafetensors, writeSafetensorsDir, type StDtype } from "../model/index.js";
export { randomWeights, type ModelWeights } from "../model/index.js";
export { AdamW, OptimizerError } from "../model/index.js";
export {
  createLoraAdapter, isLoraAdapterDir, LORA_TARGETS, loadLoraAdapter, loraParamCount, LoraError,
  saveLoraAdapter, validateLoraConfig, type LoraAdapter, type LoraConfig, type LoraTarget,
} from "../model/index.js";
export { mergeAdapterCheckpoint } from "../model/index.js";
export {
  formatBytes, MODEL_SHAPES, shapeFromPath, sizeModel, SizingError, sizingConfig, type Sizing, type SizingRequest,
} from "../model/index.js";
export type { SinkWindow } from "../kernels/index.js";
export {
  openTorchEngine, TorchEngine, TorchSession, TorchWorkerError, launchWorker, parseWorkerAddress,
  type LaunchOptions, type TorchEngineOptions,
} from "./torch/index.js";
export { resolveSampleParams } from "./sampler.js";
