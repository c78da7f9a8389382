/**
 * The public API of `rollout/`: the agent loop, its scheduler, the incremental renderer, tool-call
 * parsers, trajectory records, the batch decoder, the OpenAI-compatible policy client and the pool of
 * policy servers kept in step with the trainer's weights.
 * Re-exports only.
 */
export { Rollout, type GroupTask, type PinRule, type RolloutOptions, type RolloutStats } from "./agent-loop.js";
export { RolloutScheduler, type RolloutBatch, type SchedulerOptions } from "./scheduler.js";
export { IncrementalRenderer, assistantCloseTail, type DriftReport, type ExtendResult, type RendererOptions } from "./renderer.js";
export { qwenToolParser, llama3ToolParser, phi3ToolParser, plainTextParser, TOOL_FORMAT_PARSERS, toolParser, toolParserFor, toolParserForFormat, toolParserForTemplate, type ParsedTurn, type ToolCallParser } from "./tool-parser.js";
export { checkTrajectory, trajectoryToJSON, type EndReason, type Trajectory, type TrajectorySegment, type TurnRecord } from "./trajectory.js";
export { BatchDecoder, type DecoderStats, type Sampler as PolicySampler, type VersionedSample } from "./batch-decoder.js";
export { OpenAIPolicy, OpenAIPolicyError, type OpenAIPolicyOptions } from "./openai-policy.js";
export { ReplicaPool, ReplicaPoolError, type ReplicaPoolOptions, type SyncReport, type WeightSyncKind } from "./remote-sampler.js";
