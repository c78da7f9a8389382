/**
 * `checkEnv(env, options)`: the contract test every env must pass.
 *
 * It checks, and reports one by one with the reason for any failure:
 *  - the observation and action spaces are declared (contains / sample / toJSON) and samples lie in them;
 *  - a reset with a seed is repeatable (same seed => same first observation);
 *  - the same seed and the same actions give the same trajectory (observations, rewards, flags);
 *  - every observation lies in the observation space;
 *  - step results are well formed (finite reward, boolean flags, an info object) and never throw;
 *  - stepping after the end of an episode is an error;
 *  - render returns text;
 *  - close is safe to call twice (checkEnv closes the env when it is done).
 *
 * Actions come from the action space (sampled with a seeded Rng) or from the caller's `actions`
 * generator, which must be deterministic in its arguments: tool envs whose episodes end only on a
 * specific action pass a generator that sends that action. Episodes are bounded by `maxSteps`. This
 * file does not make envs; the caller passes one (usually from `make`, whose TimeLimit ends every
 * episode).
 */
import { isDeepStrictEqual } from "node:util";
import { Rng, type AgentTurn } from "../core/index.js";
import type { Env, Info } from "./env.js";

export interface ActionContext<Obs> {
  /** The latest observation (from reset or the previous step). */
  obs: Obs;
  /** Steps taken so far in this episode (0 for the first action). */
  step: number;
  /** Which checked episode this is (0-based). */
  episode: number;
  /** A generator seeded per episode: the same in both runs of a trajectory. */
  rng: Rng;
  /** The info returned with `obs`. */
  info: Info;
}

export type ActionSource<Obs, Act> = (ctx: ActionContext<Obs>) => Act | Promise<Act>;

export interface CheckEnvOptions<Obs = any, Act = any> {
  /** Seed of the first checked episode; episode i uses seed + i. Default 0. */
  seed?: number;
  /** Number of episodes, each played twice. Default 2. */
  episodes?: number;
  /** Most steps per episode. Default 20. */
  maxSteps?: number;
  /** Where actions come from; default: sampled from the action space with a seeded Rng. */
  actions?: ActionSource<Obs, Act>;
  /** Options passed to every reset. */
  resetOptions?: Record<string, unknown>;
}

export type CheckStatus = "passed" | "failed" | "skipped";

export interface CheckResult {
  name: string;
  status: CheckStatus;
  /** What was checked, or why it failed / was skipped. */
  message: string;
}

export interface CheckReport {
  /** The env as printed (its wrapper stack). */
  env: string;
  /** True when no check failed (skipped checks do not fail the report). */
  passed: boolean;
  checks: CheckResult[];
}

export const CHECK_NAMES = {
  spaces: "spaces are declared",
  resetRepeatable: "seeded reset is repeatable",
  trajectory: "same seed and actions give the same trajectory",
  inSpace: "observations lie in the observation space",
  stepShape: "step results are well formed",
  stepAfterEnd: "step after the end is an error",
  render: "render returns text",
  closeTwice: "close twice is safe",
} as const;

/** Thrown by `assertEnv` when a check fails; `report` has every check. */
export class EnvCheckError extends Error {
  constructor(readonly report: CheckReport) {
    super(formatCheckReport(report));
    this.name = "EnvCheckError";
  }
}

interface StepRecord {
  obs: unknown;
  reward: number;
  terminated: boolean;
  truncated: boolean;
}

interface Trajectory {
  first: unknown;
  steps: StepRecord[];
  ended: boolean;
  /** A description of the first problem of a step (a throw, a malformed result), if any. */
  error?: string;
  /** Set when reset itself threw. */
  resetError?: string;
  /** The next action after the end, for the step-after-end check. */
  nextAction?: unknown;
}

