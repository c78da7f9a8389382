/**
 * The public API of `gateway/`: the recording gateway that serves an OpenAI-compatible API per agent
 * session over any engine and assembles each session's calls into a token-exact trajectory.
 * Re-exports only.
 */
export { GatewayServer, type GatewayOptions } from "./server.js";
export { SessionRecorder, type CallRecord, type CallRequest, type ChoiceRecord, type RecorderDeps, type SplitReport } from "./recorder.js";
