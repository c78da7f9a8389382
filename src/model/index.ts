/**
 * The model's face: configs and families, the parameter layout, checkpoints (with the sink-window
 * settings and LoRA adapters that travel with them), the decoder's forward and backward, AdamW, the
 * tokenizer, chat templates and trimmed vocabularies. Engines, attention tools, rollouts and commands
 * import these from here. Re-exports only.
 */
export { ATTENTION_MODES, type AttentionChoice, type AttentionMode, checkMaskConfig, describeSinkWindow, MaskError, parseSinkWindowRecord, resolveSinkWindow, SINK_PROFILE_FILE, SINK_WINDOW_FILE, SINK_WINDOW_FORMAT, type SinkWindow, sinkWindowOf, sinkWindowRecord } from "./sink-window.js";
export { cachedForward, CachedWorkspace, type KvStorage, layerActivationBytes, type Model, packSequences, trainBackward, trainForward, type TrainForwardOptions, TrainWorkspace, xWT } from "./transformer.js";
export { ATTENTION_INITS, type AttentionInit, buildModel, convertWeights, FULL_ATTENTION, type ModelWeights, randomWeights, weightBytes, weightDtype } from "./instance.js";
export { bindParams, type ModelParams, paramLayout, roundToBf16, WEIGHT_DTYPES, type WeightDtype, type WeightMatrix } from "./params.js";
export { ChatTemplate } from "./chat-template.js";
export { checkpointFamily, familyForConfig, TOOL_CONVENTIONS, TOOL_FORMATS, templateToolFormat, toolConvention, type ToolConvention, type ToolFormat } from "./families/index.js";
export { loadQwen3Tokenizer, qwen3TokenizerDir, Tokenizer } from "./tokenizer.js";
export { tokenCodec, type TokenCodec, TrimmedVocab, type TrimmedVocabJson } from "./vocab.js";
export { CheckpointError, heldData, loadCheckpoint, type LoadedCheckpoint, saveCheckpoint } from "./checkpoint.js";
export { type ModelConfig, ModelConfigError, parameterCount, parseHfConfig, type RopeScaling, toHfConfig } from "./config.js";
export { AdamW, type OptimHparams, OptimizerError, resolveHparams } from "./optimizer.js";
export { createLoraAdapter, isLoraAdapterDir, loadLoraAdapter, LORA_TARGETS, type LoraAdapter, loraBaseDir, type LoraConfig, LoraError, LoraGrads, loraParamCount, type LoraTarget, mergeLora, saveLoraAdapter, validateLoraConfig } from "./lora.js";
export { PackedWeights } from "./packed-weights.js";
export { QuantizedWeights, SAMPLING_WEIGHTS, type SamplingWeights } from "./quantized-weights.js";
export { readSafetensors, readSafetensorsDir, SafetensorsError, type StDtype, writeSafetensors, writeSafetensorsDir } from "./safetensors.js";
export { mergeAdapterCheckpoint } from "./lora-merge.js";
export { formatBytes, MODEL_SHAPES, shapeFromPath, sizeModel, type Sizing, sizingConfig, SizingError, type SizingRequest } from "./sizing.js";
export { STABLE_TOOL_TEMPLATE } from "./stable-template.js";