/** Runs every check and returns the report. Never throws for a misbehaving env; closes the env. */
export async function checkEnv<Obs, Act>(env: Env<Obs, Act>, options: CheckEnvOptions<Obs, Act> = {}): Promise<CheckReport> {
  const seed = options.seed ?? 0;
  const episodes = options.episodes ?? 2;
  const maxSteps = options.maxSteps ?? 20;
  const name = safeString(env);
  const checks: CheckResult[] = [];
  const add = (n: string, status: CheckStatus, message: string) => checks.push({ name: n, status, message });

  const spaceProblem = checkSpaces(env, seed);
  add(CHECK_NAMES.spaces, spaceProblem ? "failed" : "passed", spaceProblem ?? "observationSpace and actionSpace can test, sample and describe themselves");
  if (spaceProblem) {
    await closeTwice(env, add);
    return finish(name, checks);
  }

  const actions: ActionSource<Obs, Act> = options.actions ?? ((ctx) => env.actionSpace.sample(ctx.rng));
  let resetProblem: string | undefined;
  let trajectoryProblem: string | undefined;
  let spaceViolation: string | undefined;
  let shapeProblem: string | undefined;
  let endedEpisode: number | undefined;
  let lastRun: Trajectory | undefined;
  let stepsTaken = 0;

  for (let episode = 0; episode < episodes; episode++) {
    const s = seed + episode;
    const runs: Trajectory[] = [];
    for (let run = 0; run < 2; run++) {
      const t = await play(env, s, episode, maxSteps, actions, options.resetOptions);
      runs.push(t);
      stepsTaken += t.steps.length;
      if (t.error && !shapeProblem) shapeProblem = `episode ${episode} (seed ${s}), run ${run + 1}: ${t.error}`;
      if (t.resetError && !resetProblem) resetProblem = t.resetError;
      spaceViolation ??= firstOutOfSpace(env, t, `episode ${episode} (seed ${s})`);
      if (t.ended) endedEpisode = episode;
      lastRun = t;
    }
    const [a, b] = runs as [Trajectory, Trajectory];
    if (!resetProblem && !isDeepStrictEqual(a.first, b.first)) {
      resetProblem = `reset({seed: ${s}}) twice gave different observations: ${preview(a.first)} vs ${preview(b.first)}`;
    }
    if (!trajectoryProblem) trajectoryProblem = compareTrajectories(a, b, s);
  }

  add(CHECK_NAMES.resetRepeatable, resetProblem ? "failed" : "passed", resetProblem ?? `${episodes} seeds each reset twice gave equal observations`);
  add(
    CHECK_NAMES.trajectory,
    trajectoryProblem ? "failed" : "passed",
    trajectoryProblem ?? `${episodes} episodes replayed with the same seed and actions gave equal observations, rewards and flags`,
  );
  add(CHECK_NAMES.inSpace, spaceViolation ? "failed" : "passed", spaceViolation ?? `all observations of ${stepsTaken} steps and their resets lie in the space`);
  add(CHECK_NAMES.stepShape, shapeProblem ? "failed" : "passed", shapeProblem ?? "rewards are finite numbers, flags booleans, info objects");

  if (endedEpisode === undefined) {
    add(
      CHECK_NAMES.stepAfterEnd,
      "skipped",
      `no episode ended within ${maxSteps} steps; pass an \`actions\` generator that ends episodes, or check the env made with a TimeLimit (make(id, {maxEpisodeSteps}))`,
    );
  } else {
    // The env sits at the end of an episode if the last run ended; else replay one that did.
    const t = lastRun?.ended ? lastRun : await play(env, seed + endedEpisode, endedEpisode, maxSteps, actions, options.resetOptions);
    if (!t.ended) {
      add(CHECK_NAMES.stepAfterEnd, "failed", `replaying episode ${endedEpisode} did not end again, so the step after the end could not be tried`);
    } else {
      try {
        await env.step(t.nextAction as Act);
        add(CHECK_NAMES.stepAfterEnd, "failed", `step() after the episode ended (step ${t.steps.length}) returned normally; it must throw (EnvContractError)`);
      } catch (err) {
        add(CHECK_NAMES.stepAfterEnd, "passed", `step() after the end threw: ${errorMessage(err)}`);
      }
    }
  }

  try {
    const text = env.render();
    if (typeof text === "string") add(CHECK_NAMES.render, "passed", `render() returned ${text.length} characters`);
    else add(CHECK_NAMES.render, "failed", `render() returned ${typeof text}, expected a string`);
  } catch (err) {
    add(CHECK_NAMES.render, "failed", `render() threw: ${errorMessage(err)}`);
  }

  await closeTwice(env, add);
  return finish(name, checks);
}

