/**
 * The session recorder: one agent episode seen through its chat-completion calls, assembled into a
 * token-exact trajectory.
 *
 * Each call's messages and tools are rendered by the model's chat template. When that rendering starts
 * with the exact text of what the trajectory already holds (the previous call's prompt and the
 * completion it sampled, as sampled), the call extends the trajectory: the held tokens are kept as they
 * are, only the new text (the template's close of the assistant turn, tool results, the generation
 * prompt) is encoded, and it is appended to the same engine session, whose KV cache is kept, as the
 * agent loop does. When it does not (the agent edited, dropped or reordered history, changed the tools,
 * or the template rewrites earlier turns) the trajectory splits: a new segment starts from the call's
 * full prompt, and the split is counted and reported with where the texts differ. The history is never
 * re-tokenized in place.
 *
 * With n choices, each choice is a candidate continuation; the next call continues the one its prompt
 * extends (the others stay in the call log only). The last call's first choice ends the trajectory.
 *
 * This file knows no HTTP: the server (server.ts) validates requests and hands it plain messages.
 */
import type { ChatMessage, ToolCall, ToolSpec } from "../core/index.js";
import type { EngineSession, SampleParams } from "../engine/index.js";
import type { ChatTemplate } from "../model/index.js";
import type { TokenCodec } from "../model/index.js";
import type { BatchDecoder, DriftReport, PolicySampler, ToolCallParser, Trajectory, TrajectorySegment, TurnRecord } from "../rollout/index.js";

/** One call as the recorder needs it: validated messages, tools and sampling settings. */
export interface CallRequest {
  messages: ChatMessage[];
  tools: ToolSpec[] | undefined;
  params: SampleParams;
  n: number;
  /** Stop strings: sampling stops at the first, which is not part of the reply. */
  stop: string[];
  /** The model name the client sent (recorded only). */
  model?: string;
}

export interface ChoiceRecord {
  /** The sampled ids kept in the trajectory (with the end-of-turn token when one was sampled). */
  tokens: number[];
  logprobs: number[];
  policyVersion: number;
  /** The sampled text (without the end-of-turn token), the reply content and its parsed tool calls. */
  text: string;
  content: string;
  toolCalls: ToolCall[];
  malformedCalls: number;
  finishReason: "stop" | "length";
  /** Tokens sampled past a stop string and dropped (not in the trajectory). */
  droppedTokens: number;
}

export interface CallRecord {
  index: number;
  model: string | undefined;
  messages: ChatMessage[];
  tools: ToolSpec[] | undefined;
  params: SampleParams & { n: number; stop: string[] };
  /** How the call joined the trajectory: the first call, extending the previous one, or a split. */
  join: "start" | "extend" | "split";
  /** The segment holding the call's prompt and where its prompt's ids lie: [0, promptEnd). */
  segment: number;
  promptTokens: number;
  /** Prompt ids computed by the engine for this call (new ids only, when it extended). */
  prefillTokens: number;
  /** Which choice a later call continued (undefined for the last call: choice 0 ends the trajectory). */
  continued: number | undefined;
  choices: ChoiceRecord[];
  sampleMs: number;
}

export interface SplitReport extends DriftReport {
  /** The call whose prompt did not extend the trajectory. */
  call: number;
}

interface LiveSegment {
  tokens: number[];
  mask: number[];
  lps: number[];
  versions: number[];
  /** The text of `tokens` (the last call's rendered prompt, plus nothing sampled yet). */
  text: string;
  /** The messages of the segment's latest call, and where that call's prompt ends. */
  messages: ChatMessage[];
  promptEnd: number;
  turns: TurnRecord[];
}

interface Branch {
  session: EngineSession;
  choice: ChoiceRecord;
  /** The held text: the segment's text plus this choice's sampled text, as decoded. */
  text: string;
  sampleMs: number;
}

export interface RecorderDeps {
  decoder: BatchDecoder;
  sampler: PolicySampler;
  codec: TokenCodec;
  template: ChatTemplate;
  parser: ToolCallParser;
  templateVars?: Record<string, unknown>;
}

/** The text of ids; "" for none (a reply that is only the end-of-turn token). */
function decode(codec: TokenCodec, ids: number[]): string {
  return ids.length === 0 ? "" : codec.decode(ids);
}

