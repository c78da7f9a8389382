/**
 * The agent loop: plays a group of G rollouts of one task with a policy and returns their trajectories.
 *
 * Incremental mode (the default): the suite's system prompt is prefilled once and kept; each group
 * forks it, appends the task's prompt once, and forks G sessions from that; each turn appends only the
 * new tokens (the observation and its framing) and samples. Recompute mode re-encodes the whole context
 * every turn in a fresh session — it exists only as the benchmark's baseline and gives the same tokens
 * for the same seed. Sampling goes through the batch decoder, so the turns of every trajectory in
 * flight share decoding steps. With a pin rule (`pins`, a run's secondary attention sinks) every append
 * pins the tokens the rule names and the trajectory records the flags (`TrajectorySegment.pinned`), so the
 * trainer scores with the keys the session kept. This file does not schedule groups (scheduler.ts) and
 * does not train.
 */
import { mixSeedParts, type AgentTurn, type AssistantMessage, type ChatMessage, type ChatObservation } from "../core/index.js";
import type { Env, Info, ResetArgs } from "../gym/index.js";
import type { EngineSession, SampleParams, SessionPins } from "../engine/index.js";
import type { ChatTemplate } from "../model/index.js";
import type { TokenCodec } from "../model/index.js";
import { BatchDecoder, type Sampler } from "./batch-decoder.js";
import { IncrementalRenderer } from "./renderer.js";
import { toolParserFor, type ToolCallParser } from "./tool-parser.js";
import type { EndReason, Trajectory, TrajectorySegment, TurnRecord } from "./trajectory.js";

/**
 * Which appended tokens a session pins: flags ([tokens.length], 1 = pinned) for `tokens` appended at
 * position `start` of a sequence with `pinnedBefore` pinned tokens before them. It must be first come,
 * first pinned (the flags of a prefix do not depend on what follows), so a prompt appended in parts gets
 * the flags of the whole. The pipeline passes attention's `pinFlags` for the run's layout.
 */
export type PinRule = (tokens: readonly number[], start: number, pinnedBefore: number) => Uint8Array;

export interface RolloutOptions {
  /** Assistant turns per trajectory. Default 20. */
  maxTurns?: number;
  /** Sampled tokens per turn. Default 512. */
  maxTokensPerTurn?: number;
  /** Tokens in the whole context (prompt, turns, observations). Default 8192. */
  maxContextTokens?: number;
  temperature?: number;
  topP?: number;
  topK?: number;
  /** Base seed: each turn samples with a seed derived from it, the task seed, the group index and the turn. */
  seed?: number;
  /** `incremental` (KV cache kept, prefixes shared) or `recompute` (benchmark baseline). */
  mode?: "incremental" | "recompute";
  /** Template drift: flag the trajectory and keep going, or split it at the drift. Default flag. */
  onDrift?: "flag" | "split";
  /** Extra chat template variables (e.g. `{ enable_thinking: false }`). */
  templateVars?: Record<string, unknown>;
  /**
   * The tool format whose parser reads the sampled turns ("hermes", "llama3-json", "phi3-hermes"; a
   * config's `rollout.toolFormat`). Default: the chat template's, which is the checkpoint family's.
   */
  toolFormat?: string;
  /** A parser of your own; overrides toolFormat. */
  parser?: ToolCallParser;
  /** Share the system prompt's prefill across groups. Default true (incremental mode only). */
  shareSystemPrompt?: boolean;
  /**
   * A turn that reaches `maxTokensPerTurn` without its end-of-turn token: `end` the trajectory
   * (truncated_turn_tokens), or `close` the turn with the end-of-turn token (not sampled, mask 0) and
   * send what was written to the env. Default end.
   */
  turnLimit?: "end" | "close";
  /**
   * Pin the tokens this rule names in every append (sampled tokens are never pinned), and record the
   * flags with each segment. The sampler's sessions must keep pinned keys (the embedded engine's do).
   * Default: no pins.
   */
  pins?: PinRule;
}

/** One task played G times: every rollout gets its own env, reset with the same arguments. */
export interface GroupTask {
  envId: string;
  makeEnv: () => Env<ChatObservation, AgentTurn> | Promise<Env<ChatObservation, AgentTurn>>;
  reset: ResetArgs;
  groupSize: number;
  /**
   * Tasks with the same key make interchangeable envs (the same env id and options): the rollout keeps
   * such an env when its episode ends and resets it for a later one, as Gymnasium's `reset` contract
   * allows, instead of making a new env (a world, a server, compiled tool schemas) per episode. Unset:
   * every episode gets a new env, closed when it ends.
   */
  envKey?: string;
}