/** Like `checkEnv`, but throws an `EnvCheckError` listing the failures when a check fails. */
export async function assertEnv<Obs, Act>(env: Env<Obs, Act>, options: CheckEnvOptions<Obs, Act> = {}): Promise<CheckReport> {
  const report = await checkEnv(env, options);
  if (!report.passed) throw new EnvCheckError(report);
  return report;
}

/** The report as lines of text: one line per check, `ok`, `FAIL` or `skip`, with the reason. */
export function formatCheckReport(report: CheckReport): string {
  const mark = { passed: "ok  ", failed: "FAIL", skipped: "skip" } as const;
  const lines = [`checkEnv ${report.env}: ${report.passed ? "passed" : "FAILED"}`];
  for (const c of report.checks) lines.push(`  ${mark[c.status]} ${c.name}: ${c.message}`);
  return lines.join("\n");
}

function finish(env: string, checks: CheckResult[]): CheckReport {
  return { env, passed: checks.every((c) => c.status !== "failed"), checks };
}

function checkSpaces(env: Env<any, any>, seed: number): string | undefined {
  for (const key of ["observationSpace", "actionSpace"] as const) {
    const space = env[key];
    if (!space) return `${key} is not declared`;
    for (const method of ["contains", "sample", "toJSON"] as const) {
      if (typeof space[method] !== "function") return `${key}.${method} is not a function`;
    }
    try {
      JSON.stringify(space.toJSON());
    } catch (err) {
      return `${key}.toJSON() is not JSON-serializable: ${errorMessage(err)}`;
    }
  }
  const rng = new Rng(seed + 0x51ed);
  try {
    for (let i = 0; i < 8; i++) {
      const a = env.actionSpace.sample(rng);
      if (!env.actionSpace.contains(a)) return `actionSpace.sample() returned ${preview(a)}, which actionSpace.contains() rejects`;
      const o = env.observationSpace.sample(rng);
      if (!env.observationSpace.contains(o)) return `observationSpace.sample() returned ${preview(o)}, which observationSpace.contains() rejects`;
    }
  } catch (err) {
    return `sampling a space threw: ${errorMessage(err)}`;
  }
  return undefined;
}

async function play<Obs, Act>(
  env: Env<Obs, Act>,
  seed: number,
  episode: number,
  maxSteps: number,
  actions: ActionSource<Obs, Act>,
  resetOptions: Record<string, unknown> | undefined,
): Promise<Trajectory> {
  const rng = new Rng((Math.imul(seed, 0x9e3779b1) ^ 0x2545f491) >>> 0);
  const t: Trajectory = { first: undefined, steps: [], ended: false };
  let obs: Obs;
  let info: Info;
  try {
    [obs, info] = await env.reset({ seed, ...(resetOptions ? { options: resetOptions } : {}) });
  } catch (err) {
    t.resetError = `reset({seed: ${seed}}) threw: ${errorMessage(err)}`;
    return t;
  }
  t.first = obs;
  if (typeof info !== "object" || info === null) t.error = `reset returned info ${preview(info)}, expected an object`;
  while (t.steps.length < maxSteps) {
    let action: Act;
    try {
      action = await actions({ obs, step: t.steps.length, episode, rng, info });
    } catch (err) {
      t.error ??= `the action generator threw at step ${t.steps.length}: ${errorMessage(err)}`;
      return t;
    }
    let result;
    try {
      result = await env.step(action);
    } catch (err) {
      t.error ??= `step ${t.steps.length} threw: ${errorMessage(err)}`;
      return t;
    }
    if (!Array.isArray(result) || result.length !== 5) {
      t.error ??= `step ${t.steps.length} returned ${preview(result)}, expected [obs, reward, terminated, truncated, info]`;
      return t;
    }
    const [nextObs, reward, terminated, truncated, nextInfo] = result;
    if (typeof reward !== "number" || !Number.isFinite(reward)) t.error ??= `step ${t.steps.length} returned reward ${preview(reward)}, expected a finite number`;
    if (typeof terminated !== "boolean" || typeof truncated !== "boolean") {
      t.error ??= `step ${t.steps.length} returned terminated=${preview(terminated)}, truncated=${preview(truncated)}, expected booleans`;
    }
    if (typeof nextInfo !== "object" || nextInfo === null) t.error ??= `step ${t.steps.length} returned info ${preview(nextInfo)}, expected an object`;
    t.steps.push({ obs: nextObs, reward, terminated, truncated });
    obs = nextObs;
    info = nextInfo ?? {};
    if (terminated || truncated) {
      t.ended = true;
      try {
        t.nextAction = await actions({ obs, step: t.steps.length, episode, rng, info });
      } catch {
        t.nextAction = env.actionSpace.sample(rng);
      }
      return t;
    }
  }
  return t;
}

