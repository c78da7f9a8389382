/**
 * OrderEnforcing: refuses calls out of order, with an `EnvContractError` that says what to do.
 *
 * `step` before the first `reset`, `step` after the episode ended (terminated or truncated, by the
 * env or by any wrapper inside this one) and `reset`/`step` after `close` are errors. `render` before
 * `reset` is an error only when `disableRenderOrderEnforcing` is false. `close` is always allowed and
 * safe to repeat. It does not limit episode length; TimeLimit does.
 */
import { EnvContractError, type Env, type ResetArgs, type ResetResult, type StepResult } from "../env.js";
import { Wrapper } from "./wrapper.js";

export class OrderEnforcing<Obs = unknown, Act = unknown> extends Wrapper<Obs, Act> {
  readonly wrapperName = "OrderEnforcing";
  private phase: "new" | "running" | "ended" | "closed" = "new";

  constructor(
    env: Env<Obs, Act>,
    readonly disableRenderOrderEnforcing = true,
  ) {
    super(env);
  }

  /** True once `reset` has been called at least once. */
  get hasReset(): boolean {
    return this.phase === "running" || this.phase === "ended";
  }

  async reset(args?: ResetArgs): Promise<ResetResult<Obs>> {
    if (this.phase === "closed") throw new EnvContractError(`${this}: reset after close; make a new env`);
    const result = await this.env.reset(args);
    this.phase = "running";
    return result;
  }

  async step(action: Act): Promise<StepResult<Obs>> {
    if (this.phase === "new") throw new EnvContractError(`${this}: step before reset; call reset() first`);
    if (this.phase === "ended") {
      throw new EnvContractError(`${this}: step after the episode ended (terminated or truncated); call reset() to start a new one`);
    }
    if (this.phase === "closed") throw new EnvContractError(`${this}: step after close; make a new env`);
    const result = await this.env.step(action);
    if (result[2] || result[3]) this.phase = "ended";
    return result;
  }

  render(): string {
    if (!this.disableRenderOrderEnforcing && this.phase === "new") {
      throw new EnvContractError(`${this}: render before reset; call reset() first`);
    }
    return this.env.render();
  }

  async close(): Promise<void> {
    if (this.phase === "closed") return;
    this.phase = "closed";
    await this.env.close();
  }
}
