/**
 * GRPO's rollouts for suites played by an agent of the user's own (`suites[].agent`): a Rollout whose
 * groups for such a suite are played by that agent through the recording gateway, while every other
 * suite's groups go to the built-in agent loop unchanged.
 *
 * Per episode: make and reset the suite's env; open a gateway session that owns it (its tools become
 * `POST /sessions/<id>/tools/<name>`); start the agent — a command with OPENAI_BASE_URL, OPENAI_API_KEY
 * and SINKFLEX_TASK in its environment and the task on stdin, or a TypeScript function given the same
 * as `AgentContext` — and wait for it, within `timeoutMs`. Then the reward: the suite's verifier on the
 * env the agent drove (the agent's last reply ends the episode when no tool did), or the reward the
 * agent posted (`reward: "agent"`). The session's recorded segments are the trajectory: token-exact,
 * loss mask 1 on sampled tokens only. An agent that crashes, times out, is refused by the gateway, makes
 * no call or posts no reward gives a failed trajectory (endReason "error", the reason in `error`), which
 * the update leaves out; the run goes on.
 *
 * The gateway runs in this process on 127.0.0.1 with a key of its own, over the rollout's batch
 * decoder, so agent calls decode together with the built-in rollouts and weight updates wait for a
 * decoding step. This file does not score with rubrics or train (grpo.ts does).
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mixSeedParts } from "../../core/index.js";
import { agentEnvironment, agentTools, EnvTools, exitReason, GatewayServer, stderrSummary, thrownReason, wireMessages, type AgentFunction, type AgentTask } from "../../gateway/index.js";
import type { ChatTemplate } from "../../model/index.js";
import type { TokenCodec } from "../../model/index.js";
import { Rollout, toolParserFor, type GroupTask, type RolloutOptions } from "../../rollout/index.js";
import type { PolicySampler as Sampler } from "../../rollout/index.js";
import type { Trajectory } from "../../rollout/index.js";
import type { TrainSequence } from "../../rl/index.js";
import type { TrainConfig } from "../config.js";
import type { ScoredTrajectory } from "../suite-reward.js";
import type { SuitePlan } from "../tasks.js";

export type AgentSpec = NonNullable<TrainConfig["suites"][number]["agent"]>;

/** A group task with the suite it belongs to (agent suites are chosen by it). */
export type SuiteGroupTask = GroupTask & { suite: string };

/** Agent episode counts: what the gateway recorded of the agents' calls. */
export interface AgentCounts {
  episodes: number;
  failed: number;
  calls: number;
  /** Calls that extended the trajectory (merged into the held segment) and that split it. */
  merges: number;
  splits: number;
}

/** The configured agents by suite name (plans are in the config's suite order). */
export function agentSuites(cfg: TrainConfig, plans: readonly SuitePlan[]): Map<string, AgentSpec> {
  const out = new Map<string, AgentSpec>();
  cfg.suites.forEach((s, i) => {
    if (s.agent && plans[i]) out.set(plans[i].name, s.agent);
  });
  return out;
}

const zeroCounts = (): AgentCounts => ({ episodes: 0, failed: 0, calls: 0, merges: 0, splits: 0 });

export class SuiteRollout extends Rollout {
  private gateway: Promise<GatewayServer> | undefined;
  private readonly apiKey = randomBytes(16).toString("hex");
  /** Counts since the run began, and since `takeCounts` was last called. */
  readonly agentCounts: AgentCounts = zeroCounts();
  private stepCounts: AgentCounts = zeroCounts();

  constructor(
    readonly agents: Map<string, AgentSpec>,
    sampler: Sampler,
    codec: TokenCodec,
    template: ChatTemplate,
    private readonly rolloutOptions: RolloutOptions,
  ) {
    super(sampler, codec, template, rolloutOptions);
  }

  isAgentSuite(suite: string): boolean {
    return this.agents.has(suite);
  }

  /** The agent counts since the last call (for a step's metrics); {} when no suite has an agent. */
  takeCounts(): { agents?: AgentCounts } {
    if (this.agents.size === 0) return {};
    const c = this.stepCounts;
    this.stepCounts = zeroCounts();
    return { agents: c };
  }

  override async runGroup(task: GroupTask | SuiteGroupTask): Promise<Trajectory[]> {
    const suite = "suite" in task ? task.suite : undefined;
    const agent = suite === undefined ? undefined : this.agents.get(suite);
    if (!agent) return super.runGroup(task);
    const G = task.groupSize;
    if (!Number.isInteger(G) || G < 1) throw new RangeError(`groupSize must be a positive integer, got ${G}`);
    return Promise.all(Array.from({ length: G }, (_, g) => this.episode(task, suite!, agent, g)));
  }

