/**
 * The reward module's face: the weighted rubric and its components (verifier, progress, format), and
 * the LLM judge. Re-exports only.
 */
export { type ComponentScore, progressReward, type RewardComponent, type RewardInput, Rubric, type RubricResult, verifiableReward, wellFormedToolCalls } from "./rubric.js";
export { JudgeError, type JudgeOptions, LlmJudge, parseJudgeAnswer, renderTranscript } from "./judge.js";
