/**
 * A small deterministic env for the env pool's tests, registered as `test/slow-v0` when this module is
 * imported (the tests import it, and `sinkflex --import test/gym/remote/slow-env.ts envs serve` loads
 * it into real server processes). Each step waits `stepMs`; the observation is a digest of the seed and
 * every action so far, so a replay that differs anywhere shows. The episode ends after `episodeSteps`.
 * It is not a bundled env; the env-pool benchmark registers the same env as `bench/latency-v0`.
 */
import { createHash } from "node:crypto";
import { EnvContractError, type Env, type EnvMetadata, type ResetArgs, type ResetResult, type StepResult } from "../../../src/gym/env.js";
import { register, registeredIds } from "../../../src/gym/registry.js";
import { DiscreteSpace, TextSpace } from "../../../src/gym/spaces.js";

export const SLOW_ENV_ID = "test/slow-v0";

export class SlowEnv implements Env<string, number> {
  readonly observationSpace = new TextSpace(256);
  readonly actionSpace = new DiscreteSpace(1000);
  readonly metadata: EnvMetadata = { description: "a deterministic env with a set step latency" };
  private state = "";
  private steps = -1;

  constructor(
    readonly stepMs = 0,
    readonly episodeSteps = 10,
  ) {}

  async reset(args: ResetArgs = {}): Promise<ResetResult<string>> {
    this.state = digest(`seed ${args.seed ?? 0} task ${args.options?.taskIndex ?? 0}`);
    this.steps = 0;
    return [`start ${this.state}`, { seed: args.seed ?? 0 }];
  }

  async step(action: number): Promise<StepResult<string>> {
    if (this.steps < 0) throw new EnvContractError("SlowEnv: step before reset");
    if (this.steps >= this.episodeSteps) throw new EnvContractError("SlowEnv: step after the episode ended");
    if (this.stepMs > 0) await new Promise((r) => setTimeout(r, this.stepMs));
    this.state = digest(`${this.state} ${action}`);
    this.steps++;
    const done = this.steps >= this.episodeSteps;
    return [`step ${this.steps} ${this.state}`, parseInt(this.state.slice(0, 2), 16) / 255, done, false, { steps: this.steps }];
  }

  render(): string {
    return this.state;
  }

  async close(): Promise<void> {}

  toString(): string {
    return "SlowEnv";
  }
}

function digest(text: string): string {
  return createHash("sha256").update(text).digest("hex").slice(0, 16);
}

/** Registers SlowEnv under `id` (once), with the options a remote client may set. */
export function registerSlowEnv(id: string, description: string): void {
  if (registeredIds().includes(id)) return;
  register(id, (o) => new SlowEnv(Number(o.stepMs ?? 0), Number(o.episodeSteps ?? 10)), {
    suite: "test",
    description,
    maxEpisodeSteps: 1000,
    clientOptions: {
      session: { stepMs: { type: "integer", min: 0, max: 60_000 }, episodeSteps: { type: "integer", min: 1, max: 1000 } },
      reset: { taskIndex: { type: "integer", min: 0, max: 1000 } },
    },
  });
}

registerSlowEnv(SLOW_ENV_ID, "a deterministic env with a set step latency (the env pool's tests)");