  override async close(): Promise<void> {
    const gw = this.gateway;
    this.gateway = undefined;
    if (gw) await (await gw.catch(() => undefined))?.close();
    await super.close();
  }

  /** The in-process gateway, started on first use. */
  private gatewayStarted(): Promise<GatewayServer> {
    this.gateway ??= (async () => {
      const o = this.rolloutOptions;
      const gw = new GatewayServer({
        sampler: this.sampler,
        codec: this.codec,
        template: this.template,
        modelName: "policy",
        apiKey: this.apiKey,
        decoder: this.decoder,
        maxContextTokens: o.maxContextTokens ?? 8192,
        maxTokens: o.maxTokensPerTurn ?? 512,
        maxCallsPerSession: o.maxTurns ?? 20,
        maxSessions: 4096,
        templateVars: o.templateVars,
        parser: toolParserFor(this.template, o.toolFormat),
        defaults: { temperature: o.temperature, topP: o.topP },
      });
      await gw.listen(0, "127.0.0.1");
      return gw;
    })();
    return this.gateway;
  }

  /** One episode played by the agent; a failed one is a trajectory with endReason "error". */
  private async episode(task: GroupTask, suite: string, agent: AgentSpec, g: number): Promise<Trajectory> {
    const t0 = performance.now();
    const gw = await this.gatewayStarted();
    const env = await task.makeEnv();
    let id: string | undefined;
    const traj: Trajectory = {
      envId: task.envId, taskIndex: task.reset.options?.taskIndex as number | undefined, seed: task.reset.seed, groupIndex: g, tools: [], prompt: [], segments: [], turns: [],
      reward: 0, rewards: [], info: {}, endReason: "terminated", drift: [], policyVersion: this.sampler.policyVersion, prefillTokens: 0, sampledTokens: 0, wallMs: 0,
    };
    let failure: string | undefined;
    try {
      const tools = new EnvTools(env, await env.reset(task.reset));
      traj.tools = tools.tools;
      traj.prompt = [...tools.first.messages];
      const opened = gw.open({ task: { suite, taskIndex: traj.taskIndex }, env: tools, seed: mixSeedParts(this.rolloutOptions.seed ?? 0, task.reset.seed ?? 0, g), metadata: { suite } });
      id = opened.id;
      const sessionURL = `${gw.url}/sessions/${id}`;
      const agentTask: AgentTask = {
        messages: wireMessages(tools.first.messages),
        tools: tools.tools.map((t) => ({ type: "function", function: t })),
        suite,
        envId: task.envId,
        taskIndex: traj.taskIndex,
        seed: task.reset.seed,
        episode: g,
        toolsURL: `${sessionURL}/tools`,
        sessionURL,
      };
      // A function gets the task as a program does: plain JSON (no schema objects of the env's own).
      failure = agent.run
        ? await runFunction(agent.run, { baseURL: opened.baseURL, apiKey: this.apiKey, task: JSON.parse(JSON.stringify(agentTask)) as AgentTask }, agent.timeoutMs)
        : await runCommand(agent.command!, { baseURL: opened.baseURL, apiKey: this.apiKey, task: agentTask }, agent.timeoutMs);
      const view = gw.session(id)!;
      const rec = view.recorder.trajectory().trajectory;
      Object.assign(traj, { segments: rec.segments, turns: rec.turns, drift: rec.drift, policyVersion: rec.policyVersion, prefillTokens: rec.prefillTokens, sampledTokens: rec.sampledTokens });
      this.stats.prefillTokens += rec.prefillTokens;
      this.stats.sampledTokens += rec.sampledTokens;
      const calls = view.recorder.calls;
      const counts = { calls: calls.length, merges: calls.filter((c) => c.join === "extend").length, splits: view.recorder.splits.length };
      if (!failure && view.refusals.length > 0) {
        const r = view.refusals[0]!;
        failure = `the gateway refused ${view.refusals.length} of the agent's requests; the first: ${r.status} ${r.route}: ${r.message}`;
      }
      if (!failure && calls.length === 0) failure = "the agent made no chat-completion call";
      if (!failure && agent.reward === "agent") {
        if (view.recorder.reward === undefined) failure = `the agent never posted a reward (POST ${sessionURL}/reward with {"reward": <number>}), which this suite's agent.reward "agent" needs`;
        else traj.reward = view.recorder.reward;
        traj.info = { ...view.recorder.rewardInfo };
      } else if (!failure) {
        // The verifier's reward on the env the agent drove; the agent's last reply ends the episode
        // when no tool did, as a reply without tool calls does in the agent loop.
        const ended = await tools.finish(rec.turns[rec.turns.length - 1]?.content ?? "");
        if (!ended) failure = "the env's episode had not ended when the agent stopped (its last reply did not end it either)";
        traj.reward = tools.reward;
        traj.info = { ...tools.info };
      }
      traj.rewards = [traj.reward];
      // Each turn's observation: the env's answers to its tool calls, in the order the agent made them.
      let step = 0;
      for (const turn of traj.turns) {
        turn.observation = tools.steps.slice(step, step + turn.toolCalls.length).flatMap((s) => s.result.messages);
        step += turn.toolCalls.length;
      }
      traj.info.gateway = { ...counts, refusals: view.refusals.length };
      this.count(counts, failure !== undefined);
    } catch (err) {
      failure ??= err instanceof Error ? err.message : String(err);
      this.count({ calls: 0, merges: 0, splits: 0 }, true);
    } finally {
      if (id !== undefined) gw.closeSession(id);
      await env.close().catch(() => undefined);
      traj.wallMs = performance.now() - t0;
      this.stats.trajectories++;
    }
    if (failure !== undefined) {
      traj.endReason = "error";
      traj.error = `agent: ${failure}`;
      traj.reward = 0;
      traj.rewards = [];
    }
    return traj;
  }

