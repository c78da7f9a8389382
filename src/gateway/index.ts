/**
 * The public API of `gateway/`: the recording gateway that serves an OpenAI-compatible API per agent
 * session over any engine and assembles each session's calls into a token-exact trajectory, and the
 * per-session environment whose tools an agent calls over HTTP. Re-exports only.
 */
export { GatewayServer, type GatewayOptions, type GatewaySessionView, type OpenSessionOptions, type Refusal } from "./server.js";
export { SessionRecorder, type CallRecord, type CallRequest, type ChoiceRecord, type RecorderDeps, type SplitReport } from "./recorder.js";
export { exitReason, stderrSummary, thrownReason } from "./agent-failure.js";
export { EnvTools, ToolCallRefused, type ToolResult } from "./env-tools.js";
export {
  agentEnvironment, agentTools, wireMessages, type AgentContext, type AgentFunction, type AgentTask, type AgentToolResult, type AgentTools, type WireMessage,
} from "./agent-context.js";