export interface RolloutStats {
  /** Tokens the engine prefilled (prompts, observations, recomputed contexts). */
  prefillTokens: number;
  sampledTokens: number;
  /** System prompts prefilled once and reused; prompt prefills shared by a group. */
  systemPrefills: number;
  systemReuses: number;
  groupPrefills: number;
  trajectories: number;
}

function sameMessages(a: ChatObservation, b: ChatObservation): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export class Rollout {
  readonly decoder: BatchDecoder;
  readonly stats: RolloutStats = { prefillTokens: 0, sampledTokens: 0, systemPrefills: 0, systemReuses: 0, groupPrefills: 0, trajectories: 0 };
  private readonly systemSessions = new Map<string, { ids: number[]; session: Promise<EngineSession>; version: number }>();
  /** Envs whose episode ended, by GroupTask.envKey, waiting to be reset for another. */
  private readonly idleEnvs = new Map<string, Env<ChatObservation, AgentTurn>[]>();
  private readonly parser: ToolCallParser;
  private readonly opts: Required<Omit<RolloutOptions, "parser" | "toolFormat" | "templateVars" | "topK" | "topP" | "temperature" | "pins">> & RolloutOptions;

  constructor(
    readonly sampler: Sampler,
    readonly codec: TokenCodec,
    readonly template: ChatTemplate,
    options: RolloutOptions = {},
    decoder?: BatchDecoder,
  ) {
    this.opts = {
      maxTurns: 20,
      maxTokensPerTurn: 512,
      maxContextTokens: 8192,
      seed: 0,
      mode: "incremental",
      onDrift: "flag",
      shareSystemPrompt: true,
      turnLimit: "end",
      ...options,
    };
    for (const k of ["maxTurns", "maxTokensPerTurn", "maxContextTokens"] as const) {
      const v = this.opts[k];
      if (!Number.isInteger(v) || v < 1) throw new RangeError(`rollout option ${k} must be a positive integer, got ${v}`);
    }
    if (this.opts.mode !== "incremental" && this.opts.mode !== "recompute") {
      throw new Error(`rollout mode must be "incremental" or "recompute", got ${JSON.stringify(this.opts.mode)}`);
    }
    this.parser = options.parser ?? toolParserFor(template, options.toolFormat);
    this.decoder = decoder ?? new BatchDecoder(sampler);
  }

  /** Releases the shared system-prompt sessions and closes the idle envs. */
  async close(): Promise<void> {
    for (const s of this.systemSessions.values()) (await s.session.catch(() => undefined))?.close();
    this.systemSessions.clear();
    const idle = [...this.idleEnvs.values()].flat();
    this.idleEnvs.clear();
    await Promise.all(idle.map((e) => e.close().catch(() => undefined)));
  }

  /** An idle env of the task's key, or a new one. */
  private takeEnv(task: GroupTask): Env<ChatObservation, AgentTurn> | Promise<Env<ChatObservation, AgentTurn>> {
    return (task.envKey !== undefined ? this.idleEnvs.get(task.envKey)?.pop() : undefined) ?? task.makeEnv();
  }

  /** The pin flags of tokens appended at `start` after `before` pins, or undefined without a pin rule. */
  private pinsFor(tokens: readonly number[], start: number, before: number): Uint8Array | undefined {
    const rule = this.opts.pins;
    if (!rule) return undefined;
    const flags = rule(tokens, start, before);
    if (flags.length !== tokens.length) throw new Error(`the pin rule gave ${flags.length} flags for ${tokens.length} tokens`);
    return flags;
  }

  /** Appends with the flags when any is set (a session without pins gets a plain append). */
  private append(session: EngineSession, tokens: number[], flags: Uint8Array | undefined): Promise<void> {
    const opts: SessionPins | undefined = flags && flags.some((f) => f === 1) ? { pinned: flags } : undefined;
    return opts ? session.append(tokens, opts) : session.append(tokens);
  }

  /** A new session holding `ids` (a sequence's start), pinned by `flags` where set. */
  private async openSession(ids: number[], flags: Uint8Array | undefined): Promise<EngineSession> {
    if (!flags || !flags.some((f) => f === 1)) return this.sampler.session(ids);
    const session = await this.sampler.session([]);
    await session.append(ids, { pinned: flags });
    return session;
  }

  private newRenderer(): IncrementalRenderer {
    return new IncrementalRenderer(this.codec, this.template, { extra: this.opts.templateVars, onDrift: this.opts.onDrift });
  }

  /**
   * The group's shared root session holding the prompt: a fork of the cached system-prompt session
   * with the rest of the prompt appended, or a fresh session when the prompt cannot be split there.
   */
  private async promptSession(obs: ChatObservation, promptText: string): Promise<{ session: EngineSession; ids: number[] }> {
    const full = this.codec.encode(promptText);
    const first = obs.messages[0];
    if (this.opts.shareSystemPrompt && first?.role === "system") {
      const sysText = this.template.render([first], { tools: obs.tools, addGenerationPrompt: false, extra: this.opts.templateVars });
      if (sysText.length < promptText.length && promptText.startsWith(sysText)) {
        let cached = this.systemSessions.get(sysText);
        if (cached && cached.version !== this.sampler.policyVersion) {
          // The weights changed: the cached keys and values belong to the old policy.
          (await cached.session).close();
          this.systemSessions.delete(sysText);
          cached = undefined;
        }
        if (!cached) {
          const ids = this.codec.encode(sysText);
          cached = { ids, session: this.openSession(ids, this.pinsFor(ids, 0, 0)), version: this.sampler.policyVersion };
          this.systemSessions.set(sysText, cached);
          this.stats.systemPrefills++;
          this.stats.prefillTokens += ids.length;
        } else {
          this.stats.systemReuses++;
        }
        const rest = this.codec.encode(promptText.slice(sysText.length));
        // The split must not change tokenization: the two parts must encode to the whole.
        if (cached.ids.length + rest.length === full.length && cached.ids.every((id, i) => id === full[i]) && rest.every((id, i) => id === full[cached.ids.length + i])) {
          const root = (await cached.session).fork();
          const before = this.pinsFor(cached.ids, 0, 0);
          await this.append(root, rest, this.pinsFor(rest, cached.ids.length, before ? countOnes(before) : 0));
          this.stats.prefillTokens += rest.length;
          this.stats.groupPrefills++;
          return { session: root, ids: full };
        }
      }
    }
    const session = await this.openSession(full, this.pinsFor(full, 0, 0));
    this.stats.prefillTokens += full.length;
    this.stats.groupPrefills++;
    return { session, ids: full };
  }

  /** Plays the task `groupSize` times; trajectories in group order. */
  async runGroup(task: GroupTask): Promise<Trajectory[]> {
    const G = task.groupSize;
    if (!Number.isInteger(G) || G < 1) throw new RangeError(`groupSize must be a positive integer, got ${G}`);
    const envs = await Promise.all(Array.from({ length: G }, () => this.takeEnv(task)));
    let out: Trajectory[] | undefined;
    try {
      const resets = await Promise.all(envs.map((env) => env.reset(task.reset)));
      const shared = this.opts.mode === "incremental" && resets.every(([o]) => sameMessages(o, resets[0]![0]));
      let root: { session: EngineSession; ids: number[] } | undefined;
      if (shared) {
        root = await this.promptSession(resets[0]![0], this.newRenderer().promptText(resets[0]![0]));
      }
      const runs = envs.map(async (env, g) => {
        const [obs, info] = resets[g]!;
        const start = root ? { session: root.session.fork(), ids: root.ids } : undefined;
        return this.play(task, env, g, obs, info, start);
      });
      out = await Promise.all(runs);
      root?.session.close();
      return out;
    } finally {
      // Kept for a later episode: the envs of a keyed task whose episode ended without an error (an env
      // that failed may be in any state). The rest are closed.
      const keep = (g: number) => task.envKey !== undefined && out !== undefined && out[g]!.endReason !== "error";
      if (envs.some((_, g) => keep(g))) {
        const idle = this.idleEnvs.get(task.envKey!) ?? [];
        this.idleEnvs.set(task.envKey!, idle);
        envs.forEach((e, g) => keep(g) && idle.push(e));
      }
      await Promise.all(envs.filter((_, g) => !keep(g)).map((e) => e.close().catch(() => undefined)));
    }
  }

  private async play(
    task: GroupTask,
    env: Env<ChatObservation, AgentTurn>,
    groupIndex: number,
    first: ChatObservation,
    resetInfo: Info,
    start: { session: EngineSession; ids: number[] } | undefined,
  ): Promise<Trajectory> {
    const t0 = performance.now();
    const o = this.opts;
    const renderer = this.newRenderer();
    const eos = renderer.eosId;
    const promptIds = renderer.start(first, start?.ids);
    const traj: Trajectory = {
      envId: task.envId,
      taskIndex: (resetInfo.taskIndex as number | undefined) ?? (task.reset.options?.taskIndex as number | undefined),
      seed: task.reset.seed,
      groupIndex,
      tools: first.tools ?? [],
      prompt: [...first.messages],
      segments: [],
      turns: [],
      reward: 0,
      rewards: [],
      info: resetInfo,
      endReason: "terminated",
      drift: [],
      policyVersion: this.sampler.policyVersion,
      prefillTokens: 0,
      sampledTokens: 0,
      wallMs: 0,
    };
    let seg: TrajectorySegment = { tokens: [...promptIds], lossMask: new Uint8Array(0), behaviourLogprobs: new Float32Array(0), policyVersion: Infinity };
    let mask: number[] = new Array(promptIds.length).fill(0);
    let lps: number[] = new Array(promptIds.length).fill(0);
    // The segment's pin flags (with a pin rule): the prompt's are those its session was given, whole or in parts.
    let pins: number[] = [...(this.pinsFor(promptIds, 0, 0) ?? [])];
    let pinCount = countOnes(pins);
    /** Flags of tokens appended to the segment now (recorded), or undefined without a pin rule. */
    const pinAppended = (ids: number[]): Uint8Array | undefined => {
      const flags = this.pinsFor(ids, seg.tokens.length, pinCount);
      if (flags) {
        pins.push(...flags);
        pinCount += countOnes(flags);
      }
      return flags;
    };
    const closeSegment = () => {
      seg.lossMask = Uint8Array.from(mask);
      seg.behaviourLogprobs = Float32Array.from(lps);
      if (o.pins) seg.pinned = Uint8Array.from(pins);
      if (!Number.isFinite(seg.policyVersion)) seg.policyVersion = traj.policyVersion;
      traj.segments.push(seg);
    };
    let session: EngineSession | undefined = start?.session;
    const end = (reason: EndReason, error?: string) => {
      traj.endReason = reason;
      if (error !== undefined) traj.error = error;
    };
    try {
      if (promptIds.length >= o.maxContextTokens) {
        end("truncated_context");
        return traj;
      }
      if (o.mode === "incremental" && !session) {
        session = await this.openSession(promptIds, o.pins ? Uint8Array.from(pins) : undefined);
        this.stats.prefillTokens += promptIds.length;
        traj.prefillTokens += promptIds.length;
      }
      let inputStart = 0;
      for (let turn = 0; ; turn++) {
        if (turn >= o.maxTurns) {
          end("truncated_turns");
          break;
        }
        const room = o.maxContextTokens - seg.tokens.length;
        const maxTokens = Math.min(o.maxTokensPerTurn, room);
        if (maxTokens < 1) {
          end("truncated_context");
          break;
        }
        const params: SampleParams = {
          temperature: o.temperature,
          topP: o.topP,
          topK: o.topK,
          maxTokens,
          stopTokens: [eos],
          seed: mixSeedParts(o.seed, task.reset.seed ?? 0, groupIndex, turn),
        };
        const ts = performance.now();
        let current = session;
        if (o.mode === "recompute") {
          current = await this.openSession(seg.tokens, o.pins ? Uint8Array.from(pins) : undefined);
          this.stats.prefillTokens += seg.tokens.length;
          traj.prefillTokens += seg.tokens.length;
        }
        let res;
        try {
          res = await this.decoder.sample(current!, params);
        } finally {
          if (o.mode === "recompute") current!.close();
        }
        const sampleMs = performance.now() - ts;
        const sampleStart = seg.tokens.length;
        seg.tokens.push(...res.tokens);
        for (let i = 0; i < res.tokens.length; i++) {
          mask.push(1);
          lps.push(res.logprobs[i]!);
          if (o.pins) pins.push(0);
        }
        seg.policyVersion = Math.min(seg.policyVersion, res.policyVersion);
        traj.policyVersion = Math.min(traj.policyVersion, res.policyVersion);
        traj.sampledTokens += res.tokens.length;
        this.stats.sampledTokens += res.tokens.length;
        const ended = res.tokens[res.tokens.length - 1] === eos;
        const text = this.codec.decode(ended ? res.tokens.slice(0, -1) : res.tokens);
        const parsed = this.parser.parse(text, `call_${turn}_`);
        const record: TurnRecord = {
          segment: traj.segments.length,
          inputStart,
          sampleStart,
          sampleEnd: seg.tokens.length,
          policyVersion: res.policyVersion,
          text,
          content: parsed.content,
          toolCalls: parsed.toolCalls,
          malformedCalls: parsed.malformed,
          ...(parsed.errors.length > 0 ? { parseErrors: parsed.errors } : {}),
          observation: [],
          reward: 0,
          finishReason: res.finishReason,
          sampleMs,
          envMs: 0,
        };
        traj.turns.push(record);
        let held = res.tokens;
        if (!ended) {
          const byContext = maxTokens < o.maxTokensPerTurn || seg.tokens.length + 1 >= o.maxContextTokens;
          if (byContext || o.turnLimit === "end") {
            end(byContext ? "truncated_context" : "truncated_turn_tokens");
            break;
          }
          // Close the turn as the template would: the end-of-turn token, given, not sampled.
          const eosPin = pinAppended([eos]);
          seg.tokens.push(eos);
          mask.push(0);
          lps.push(0);
          held = [...res.tokens, eos];
          if (o.mode === "incremental") {
            await this.append(session!, [eos], eosPin);
            this.stats.prefillTokens += 1;
            traj.prefillTokens += 1;
          }
        }
        const te = performance.now();
        const [obs, reward, terminated, truncated, info] = await env.step({ content: parsed.content, toolCalls: parsed.toolCalls });
        record.envMs = performance.now() - te;
        record.observation = obs.messages;
        record.reward = reward;
        traj.rewards.push(reward);
        traj.reward += reward;
        traj.info = info;
        if (terminated || truncated) {
          end(terminated ? "terminated" : "truncated_env");
          break;
        }
        if (turn + 1 >= o.maxTurns) {
          // No turn follows: the observation is recorded in the turn, not encoded and prefilled.
          end("truncated_turns");
          break;
        }
        const assistant: AssistantMessage = { role: "assistant", content: parsed.content, ...(parsed.toolCalls.length ? { toolCalls: parsed.toolCalls } : {}) };
        const ext = renderer.extend(held, assistant, obs.messages as ChatMessage[]);
        if (ext.kind !== "extend") traj.drift.push(ext.drift);
        if (ext.kind === "split") {
          closeSegment();
          seg = { tokens: [...ext.ids], lossMask: new Uint8Array(0), behaviourLogprobs: new Float32Array(0), policyVersion: Infinity };
          mask = new Array(ext.ids.length).fill(0);
          lps = new Array(ext.ids.length).fill(0);
          pins = [...(this.pinsFor(ext.ids, 0, 0) ?? [])];
          pinCount = countOnes(pins);
          inputStart = 0;
          if (ext.ids.length >= o.maxContextTokens) {
            end("truncated_context");
            break;
          }
          if (o.mode === "incremental") {
            session?.close();
            session = await this.openSession(ext.ids, o.pins ? Uint8Array.from(pins) : undefined);
            this.stats.prefillTokens += ext.ids.length;
            traj.prefillTokens += ext.ids.length;
          }
          continue;
        }
        if (seg.tokens.length + ext.ids.length >= o.maxContextTokens) {
          end("truncated_context");
          break;
        }
        inputStart = seg.tokens.length;
        const extPins = pinAppended(ext.ids);
        seg.tokens.push(...ext.ids);
        for (let i = 0; i < ext.ids.length; i++) {
          mask.push(0);
          lps.push(0);
        }
        if (o.mode === "incremental") {
          await this.append(session!, ext.ids, extPins);
          this.stats.prefillTokens += ext.ids.length;
          traj.prefillTokens += ext.ids.length;
        }
      }
    } catch (err) {
      end("error", err instanceof Error ? err.message : String(err));
    } finally {
      session?.close();
      closeSegment();
      traj.wallMs = performance.now() - t0;
      this.stats.trajectories++;
    }
    return traj;
  }
}

function countOnes(flags: ArrayLike<number>): number {
  let n = 0;
  for (let i = 0; i < flags.length; i++) n += flags[i] ? 1 : 0;
  return n;
}