  private count(c: Pick<AgentCounts, "calls" | "merges" | "splits">, failed: boolean): void {
    for (const total of [this.agentCounts, this.stepCounts]) {
      total.episodes++;
      total.failed += failed ? 1 : 0;
      total.calls += c.calls;
      total.merges += c.merges;
      total.splits += c.splits;
    }
  }
}

/** Runs a TypeScript agent within the time limit; returns why it failed, or undefined. */
async function runFunction(run: AgentFunction, ctx: { baseURL: string; apiKey: string; task: AgentTask }, timeoutMs: number): Promise<string | undefined> {
  const abort = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<string>((resolve) => {
    timer = setTimeout(() => {
      abort.abort();
      resolve(`the agent did not finish within ${timeoutMs} ms (agent.timeoutMs)`);
    }, timeoutMs);
  });
  try {
    return await Promise.race([
      run({ ...ctx, tools: agentTools(ctx.task, ctx.apiKey, abort.signal), signal: abort.signal }).then(
        () => undefined,
        (err: unknown) => thrownReason(err),
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs an agent program (a shell command in its own process group) within the time limit; returns why it failed, or undefined. */
function runCommand(command: string, ctx: { baseURL: string; apiKey: string; task: AgentTask }, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const child = spawn(command, { shell: true, detached: true, env: { ...process.env, ...agentEnvironment(ctx) }, stdio: ["pipe", "ignore", "pipe"] });
    let stderr = "";
    let timedOut = false;
    child.stderr!.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString("utf8")).slice(-8000);
    });
    child.stdin!.on("error", () => undefined);
    child.stdin!.end(`${JSON.stringify(ctx.task)}\n`);
    const killGroup = () => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, timeoutMs);
    const tail = () => (stderr.trim() ? `: ${stderrSummary(stderr)}` : "");
    child.on("error", (err) => {
      clearTimeout(timer);
      resolve(`the agent command could not start (${err.message}): ${command}`);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      killGroup(); // anything it left running
      if (timedOut) resolve(`the agent did not finish within ${timeoutMs} ms (agent.timeoutMs) and was killed${tail()}`);
      else if (code !== 0) resolve(exitReason(code, signal, stderr));
      else resolve(undefined);
    });
  });
}

/**
 * The sequences the update learns from for an agent suite's group: every segment of every trajectory
 * that did not fail and could be scored, each with its own prompt and the trajectory's reward (a
 * trajectory the gateway split is trained on all its segments). `members` names each sequence's
 * trajectory.
 */
export function agentTrainSequences(group: Trajectory[], scored: ScoredTrajectory[], suite: string): { sequences: TrainSequence[]; members: number[] } {
  const sequences: TrainSequence[] = [];
  const members: number[] = [];
  group.forEach((t, i) => {
    if (t.endReason === "error" || scored[i]!.error) return;
    for (const s of t.segments) {
      if (!s.lossMask.some((m) => m === 1)) continue;
      sequences.push({ tokens: s.tokens, lossMask: s.lossMask, behaviourLogprobs: s.behaviourLogprobs, reward: scored[i]!.reward, policyVersion: s.policyVersion, suite });
      members.push(i);
    }
  });
  return { sequences, members };
}
