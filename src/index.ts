/**
 * The public API of sinkflex: each module adds one re-export line here.
 */
export * from "./tools/index.js";
export * from "./engine/index.js";
export * from "./rollout/index.js";
export * from "./serve/index.js";
export * from "./gym/index.js";
export { registerBundledEnvs } from "./envs/index.js";
export * from "./envs/suite.js";
export * from "./rl/advantages.js";
export * from "./rl/policy-loss.js";
export * from "./rl/grpo.js";
export * from "./rl/sft.js";
export * from "./pipeline/config.js";
export * from "./reward/rubric.js";
export * from "./reward/judge.js";
export { train, type TrainOptions, type TrainResult } from "./pipeline/train.js";
export { evaluate, type SuiteEval } from "./pipeline/evaluate.js";
export { runDemo, formatDemoTable } from "./pipeline/demo.js";
export { createPolicy, loadPolicy, savePolicy, type Policy } from "./pipeline/policy.js";
export * from "./attention/index.js";
export type { AgentContext, AgentFunction, AgentTask, AgentToolResult, AgentTools } from "./gateway/index.js";
export { buildTree, diffSnapshots, makeTreeDir, removeTree, Sandbox, snapshotTree, type ExecResult, type SandboxLimits, type SandboxOptions } from "./sandbox/index.js";
export { ChatTemplate } from "./model/chat-template.js";
export { loadQwen3Tokenizer } from "./model/tokenizer.js";