/**
 * The ids of `text` that follows `held`: after the end-of-turn token that ends a sampled turn, encoded
 * as a full encode sees it (a token with rstrip, as Phi-3's `<|end|>`, eats the newline after it, and a
 * tokenizer that prefixes a space to its input does not do so mid-text), as the rollout's renderer does.
 */
function encodeAfter(codec: TokenCodec, endOfTurn: string | undefined, held: string, text: string): number[] {
  if (!endOfTurn || !held.endsWith(endOfTurn)) return codec.encode(text);
  const ids = codec.encode(endOfTurn + text);
  const end = codec.tokenId(endOfTurn);
  if (ids[0] !== end) throw new Error(`the end-of-turn token ${JSON.stringify(endOfTurn)} does not encode to its own id; the tokenizer and the chat template disagree`);
  return ids.slice(1);
}

function firstDifference(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a.charCodeAt(i) !== b.charCodeAt(i)) return i;
  return n;
}

/** A segment's messages: its latest call's messages and the reply that call sampled, when recorded. */
function withReply(s: LiveSegment): ChatMessage[] {
  const last = s.turns[s.turns.length - 1];
  if (!last || last.sampleStart < s.promptEnd) return s.messages;
  return [...s.messages, { role: "assistant", content: last.content, ...(last.toolCalls.length ? { toolCalls: last.toolCalls } : {}) }];
}

export class SessionRecorder {
  readonly calls: CallRecord[] = [];
  readonly splits: SplitReport[] = [];
  private readonly done: LiveSegment[] = [];
  private live: LiveSegment | undefined;
  /** The previous call's choices, waiting for the next call to continue one of them. */
  private branches: Branch[] = [];
  /** Sessions to close with the live segment (the root of forked choices). */
  private roots: EngineSession[] = [];
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  reward: number | undefined;
  rewardInfo: Record<string, unknown> = {};
  readonly startedAt = Date.now();
  prefillTokens = 0;
  sampledTokens = 0;

  constructor(
    readonly id: string,
    private readonly deps: RecorderDeps,
  ) {}