function compareTrajectories(a: Trajectory, b: Trajectory, seed: number): string | undefined {
  const n = Math.max(a.steps.length, b.steps.length);
  for (let i = 0; i < n; i++) {
    const x = a.steps[i];
    const y = b.steps[i];
    if (!x || !y) return `seed ${seed}: the first run took ${a.steps.length} steps, the second ${b.steps.length}`;
    for (const field of ["reward", "terminated", "truncated"] as const) {
      if (!Object.is(x[field], y[field])) return `seed ${seed}, step ${i}: ${field} was ${x[field]} then ${y[field]}`;
    }
    if (!isDeepStrictEqual(x.obs, y.obs)) return `seed ${seed}, step ${i}: observation was ${preview(x.obs)} then ${preview(y.obs)}`;
  }
  return undefined;
}

function firstOutOfSpace(env: Env<any, any>, t: Trajectory, where: string): string | undefined {
  const space = env.observationSpace;
  if (t.first !== undefined && !space.contains(t.first)) return `${where}: the reset observation ${preview(t.first)} is not in ${describe(space)}`;
  for (let i = 0; i < t.steps.length; i++) {
    const obs = t.steps[i]!.obs;
    if (!space.contains(obs)) return `${where}: the observation of step ${i}, ${preview(obs)}, is not in ${describe(space)}`;
  }
  return undefined;
}

async function closeTwice(env: Env<any, any>, add: (n: string, s: CheckStatus, m: string) => void): Promise<void> {
  try {
    await env.close();
  } catch (err) {
    add(CHECK_NAMES.closeTwice, "failed", `the first close() threw: ${errorMessage(err)}`);
    return;
  }
  try {
    await env.close();
    add(CHECK_NAMES.closeTwice, "passed", "close() twice returned normally");
  } catch (err) {
    add(CHECK_NAMES.closeTwice, "failed", `the second close() threw: ${errorMessage(err)}; close must be safe to repeat`);
  }
}

function describe(space: { toJSON(): Record<string, unknown> }): string {
  try {
    return JSON.stringify(space.toJSON());
  } catch {
    return "the observation space";
  }
}

function preview(value: unknown): string {
  if (typeof value === "number" || typeof value === "bigint" || value === undefined) return String(value);
  let text: string;
  try {
    text = typeof value === "string" ? JSON.stringify(value) : (JSON.stringify(value) ?? String(value));
  } catch {
    text = String(value);
  }
  return text.length > 160 ? `${text.slice(0, 157)}...` : text;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

function safeString(env: Env<any, any>): string {
  try {
    return env.toString();
  } catch {
    return "(env)";
  }
}

/**
 * Actions for checking any env: sampled from its action space; for tool-call action spaces, from
 * step `finishAfter` on (default 2) a turn without tool calls, which ends a tool env's episode when
 * it has no user simulator (with one, the env's TimeLimit ends it).
 */
export function sampledActions<Obs, Act>(env: Env<Obs, Act>, options: { finishAfter?: number } = {}): ActionSource<Obs, Act> {
  const finishAfter = options.finishAfter ?? 2;
  return (ctx) => {
    if (env.actionSpace.kind === "tool-call" && ctx.step >= finishAfter) {
      return { content: `My final answer is ${ctx.step}.`, toolCalls: [] } as AgentTurn as Act;
    }
    return env.actionSpace.sample(ctx.rng);
  };
}
