/**
 * The torch engine's public API: the engine primitives served by a PyTorch worker (python/). Re-exports only.
 */
export { openTorchEngine, TorchEngine, TorchSession, type TorchEngineOptions, type WorkerAttention, type WorkerLora } from "./engine.js";
export { parseWorkerAddress, TorchWorkerError, WorkerClient, type WorkerAddress, type WorkerInfo } from "./client.js";
export { defaultPython, launchWorker, runningWorkerPids, type LaunchedWorker, type LaunchOptions } from "./launcher.js";
export { encodeFrame, FrameError, FrameReader, PROTOCOL_VERSION, type Frame, type FrameArray, type FrameHeader } from "./frames.js";
