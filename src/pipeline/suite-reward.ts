/**
 * The reward GRPO learns from on each suite: the suite's rubric (`suites[].reward` in the config) over
 * a finished trajectory. With the default rubric (the verifier alone, weight 1) the reward is the env's
 * own. Success is always the verifier's: a shaped reward changes what the update reinforces, never what
 * the metrics and the evaluation count as solved.
 */
import type { ChatMessage } from "../gym/index.js";
import { LlmJudge } from "../reward/index.js";
import { progressReward, Rubric, verifiableReward, wellFormedToolCalls, type RewardComponent, type RubricResult } from "../reward/index.js";
import type { Trajectory } from "../rollout/index.js";
import type { TrainConfig } from "./config.js";
import { SUCCESS_THRESHOLD } from "./evaluate.js";

export type RewardWeights = NonNullable<TrainConfig["suites"][number]["reward"]>;

export interface ScoredTrajectory {
  /** What the update learns from. */
  reward: number;
  /** The verifier's verdict. */
  success: boolean;
  /** Each component's score, when the rubric has more than the verifier. */
  components?: RubricResult["components"];
  /** Set when a component failed: the trajectory is left out of the update. */
  error?: string;
}

/**
 * The rubric of a suite's reward weights (components of weight 0 are left out). Make it once per run:
 * a judge keeps its cache, concurrency and rate limits across steps.
 */
export function suiteRubric(weights: RewardWeights | undefined): Rubric | undefined {
  if (!weights || (weights.verifier === 1 && weights.progress === 0 && weights.format === 0 && !weights.judge)) return undefined;
  const components: RewardComponent[] = [];
  if (weights.verifier > 0) components.push(verifiableReward(weights.verifier));
  if (weights.progress > 0) components.push(progressReward(weights.progress));
  if (weights.format > 0) components.push(wellFormedToolCalls(weights.format));
  if (weights.judge) {
    const { apiKeyEnv, ...judge } = weights.judge;
    const apiKey = apiKeyEnv === undefined ? undefined : process.env[apiKeyEnv];
    if (apiKeyEnv !== undefined && !apiKey) throw new Error(`the judge's API key variable ${apiKeyEnv} is not set; export it, or remove reward.judge.apiKeyEnv for an endpoint without a key`);
    components.push(new LlmJudge({ ...judge, name: "judge", ...(apiKey ? { apiKey } : {}) }));
  }
  return new Rubric(components);
}

/** The conversation of a trajectory: its opening messages, then each turn and the env's reply. */
export function trajectoryMessages(t: Trajectory): ChatMessage[] {
  const messages = [...t.prompt];
  for (const turn of t.turns) {
    messages.push({ role: "assistant", content: turn.content, ...(turn.toolCalls.length ? { toolCalls: turn.toolCalls } : {}) });
    messages.push(...turn.observation);
  }
  return messages;
}

export async function scoreTrajectory(rubric: Rubric | undefined, t: Trajectory): Promise<ScoredTrajectory> {
  const success = t.reward >= SUCCESS_THRESHOLD;
  if (!rubric) return { reward: t.reward, success };
  const result = await rubric.score({ envReward: t.reward, envInfo: t.info, messages: trajectoryMessages(t) });
  return { reward: result.reward, success, components: result.components, ...(result.error ? { error: result.error } : {}) };
}
