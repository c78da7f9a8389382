/**
 * The trajectory record: what a rollout produced, as plain data the trainer can trust.
 *
 * A trajectory is one or more segments of token ids (more than one only when the chat template was not
 * prefix-stable and the rollout split it). In each segment, `lossMask` is 1 exactly on the tokens the
 * policy sampled and `behaviourLogprobs` holds the sampler's log-probs of those tokens (0 elsewhere);
 * both have one entry per token, the layout the trainer's `TrainSequence` reads. Turns, tool calls,
 * observations, timings, rewards, the env's info and the reason the episode ended are recorded beside
 * them. This file holds types and small checks; it runs nothing.
 */
import type { ChatMessage, ToolCall, ToolSpec } from "../core/index.js";
import type { Info } from "../gym/index.js";
import type { DriftReport } from "./renderer.js";

export type EndReason =
  /** The env said the task ended (success or failure). */
  | "terminated"
  /** The env's own limit (a wrapper) cut it off. */
  | "truncated_env"
  /** The rollout's turn limit. */
  | "truncated_turns"
  /** A turn reached the per-turn token limit without ending. */
  | "truncated_turn_tokens"
  /** The context would exceed the total token limit. */
  | "truncated_context"
  /** The env, the engine or the renderer threw; see `error`. */
  | "error";

export interface TrajectorySegment {
  /** Every token: prompt, sampled, template framing, observations. */
  tokens: number[];
  /** 1 where the policy sampled the token, else 0; one per token. */
  lossMask: Uint8Array;
  /** The sampler's log-prob of each sampled token; 0 where lossMask is 0. */
  behaviourLogprobs: Float32Array;
  /** The oldest policy version that sampled tokens in this segment. */
  policyVersion: number;
  /**
   * 1 where the rollout pinned the token in its session (a secondary attention sink; never a sampled
   * token), one per token: the trainer scores the segment with these flags. Absent: nothing pinned.
   */
  pinned?: Uint8Array;
}

export interface TurnRecord {
  /** The segment holding the turn and where its sampled tokens lie: [sampleStart, sampleEnd). */
  segment: number;
  /** Where this turn's new prompt/observation tokens start in the segment. */
  inputStart: number;
  sampleStart: number;
  sampleEnd: number;
  policyVersion: number;
  /** The sampled text, as decoded. */
  text: string;
  content: string;
  toolCalls: ToolCall[];
  /** Calls that could not be read (they still went to the env). */
  malformedCalls: number;
  /** Why each malformed call could not be read (the tool parser's errors); absent when none. */
  parseErrors?: string[];
  /** The env's reply to this turn (tool results, user reply); empty for the last turn. */
  observation: ChatMessage[];
  reward: number;
  finishReason: "stop" | "length";
  /** Milliseconds: waiting for and running the decode; the env's step. */
  sampleMs: number;
  envMs: number;
}

export interface Trajectory {
  /** Task identity: env id, task index and seed of the reset. */
  envId: string;
  taskIndex: number | undefined;
  seed: number | undefined;
  /** Index of this rollout within its group. */
  groupIndex: number;
  tools: ToolSpec[];
  /** The opening messages (system prompt, first user message). */
  prompt: ChatMessage[];
  segments: TrajectorySegment[];
  turns: TurnRecord[];
  /** Sum of the env's step rewards. */
  reward: number;
  rewards: number[];
  /** The env's last info (evidence, tool errors, reward errors). */
  info: Info;
  endReason: EndReason;
  error?: string;
  /** Template drift events; non-empty means the trajectory is not what a full re-render would give. */
  drift: DriftReport[];
  /** The oldest policy version that sampled any of its tokens. */
  policyVersion: number;
  /** Tokens computed by the engine for prefill (new prompt and observation tokens). */
  prefillTokens: number;
  sampledTokens: number;
  wallMs: number;
}

/** Checks the per-token arrays line up and the mask covers exactly the turns' sampled spans. */
export function checkTrajectory(t: Trajectory): void {
  const sampledBySegment = t.segments.map(() => 0);
  for (const turn of t.turns) {
    const seg = t.segments[turn.segment];
    if (!seg) throw new Error(`turn refers to segment ${turn.segment}, but the trajectory has ${t.segments.length}`);
    for (let i = turn.sampleStart; i < turn.sampleEnd; i++) {
      if (seg.lossMask[i] !== 1) throw new Error(`token ${i} of segment ${turn.segment} was sampled but its mask is 0`);
    }
    sampledBySegment[turn.segment]! += turn.sampleEnd - turn.sampleStart;
  }
  t.segments.forEach((seg, s) => {
    const n = seg.tokens.length;
    if (seg.lossMask.length !== n || seg.behaviourLogprobs.length !== n) {
      throw new Error(`segment ${s}: ${n} tokens but ${seg.lossMask.length} mask entries and ${seg.behaviourLogprobs.length} log-probs`);
    }
    let ones = 0;
    for (let i = 0; i < n; i++) {
      ones += seg.lossMask[i]!;
      if (seg.lossMask[i] === 0 && seg.behaviourLogprobs[i] !== 0) throw new Error(`segment ${s}: token ${i} is not sampled but has a log-prob`);
    }
    if (ones !== sampledBySegment[s]) throw new Error(`segment ${s}: the mask has ${ones} ones but the turns sampled ${sampledBySegment[s]} tokens`);
    if (seg.pinned) {
      if (seg.pinned.length !== n) throw new Error(`segment ${s}: ${n} tokens but ${seg.pinned.length} pinned flags`);
      for (let i = 0; i < n; i++) if (seg.pinned[i] && seg.lossMask[i]) throw new Error(`segment ${s}: token ${i} is pinned but was sampled (sampled tokens are never pinned)`);
    }
  });
}

/** A JSON-ready copy (typed arrays as plain arrays). */
export function trajectoryToJSON(t: Trajectory): Record<string, unknown> {
  return {
    ...t,
    segments: t.segments.map((s) => ({ ...s, lossMask: [...s.lossMask], behaviourLogprobs: [...s.behaviourLogprobs], ...(s.pinned ? { pinned: [...s.pinned] } : {}) })),
  };
}
