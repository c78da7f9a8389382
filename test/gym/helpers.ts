/**
 * Small, real envs for the gym's own tests: `WalkEnv`, a seeded random walk on a line with a
 * discrete action space, and a few deliberately broken variants for checkEnv's negative tests.
 * They are not bundled envs and are never registered outside a test.
 */
import { EnvContractError, type Env, type EnvMetadata, type ResetArgs, type ResetResult, type StepResult } from "../../src/gym/env.js";
import { Rng } from "../../src/core/index.js";
import { DiscreteSpace, TextSpace } from "../../src/gym/spaces.js";

/**
 * A walk on positions 0..size-1. The seed picks the start and the goal; actions are 0 = left,
 * 1 = stay, 2 = right. Reaching the goal terminates with reward 1; each other step costs 0.01.
 * The observation is the text "pos=P goal=G".
 */
export class WalkEnv implements Env<string, number> {
  readonly observationSpace = new TextSpace(64);
  readonly actionSpace = new DiscreteSpace(3);
  readonly metadata: EnvMetadata = { description: "a seeded walk on a line" };
  protected pos = 0;
  protected goal = 0;
  protected started = false;
  protected done = false;
  closeCount = 0;

  constructor(readonly size = 7) {}

  async reset(args: ResetArgs = {}): Promise<ResetResult<string>> {
    const rng = new Rng(args.seed ?? Math.floor(Math.random() * 2 ** 31));
    this.pos = rng.int(this.size);
    if (typeof args.options?.start === "number") this.pos = args.options.start;
    do this.goal = rng.int(this.size);
    while (this.goal === this.pos);
    this.started = true;
    this.done = false;
    return [this.obs(), { seed: args.seed }];
  }

  async step(action: number): Promise<StepResult<string>> {
    if (!this.started) throw new EnvContractError("WalkEnv: step before reset");
    if (this.done) throw new EnvContractError("WalkEnv: step after the episode ended");
    this.pos = Math.max(0, Math.min(this.size - 1, this.pos + action - 1));
    this.done = this.pos === this.goal;
    return [this.obs(), this.done ? 1 : -0.01, this.done, false, {}];
  }

  protected obs(): string {
    return `pos=${this.pos} goal=${this.goal}`;
  }

  render(): string {
    return this.obs();
  }

  async close(): Promise<void> {
    this.closeCount++;
  }

  toString(): string {
    return this.metadata.id ? `WalkEnv<${this.metadata.id}>` : "WalkEnv";
  }
}

/** Ignores the seed: resets land in a different place each time. */
export class UnseededWalkEnv extends WalkEnv {
  async reset(args: ResetArgs = {}): Promise<ResetResult<string>> {
    return super.reset({ ...args, seed: undefined });
  }
}

/** Lets the agent keep stepping after the goal (no error). */
export class EndlessWalkEnv extends WalkEnv {
  async step(action: number): Promise<StepResult<string>> {
    this.done = false;
    return super.step(action);
  }
}

/** Returns an observation outside its declared text space (too long) from step. */
export class OutOfSpaceWalkEnv extends WalkEnv {
  async step(action: number): Promise<StepResult<string>> {
    const [obs, ...rest] = await super.step(action);
    return [obs + "!".repeat(100), ...rest];
  }
}

/** Rewards drift with a hidden counter: same seed and actions, different rewards. */
export class DriftingRewardWalkEnv extends WalkEnv {
  private calls = 0;
  async step(action: number): Promise<StepResult<string>> {
    const [obs, reward, ...rest] = await super.step(action);
    return [obs, reward + ++this.calls * 1e-3, ...rest];
  }
}

/** Throws on the second close. */
export class FragileCloseWalkEnv extends WalkEnv {
  async close(): Promise<void> {
    await super.close();
    if (this.closeCount > 1) throw new Error("FragileCloseWalkEnv: already closed");
  }
}
