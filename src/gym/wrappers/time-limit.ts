/**
 * TimeLimit: truncates an episode after `maxEpisodeSteps` steps.
 *
 * At the step that reaches the limit, `truncated` becomes true and `info.timeLimitReached` is set,
 * unless the inner env terminated at that same step (then the task ended on its own and nothing is
 * cut off: `terminated` and `truncated` stay apart). It does not refuse steps after the end; that is
 * OrderEnforcing's job.
 */
import { type Env, type ResetArgs, type ResetResult, type StepResult } from "../env.js";
import { Wrapper } from "./wrapper.js";

export class TimeLimit<Obs = unknown, Act = unknown> extends Wrapper<Obs, Act> {
  readonly wrapperName = "TimeLimit";
  /** Steps taken in the current episode. */
  elapsedSteps = 0;

  constructor(
    env: Env<Obs, Act>,
    readonly maxEpisodeSteps: number,
  ) {
    super(env);
    if (!(maxEpisodeSteps > 0)) {
      throw new RangeError(`TimeLimit: maxEpisodeSteps must be a positive number (Infinity for no limit), got ${maxEpisodeSteps}`);
    }
  }

  async reset(args?: ResetArgs): Promise<ResetResult<Obs>> {
    const result = await this.env.reset(args);
    this.elapsedSteps = 0;
    return result;
  }

  async step(action: Act): Promise<StepResult<Obs>> {
    const [obs, reward, terminated, truncated, info] = await this.env.step(action);
    this.elapsedSteps++;
    if (this.elapsedSteps >= this.maxEpisodeSteps && !terminated && !truncated) {
      return [obs, reward, false, true, { ...info, timeLimitReached: true }];
    }
    return [obs, reward, terminated, truncated, info];
  }
}