  /** Runs one call after the session's earlier calls have finished (calls of one session are ordered). */
  call(req: CallRequest, promptText: string, signal: AbortSignal): Promise<CallRecord> {
    const run = this.queue.then(() => this.callNow(req, promptText, signal));
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** The call itself: extend the held trajectory or split, then sample the choices. */
  private async callNow(req: CallRequest, full: string, signal: AbortSignal): Promise<CallRecord> {
    if (this.closed) throw new Error(`session ${this.id} was deleted`);
    const codec = this.deps.codec;
    const index = this.calls.length;
    const match = this.branches.findIndex((b) => full.startsWith(b.text));
    let join: CallRecord["join"];
    let prefill: number[];
    let session: EngineSession;
    if (this.live && match >= 0) {
      const b = this.branches[match]!;
      this.commit(b, match);
      for (const other of this.branches) if (other !== b) other.session.close();
      this.branches = [];
      join = "extend";
      prefill = encodeAfter(codec, this.deps.template.endOfTurn, b.text, full.slice(b.text.length));
      session = b.session;
      await session.append(prefill);
    } else {
      if (this.live) {
        const held = this.branches[0]?.text ?? this.live.text;
        const offset = firstDifference(full, held);
        this.splits.push({
          call: index,
          turn: this.live.turns.length,
          offset,
          held: held.slice(Math.max(0, offset - 40), offset + 80),
          rendered: full.slice(Math.max(0, offset - 40), offset + 80),
        });
        this.endSegment();
      }
      join = this.done.length === 0 ? "start" : "split";
      prefill = codec.encode(full);
      this.live = { tokens: [], mask: [], lps: [], versions: [], text: "", messages: [], promptEnd: 0, turns: [] };
      session = await this.deps.sampler.session(prefill);
    }
    const seg = this.live!;
    seg.tokens.push(...prefill);
    for (let i = 0; i < prefill.length; i++) {
      seg.mask.push(0);
      seg.lps.push(0);
      seg.versions.push(-1);
    }
    seg.text = full;
    seg.messages = req.messages;
    seg.promptEnd = seg.tokens.length;
    this.prefillTokens += prefill.length;
    const record: CallRecord = {
      index,
      model: req.model,
      messages: req.messages,
      tools: req.tools,
      params: { ...req.params, n: req.n, stop: req.stop },
      join,
      segment: this.done.length,
      promptTokens: seg.tokens.length,
      prefillTokens: prefill.length,
      continued: undefined,
      choices: [],
      sampleMs: 0,
    };
    const sessions = req.n === 1 ? [session] : Array.from({ length: req.n }, () => session.fork());
    if (req.n > 1) this.roots.push(session);
    const t0 = performance.now();
    const results = await Promise.allSettled(sessions.map((s, i) => this.sample(s, req, i, index, signal)));
    record.sampleMs = performance.now() - t0;
    const failed = results.find((r) => r.status === "rejected");
    if (failed) {
      // The session's state is unknown: end the segment so that the next call starts a new one.
      for (const s of sessions) s.close();
      this.endSegment();
      throw (failed as PromiseRejectedResult).reason;
    }
    record.choices = results.map((r) => (r as PromiseFulfilledResult<ChoiceRecord>).value);
    this.branches = record.choices.map((choice, i) => ({ session: sessions[i]!, choice, text: full + decode(codec, choice.tokens), sampleMs: record.sampleMs }));
    this.calls.push(record);
    for (const c of record.choices) this.sampledTokens += c.tokens.length;
    return record;
  }

  /** Samples one choice; with stop strings, in chunks, dropping what follows the first stop string. */
  private async sample(s: EngineSession, req: CallRequest, i: number, callIndex: number, signal: AbortSignal): Promise<ChoiceRecord> {
    const codec = this.deps.codec;
    const p = req.params;
    const start = s.length;
    const tokens: number[] = [];
    const logprobs: number[] = [];
    let version = Number.POSITIVE_INFINITY;
    let finish: "stop" | "length" = "length";
    let dropped = 0;
    const chunk = req.stop.length > 0 ? 8 : p.maxTokens;
    for (let step = 0; tokens.length < p.maxTokens; step++) {
      if (signal.aborted) throw new Error("the client went away");
      const seed = p.seed === undefined ? undefined : (p.seed + i * 1_000_003 + step * 7919) >>> 0;
      const r = await this.deps.decoder.sample(s, { ...p, maxTokens: Math.min(chunk, p.maxTokens - tokens.length), seed });
      tokens.push(...r.tokens);
      logprobs.push(...r.logprobs);
      version = Math.min(version, r.policyVersion);
      if (req.stop.length > 0) {
        const text = decode(codec, tokens);
        const at = Math.min(...req.stop.map((x) => (text.indexOf(x) < 0 ? Infinity : text.indexOf(x))));
        if (Number.isFinite(at)) {
          // Keep the longest run of tokens whose text lies wholly before the stop string.
          let keep = tokens.length;
          while (keep > 0 && codec.decode(tokens.slice(0, keep)).length > at) keep--;
          dropped = tokens.length - keep;
          tokens.length = keep;
          logprobs.length = keep;
          s.truncate(start + keep);
          finish = "stop";
          break;
        }
      }
      if (r.finishReason === "stop" || r.tokens.length === 0) {
        finish = "stop";
        break;
      }
    }
    const stops = p.stopTokens ?? [];
    const ended = tokens.length > 0 && stops.includes(tokens[tokens.length - 1]!);
    const text = decode(codec, ended ? tokens.slice(0, -1) : tokens);
    const parsed = this.deps.parser.parse(text, `call_${this.id.slice(-8)}_${callIndex}_${i}_`);
    // A call without a function name cannot be sent back in OpenAI's shape: it is not returned (counted
    // as malformed); the agent's next call then differs from what was sampled, and splits.
    const nameless = parsed.toolCalls.filter((c) => c.name === "").length;
    if (nameless > 0) parsed.toolCalls = parsed.toolCalls.filter((c) => c.name !== "");
    return {
      tokens,
      logprobs,
      policyVersion: Number.isFinite(version) ? version : this.deps.sampler.policyVersion,
      text,
      content: parsed.content,
      toolCalls: parsed.toolCalls,
      malformedCalls: parsed.malformed + nameless,
      finishReason: finish,
      droppedTokens: dropped,
    };
  }

  /** Writes a branch's sampled tokens into the live segment as a turn. */
  private commit(b: Branch, choiceIndex: number): void {
    const seg = this.live!;
    const c = b.choice;
    const call = this.calls[this.calls.length - 1]!;
    call.continued = choiceIndex;
    const sampleStart = seg.tokens.length;
    seg.tokens.push(...c.tokens);
    for (let i = 0; i < c.tokens.length; i++) {
      seg.mask.push(1);
      seg.lps.push(c.logprobs[i]!);
      seg.versions.push(c.policyVersion);
    }
    seg.text = b.text;
    seg.turns.push({
      segment: this.done.length,
      inputStart: sampleStart - call.prefillTokens,
      sampleStart,
      sampleEnd: seg.tokens.length,
      policyVersion: c.policyVersion,
      text: c.text,
      content: c.content,
      toolCalls: c.toolCalls,
      malformedCalls: c.malformedCalls,
      observation: [],
      reward: 0,
      finishReason: c.finishReason,
      sampleMs: b.sampleMs,
      envMs: 0,
    });
  }

  /** Ends the live segment: the previous call's first choice is its last turn; sessions are closed. */
  private endSegment(): void {
    if (!this.live) return;
    const first = this.branches[0];
    if (first) this.commit(first, 0);
    for (const b of this.branches) b.session.close();
    for (const r of this.roots) r.close();
    this.branches = [];
    this.roots = [];
    this.done.push(this.live);
    this.live = undefined;
  }

  /** Frees the engine sessions; later calls are refused. */
  close(): void {
    this.closed = true;
    for (const b of this.branches) b.session.close();
    for (const r of this.roots) r.close();
    this.branches = [];
    this.roots = [];
  }

  /**
   * The assembled trajectory, as the rollout's record (segments, turns, reward, splits as drift
   * reports), with the policy version of every token (-1 where the policy did not sample it) and each
   * segment's messages beside it. The last call's first choice is its final turn.
   */
  trajectory(): { trajectory: Trajectory; tokenPolicyVersions: number[][]; segmentMessages: ChatMessage[][] } {
    const segs = [...this.done];
    if (this.live) {
      const first = this.branches[0];
      const view: LiveSegment = { ...this.live, tokens: [...this.live.tokens], mask: [...this.live.mask], lps: [...this.live.lps], versions: [...this.live.versions], turns: [...this.live.turns] };
      if (first) {
        const c = first.choice;
        const sampleStart = view.tokens.length;
        view.tokens.push(...c.tokens);
        view.mask.push(...c.tokens.map(() => 1));
        view.lps.push(...c.logprobs);
        view.versions.push(...c.tokens.map(() => c.policyVersion));
        const last = this.calls[this.calls.length - 1]!;
        view.turns.push({
          segment: segs.length, inputStart: sampleStart - last.prefillTokens, sampleStart, sampleEnd: view.tokens.length, policyVersion: c.policyVersion,
          text: c.text, content: c.content, toolCalls: c.toolCalls, malformedCalls: c.malformedCalls, observation: [], reward: 0,
          finishReason: c.finishReason, sampleMs: first.sampleMs, envMs: 0,
        });
      }
      segs.push(view);
    }
    const segments: TrajectorySegment[] = segs.map((s) => {
      const sampled = s.versions.filter((v) => v >= 0);
      return {
        tokens: s.tokens,
        lossMask: Uint8Array.from(s.mask),
        behaviourLogprobs: Float32Array.from(s.lps),
        policyVersion: sampled.length ? Math.min(...sampled) : this.deps.sampler.policyVersion,
      };
    });
    const turns = segs.flatMap((s) => s.turns);
    const reward = this.reward ?? 0;
    const firstCall = this.calls[0];
    const trajectory: Trajectory = {
      envId: "gateway",
      taskIndex: undefined,
      seed: undefined,
      groupIndex: 0,
      tools: this.calls[this.calls.length - 1]?.tools ?? [],
      prompt: firstCall ? firstCall.messages : [],
      segments,
      turns,
      reward,
      rewards: this.reward === undefined ? [] : [reward],
      info: this.rewardInfo,
      endReason: "terminated",
      drift: this.splits.map(({ call: _call, ...d }) => d),
      policyVersion: segments.length ? Math.min(...segments.map((s) => s.policyVersion)) : this.deps.sampler.policyVersion,
      prefillTokens: this.prefillTokens,
      sampledTokens: turns.reduce((a, t) => a + t.sampleEnd - t.sampleStart, 0),
      wallMs: Date.now() - this.startedAt,
    };
    return { trajectory, tokenPolicyVersions: segs.map((s) => s.versions), segmentMessages: segs.map(withReply) };
  }
}
