/**
 * The public API of sinkflex: the faces of its modules, re-exported. Each module's index.ts decides what
 * it offers; this file adds nothing of its own.
 */
export * from "./core/index.js";
export * from "./gym/index.js";
export * from "./tools/index.js";
export * from "./envs/index.js";
export { buildTree, diffSnapshots, makeTreeDir, removeTree, Sandbox, snapshotTree, type ExecResult, type SandboxLimits, type SandboxOptions } from "./sandbox/index.js";
export * from "./engine/index.js";
export * from "./attention/index.js";
export * from "./rollout/index.js";
export * from "./rl/index.js";
export * from "./reward/index.js";
export * from "./pipeline/index.js";
export * from "./serve/index.js";
export type { AgentContext, AgentFunction, AgentTask, AgentToolResult, AgentTools } from "./gateway/index.js";
export { ChatTemplate, loadQwen3Tokenizer } from "./model/index.js";
