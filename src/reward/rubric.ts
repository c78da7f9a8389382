/**
 * A weighted rubric: several reward components (the environment's verifiable reward, an LLM judge,
 * format checks) combined into one reward, each component reported separately.
 *
 * A component that fails records an error; the combined reward is then marked as errored rather than
 * silently scored 0, and the trainer decides (by default it drops the rollout from the batch).
 * This file knows no environment: components receive a plain `RewardInput`.
 */
import type { ChatMessage } from "../gym/index.js";

export interface RewardInput {
  /** The env's own reward at the end of the episode. */
  envReward: number;
  /** The env's final `info` (evidence, finish reason, errors). */
  envInfo: Record<string, unknown>;
  messages: ChatMessage[];
  /** The task's description or instruction, when the suite exposes one. */
  task?: string;
}

export interface ComponentScore {
  /** In [0, 1] for rule and judge components. */
  score: number;
  evidence?: unknown;
}

export interface RewardComponent {
  name: string;
  weight: number;
  score(input: RewardInput): Promise<ComponentScore> | ComponentScore;
}

export interface RubricResult {
  reward: number;
  components: Record<string, { weight: number; score?: number; evidence?: unknown; error?: string }>;
  /** Set when any component failed: the reward is not trustworthy. */
  error?: string;
}

/** The env's verifiable reward as a component. */
export function verifiableReward(weight = 1): RewardComponent {
  return {
    name: "verifier",
    weight,
    score: (input) => {
      if (typeof input.envInfo.rewardError === "string") throw new Error(`the verifier failed: ${input.envInfo.rewardError}`);
      return { score: input.envReward, evidence: input.envInfo.evidence };
    },
  };
}

/**
 * A format component: 1 when every assistant turn's tool calls parsed and named a known tool
 * (no `toolErrors` of kind malformed_json / unknown_tool in the episode), else 0.
 */
export function wellFormedToolCalls(weight = 0.1): RewardComponent {
  return {
    name: "format",
    weight,
    score: (input) => {
      const bad = input.messages.filter((m) => m.role === "tool" && m.isError && /not valid JSON|unknown tool/.test(m.content)).length;
      return { score: bad === 0 ? 1 : 0, evidence: { malformedCalls: bad } };
    },
  };
}

/**
 * A progress component: the env's partial progress toward the goal after its last step, `info.progress`
 * in [0, 1] (for example, the share of the gold tool calls made). It gives GRPO groups whose members all
 * fail the verifier a signal of which came closer. An env that reports no progress is an error, not a 0.
 */
export function progressReward(weight: number): RewardComponent {
  return {
    name: "progress",
    weight,
    score: (input) => {
      const progress = input.envInfo.progress;
      if (typeof input.envInfo.progressError === "string") throw new Error(`the env's progress failed: ${input.envInfo.progressError}`);
      if (typeof progress !== "number" || !(progress >= 0 && progress <= 1)) {
        throw new Error(`the env reported no progress in [0, 1] (info.progress is ${JSON.stringify(progress)}); give this suite no progress weight`);
      }
      return { score: progress };
    },
  };
}

export class Rubric {
  constructor(readonly components: RewardComponent[]) {
    if (components.length === 0) throw new Error("Rubric: at least one component is needed");
    const names = new Set<string>();
    for (const c of components) {
      if (!(c.weight >= 0) || !Number.isFinite(c.weight)) throw new Error(`Rubric: component "${c.name}" has weight ${c.weight}; weights must be finite and >= 0`);
      if (names.has(c.name)) throw new Error(`Rubric: two components are named "${c.name}"`);
      names.add(c.name);
    }
    if (components.every((c) => c.weight === 0)) throw new Error("Rubric: all weights are 0");
  }

  async score(input: RewardInput): Promise<RubricResult> {
    const totalWeight = this.components.reduce((a, c) => a + c.weight, 0);
    const components: RubricResult["components"] = {};
    const errors: string[] = [];
    let reward = 0;
    await Promise.all(
      this.components.map(async (c) => {
        try {
          const { score, evidence } = await c.score(input);
          if (!Number.isFinite(score)) throw new Error(`returned a non-finite score (${score})`);
          components[c.name] = { weight: c.weight, score, evidence };
          reward += (c.weight / totalWeight) * score;
        } catch (err) {
          const message = err instanceof Error ? err.message : String(err);
          components[c.name] = { weight: c.weight, error: message };
          errors.push(`${c.name}: ${message}`);
        }
      }),
    );
    return errors.length > 0 ? { reward, components, error: errors.join("; ") } : { reward, components };
  }
}
