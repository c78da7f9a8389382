/**
 * TokenBudget: truncates an episode once its observations have used up a budget of tokens.
 *
 * Every observation (the reset one included) is measured by `countTokens`; by default that is the
 * number of characters of its text (chat message contents, a string, or else its JSON). A caller with
 * a tokenizer passes a real token counter. At the step where the running total exceeds `budget`,
 * `truncated` becomes true and `info.tokenBudgetExceeded = { used, budget }`, unless the inner env
 * terminated at that step. `info.tokensUsed` is reported on every step. It does not shorten
 * observations.
 */
import type { Env, ResetArgs, ResetResult, StepResult } from "../env.js";
import { Wrapper } from "./wrapper.js";

export type TokenCounter = (observation: unknown) => number;

/** Characters of an observation's text: message contents for chat observations, else the string or its JSON. */
export function countObservationChars(observation: unknown): number {
  if (typeof observation === "string") return observation.length;
  if (typeof observation === "object" && observation !== null && Array.isArray((observation as { messages?: unknown }).messages)) {
    let n = 0;
    for (const m of (observation as { messages: { content?: unknown }[] }).messages) {
      if (typeof m?.content === "string") n += m.content.length;
    }
    return n;
  }
  return observation === undefined ? 0 : (JSON.stringify(observation) ?? "").length;
}

export class TokenBudget<Obs = unknown, Act = unknown> extends Wrapper<Obs, Act> {
  readonly wrapperName = "TokenBudget";
  /** Tokens used by the current episode's observations so far. */
  used = 0;

  constructor(
    env: Env<Obs, Act>,
    readonly budget: number,
    readonly countTokens: TokenCounter = countObservationChars,
  ) {
    super(env);
    if (!(budget > 0)) throw new RangeError(`TokenBudget: budget must be a positive number, got ${budget}`);
  }

  async reset(args?: ResetArgs): Promise<ResetResult<Obs>> {
    const [obs, info] = await this.env.reset(args);
    this.used = this.countTokens(obs);
    return [obs, info];
  }

  async step(action: Act): Promise<StepResult<Obs>> {
    const [obs, reward, terminated, truncated, info] = await this.env.step(action);
    this.used += this.countTokens(obs);
    const out = { ...info, tokensUsed: this.used };
    if (this.used > this.budget && !terminated && !truncated) {
      return [obs, reward, false, true, { ...out, tokenBudgetExceeded: { used: this.used, budget: this.budget } }];
    }
    return [obs, reward, terminated, truncated, out];
  }
}
