/**
 * The base `Wrapper`: an Env that holds an inner env (`env`) and forwards everything to it.
 *
 * A concrete wrapper overrides only what it changes (usually `reset` and `step`). Every wrapper
 * prints as `Name<inner>` so that a whole stack reads like a type, e.g.
 * `RecordEpisodeStatistics<OrderEnforcing<TimeLimit<ArithEnv<sinkflex/arith-v0>>>>`. `unwrap`
 * (src/gym/env.ts) follows the public `env` property down to the base env. This file holds no
 * particular wrapper.
 */
import type { Env, EnvMetadata, ResetArgs, ResetResult, StepResult } from "../env.js";
import type { Space } from "../spaces.js";

export abstract class Wrapper<Obs = unknown, Act = unknown> implements Env<Obs, Act> {
  /** The name printed in the stack, e.g. "TimeLimit". */
  abstract readonly wrapperName: string;

  constructor(readonly env: Env<Obs, Act>) {}

  get observationSpace(): Space<Obs> {
    return this.env.observationSpace;
  }

  get actionSpace(): Space<Act> {
    return this.env.actionSpace;
  }

  /** The inner env's metadata object itself (not a copy): setting `id` on it names the whole stack. */
  get metadata(): EnvMetadata {
    return this.env.metadata;
  }

  reset(args?: ResetArgs): Promise<ResetResult<Obs>> {
    return this.env.reset(args);
  }

  step(action: Act): Promise<StepResult<Obs>> {
    return this.env.step(action);
  }

  render(): string {
    return this.env.render();
  }

  close(): Promise<void> {
    return this.env.close();
  }

  toString(): string {
    return `${this.wrapperName}<${this.env.toString()}>`;
  }
}
