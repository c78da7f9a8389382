/**
 * The torch engine: the engine primitives (../types.ts) served by a Python worker (python/, package
 * sinkflex_worker) that runs a Hugging Face checkpoint with PyTorch and transformers. It starts the worker
 * as a child process (launcher.ts) or connects to a running one (`url`), and talks binary frames
 * (frames.ts, client.ts; the protocol is python/README.md).
 *
 * Sessions keep their token ids here as well as in the worker, so `length`, `tokens()`, `fork()`,
 * `truncate()` and `close()` answer at once; their requests are sent without waiting and the worker runs
 * them in order, before any later request (a failure is reported by the session's next call).
 * `forwardBackward` keeps the loss in TypeScript: the worker's forward returns the per-token log-probs
 * (keeping its graph), the loss here returns dLoss/dLogprobs, the worker's backward applies them.
 *
 * The worker applies the embedded engine's attention: the checkpoint's sink-window mask and sink logits,
 * and per-sequence document ids and pinned positions (sent as arrays; python/sinkflex_worker/attention.py).
 * Under the sink-window mask its sessions evict as the embedded engine's do: each keeps its K sink slots,
 * its pinned positions (`append(tokens, { pinned })`) and its last W computed positions, so its KV memory
 * is constant in its length (`kvState()`); a session here mirrors its pinned positions and how far
 * eviction reached (each sample answer says), so `truncate` past evicted keys fails at once, as there.
 * This file does not know losses, rollouts or environments.
 */
import { resolve as resolvePath } from "node:path";
import { checkSampleBatch, EngineError } from "../embedded.js";
import { resolveHparams } from "../../model/index.js";
import type {
  Engine, EngineSession, OptimHparams, SampleParams, SampleResult, SequenceMasks, SessionPins, TokenLoss,
} from "../types.js";
import { TorchWorkerError, WorkerClient, type WorkerInfo } from "./client.js";
import type { FrameArray } from "./frames.js";
import { launchWorker, type LaunchedWorker, type LaunchOptions } from "./launcher.js";

export interface TorchEngineOptions extends LaunchOptions {
  /** Hugging Face checkpoint folder to load (a path the worker can read). */
  model: string;
  /** Connect to a running worker (`unix:/path.sock` or `tcp://host:port`) instead of starting one. */
  url?: string;
  /** Token for a worker that requires one. Default: $SINKFLEX_WORKER_TOKEN. */
  token?: string;
  /** The tokenizer files that go with the model (recorded for callers; the worker never tokenizes). */
  tokenizerDir?: string;
}

/** Starts (or connects to) a torch worker and loads `opts.model` into it. */
export async function openTorchEngine(opts: TorchEngineOptions): Promise<TorchEngine> {
  let worker: LaunchedWorker | null = null;
  let url = opts.url;
  if (!url) {
    worker = await launchWorker(opts);
    url = worker.address;
  }
  try {
    const { client, info } = await WorkerClient.connect(url, { token: opts.token ?? process.env.SINKFLEX_WORKER_TOKEN });
    if (worker) {
      const w = worker;
      client.explainEnd = () => w.waitExit(2000);
    }
    const engine = new TorchEngine(client, info, worker);
    engine.tokenizerDir = opts.tokenizerDir;
    await engine.load(worker ? resolvePath(opts.model) : opts.model);
    return engine;
  } catch (e) {
    worker?.stop();
    throw e;
  }
}

export class TorchEngine implements Engine {
  policyVersion = 0;
  /** Token ids 0..vocabSize-1 are valid (set by load). */
  vocabSize = 0;
  /** The model's parameter count and class (set by load). */
  parameters = 0;
  architecture = "";
  /** The checkpoint's attention as the worker runs it (set by load): sink window, sink logits, and the kernel chosen. */
  attention: WorkerAttention = { window: 0, sinks: 0, sinkLogit: false, kernel: "", why: "" };
  /** The tokenizer files that go with the model, when the caller named them. */
  tokenizerDir: string | undefined;
  /**
   * The sink profile the checkpoint was laid out with (its sinkflex_sink_profile.json, as written; set by
   * load), undefined without one. The worker writes it back with every save.
   */
  sinkProfile: Record<string, unknown> | undefined;
  /**
   * The LoRA adapter trained instead of the weights (set by load of an adapter folder, or enableLora);
   * null when every weight trains. Saves then write the adapter alone, in the embedded engine's PEFT files.
   */
  lora: WorkerLora | null = null;
  private usable = 0;
  private nextSid = 1;
  /** Counts loads: a load drops every session's keys in the worker (recomputed on next use), evictions included. */
  /** @internal */ generation = 0;
  private disposed = false;

  /** Use openTorchEngine. */
  constructor(
    /** @internal */ readonly client: WorkerClient,
    readonly info: WorkerInfo,
    private readonly worker: LaunchedWorker | null,
  ) {}

  /** The worker's process id (its own report). */
  get workerPid(): number {
    return this.info.pid;
  }

  async load(dir: string): Promise<void> {
    this.alive();
    const { header } = await this.client.call("load", { dir });
    this.vocabSize = header.vocabSize as number;
    this.policyVersion = header.policyVersion as number;
    this.parameters = header.parameters as number;
    this.architecture = header.architecture as string;
    this.attention = header.attention as WorkerAttention;
    this.sinkProfile = header.sinkProfile as Record<string, unknown> | undefined;
    this.lora = (header.lora as WorkerLora | undefined) ?? null;
    this.usable = 0;
    this.generation++;
  }

  /**
   * Trains a fresh LoRA adapter (peft: A kaiming-uniform, B = 0, so the policy starts as the loaded
   * weights) instead of the weights, on the targets' projections; the AdamW state starts over.
   */
  async enableLora(lora: { rank: number; alpha: number; targets: readonly string[] }): Promise<void> {
    this.alive();
    const { header } = await this.client.call("enable_lora", { rank: lora.rank, alpha: lora.alpha, targets: [...lora.targets] });
    this.lora = header.lora as WorkerLora;
  }

  /** The ids sampling may produce (0 .. usableTokens-1); the embedding's rows past them are padding. */
  get usableTokens(): number {
    return this.usable || this.vocabSize;
  }

  set usableTokens(n: number) {
    if (!(Number.isInteger(n) && n >= 1 && n <= this.vocabSize)) {
      throw new EngineError(`usableTokens ${n}: the model has ${this.vocabSize} embedding rows; the tokenizer's id count must be between 1 and that`);
    }
    this.usable = n === this.vocabSize ? 0 : n;
  }

  /**
   * A fresh AdamW at the next step (moments and step count dropped). Sent without waiting, as the
   * embedded engine's is synchronous; the worker runs it before any later request, and a worker that
   * died meanwhile fails the next call.
   */
  resetOptimizer(): void {
    this.alive();
    this.client.call("reset_optimizer").catch(() => {});
  }

  async session(prefix: number[] = []): Promise<EngineSession> {
    this.alive();
    this.checkIds(prefix, "session prefix");
    const s = new TorchSession(this, this.nextSid++, [...prefix]);
    await this.client.call("open", { sid: s.sid }, { tokens: Int32Array.from(prefix) });
    return s;
  }

  async sampleBatch(sessions: EngineSession[], params: SampleParams[]): Promise<SampleResult[]> {
    this.alive();
    const { list, ps } = checkSampleBatch(sessions, params, (s) => this.own(s), (s) => s.ready());
    if (list.length === 0) return [];
    const stops = ps.map((p) => [...p.stopTokens]);
    for (const s of list) s.busy = true;
    try {
      const { header, arrays } = await this.client.call(
        "sample",
        {
          sids: list.map((s) => s.sid),
          params: ps.map((p, i) => ({
            temperature: p.temperature, topP: p.topP, topK: p.topK, maxTokens: p.maxTokens,
            ...(p.seed === undefined ? {} : { seed: p.seed }), stopCount: stops[i]!.length,
            ...(this.usable ? { limit: this.usable } : {}),
          })),
        },
        { stop: Int32Array.from(stops.flat()) },
      );
      const counts = header.counts as number[];
      const finish = header.finish as ("stop" | "length")[];
      const evictedTo = header.evictedTo as number[] | undefined;
      const toks = arrays.get("tokens")!;
      const lps = arrays.get("logprobs")!;
      let off = 0;
      return list.map((s, i) => {
        const n = counts[i]!;
        const tokens = Array.from(toks.subarray(off, off + n));
        const logprobs = Array.from(lps.subarray(off, off + n));
        off += n;
        s.tokenList.push(...tokens);
        s.evictedTo = evictedTo?.[i] ?? 0;
        s.evictedGeneration = this.generation;
        return { tokens, logprobs, finishReason: finish[i]! };
      });
    } finally {
      for (const s of list) s.busy = false;
    }
  }

  async logprobs(sequences: number[][], masks: SequenceMasks = {}): Promise<Float32Array[]> {
    this.alive();
    if (sequences.length === 0) return [];
    const { arrays } = await this.client.call("logprobs", {}, this.pack(sequences, masks));
    return this.split(arrays.get("logprobs") as Float32Array, sequences);
  }

  async forwardBackward(
    sequences: number[][], loss: TokenLoss, masks: SequenceMasks = {},
  ): Promise<{ loss: number; metrics: Record<string, number> }> {
    this.alive();
    if (sequences.length === 0) throw new EngineError("forwardBackward: no sequences");
    const { header, arrays } = await this.client.call("forward", {}, this.pack(sequences, masks));
    const handle = header.handle as number;
    const lps = this.split(arrays.get("logprobs") as Float32Array, sequences);
    let dLogprob: Float32Array;
    let out: ReturnType<TokenLoss>;
    try {
      out = loss(lps);
      dLogprob = this.checkGradient(out, lps, masks);
    } catch (e) {
      await this.client.call("release").catch(() => {});
      throw e;
    }
    await this.client.call("backward", { handle }, { dlogprobs: dLogprob });
    const N = sequences.reduce((a, s) => a + s.length, 0);
    return { loss: out.loss, metrics: { ...(out.metrics ?? {}), tokens: N, sequences: sequences.length } };
  }

  async optimStep(hparams: OptimHparams): Promise<{ gradNorm: number }> {
    this.alive();
    const h = resolveHparams(hparams);
    const { header } = await this.client.call("optim_step", { ...h });
    this.policyVersion = header.policyVersion as number;
    return { gradNorm: header.gradNorm as number };
  }

  /**
   * Writes a Hugging Face checkpoint folder (written by the worker: a path on its machine); with
   * `optimizer`, the AdamW state as well (sinkflex_optimizer.pt, read back by load).
   */
  async save(dir: string, options: { optimizer?: boolean } = {}): Promise<void> {
    this.alive();
    await this.client.call("save", { dir: this.worker ? resolvePath(dir) : dir, optimizer: options.optimizer ?? false });
  }

  /** Closes the connection and stops a worker this engine started. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.client.close();
    this.worker?.stop();
  }

  // ---- internals ------------------------------------------------------------------------------------

  /** @internal */ send(s: TorchSession, op: string, header: Record<string, unknown>, arrays: Record<string, FrameArray> = {}): void {
    this.client.call(op, { ...header, sid: s.sid }, arrays).catch((e: unknown) => {
      s.failure ??= e instanceof Error ? e : new TorchWorkerError(String(e));
    });
  }

  /** @internal */ newSid(): number {
    return this.nextSid++;
  }

  /** @internal */ alive(): void {
    if (this.disposed) throw new EngineError("the engine was disposed; create a new one");
    if (this.client.closed) {
      const why = this.worker?.exitReason();
      throw new EngineError(why ? `${why}; open a new engine (a run continues from its last checkpoint with --resume)` : "the connection to the torch worker is closed; open a new engine");
    }
  }

  /** @internal */ checkIds(ids: number[], what: string): void {
    for (const id of ids) {
      if (!(Number.isInteger(id) && id >= 0 && id < this.vocabSize)) throw new EngineError(`${what}: token id ${id} is outside the vocabulary [0, ${this.vocabSize})`);
    }
  }

  private own(s: EngineSession): TorchSession {
    if (!(s instanceof TorchSession) || s.engine !== this) {
      throw new EngineError("this session belongs to another engine; create it with this engine's session()");
    }
    return s;
  }

  private pack(sequences: number[][], masks: SequenceMasks): Record<string, FrameArray> {
    sequences.forEach((s, i) => {
      if (s.length === 0) throw new EngineError(`sequence ${i} is empty`);
      this.checkIds(s, `sequence ${i}`);
    });
    const out: Record<string, FrameArray> = {
      tokens: Int32Array.from(sequences.flat()),
      lengths: Int32Array.from(sequences.map((s) => s.length)),
    };
    for (const [what, arrs] of [["docIds", masks.docIds], ["pinned", masks.pinned]] as const) {
      if (!arrs) continue;
      if (arrs.length !== sequences.length) throw new EngineError(`${what}: ${arrs.length} arrays for ${sequences.length} sequences`);
      arrs.forEach((a, i) => {
        if (a.length !== sequences[i]!.length) throw new EngineError(`${what}[${i}] has ${a.length} values for a sequence of ${sequences[i]!.length} tokens`);
      });
      out[what] = Int32Array.from(arrs.flatMap((a) => Array.from(a)));
    }
    if (masks.scored) {
      if (masks.scored.length !== sequences.length) throw new EngineError(`scored: ${masks.scored.length} arrays for ${sequences.length} sequences`);
      masks.scored.forEach((a, i) => {
        if (a.length !== sequences[i]!.length - 1) throw new EngineError(`scored[${i}] has ${a.length} values for a sequence of ${sequences[i]!.length} tokens (one per prediction: length - 1)`);
      });
      out.scored = Int32Array.from(masks.scored.flatMap((a) => Array.from(a)));
    }
    return out;
  }

  private split(flat: Float32Array, sequences: number[][]): Float32Array[] {
    let off = 0;
    return sequences.map((s) => {
      const n = s.length - 1;
      const a = flat.slice(off, off + n);
      off += n;
      return a;
    });
  }

  private checkGradient(out: ReturnType<TokenLoss>, lps: Float32Array[], masks: SequenceMasks): Float32Array {
    if (!Number.isFinite(out.loss)) throw new EngineError(`forwardBackward: the loss is ${out.loss}; check the loss function and data`);
    if (!Array.isArray(out.dLogprobs) || out.dLogprobs.length !== lps.length) {
      throw new EngineError(`forwardBackward: the loss returned ${out.dLogprobs?.length} gradient arrays for ${lps.length} sequences`);
    }
    const flat = new Float32Array(lps.reduce((a, l) => a + l.length, 0));
    let off = 0;
    out.dLogprobs.forEach((d, i) => {
      if (d.length !== lps[i]!.length) {
        throw new EngineError(`forwardBackward: dLogprobs[${i}] has ${d.length} values, expected ${lps[i]!.length} (sequence length - 1)`);
      }
      const scored = masks.scored?.[i];
      for (let t = 0; t < d.length; t++) {
        if (!Number.isFinite(d[t]!)) throw new EngineError(`forwardBackward: dLogprobs[${i}][${t}] is ${d[t]}; check the loss`);
        if (scored && d[t] !== 0 && !scored[t]) throw new EngineError(`forwardBackward: dLogprobs[${i}][${t}] is ${d[t]}, but masks.scored leaves that prediction out; score it or give it no gradient`);
      }
      flat.set(d, off);
      off += d.length;
    });
    return flat;
  }
}

/** The attention the worker runs a checkpoint with (its load answer). */
export interface WorkerAttention {
  /** The sink-window settings from the checkpoint's sinkflex_attention.json ({0, 0} = full attention). */
  window: number;
  sinks: number;
  /** Whether the checkpoint has the learnable per-head sink logit. */
  sinkLogit: boolean;
  /** "flex" (FlexAttention) or "eager" (an explicit mask), and why it was chosen. */
  kernel: string;
  why: string;
}

/** A LoRA adapter the worker trains (its load or enable_lora answer). */
export interface WorkerLora {
  rank: number;
  alpha: number;
  /** Short names: q, k, v, o, gate, up, down. */
  targets: string[];
  /** Trainable parameters. */
  trainable: number;
}

/** A KV-cache session held by the torch worker; its token ids are mirrored here. */
export class TorchSession implements EngineSession {
  closed = false;
  /** @internal */ busy = false;
  /** A request sent without waiting (fork, truncate, close) failed; the next call reports it. */
  /** @internal */ failure: Error | null = null;

  /** Pinned positions (ascending), as the worker holds them. */
  /** @internal */ pinnedList: number[] = [];
  /**
   * The worker evicted the keys of positions below this that are neither sink slots nor pinned (its last
   * sample answer said so), while `evictedGeneration` is the engine's load count (a load drops them all).
   */
  /** @internal */ evictedTo = 0;
  /** @internal */ evictedGeneration = 0;

  constructor(readonly engine: TorchEngine, /** @internal */ readonly sid: number, /** @internal */ readonly tokenList: number[]) {}

  /** The positions pinned by `append(tokens, { pinned })`, ascending. */
  get pinnedPositions(): readonly number[] {
    return this.pinnedList;
  }

  /**
   * What the worker holds for this session: `positions` whose keys and values it keeps (under the
   * sink-window mask its sink slots, pinned positions and last W computed ones), their `bytes` (every
   * layer), the tokens `cached` (computed), and `evictedTo` (see the field).
   */
  async kvState(): Promise<{ positions: number; bytes: number; cached: number; evictedTo: number }> {
    this.ready();
    const { header } = await this.engine.client.call("kv", { sid: this.sid });
    return { positions: header.positions as number, bytes: header.bytes as number, cached: header.cached as number, evictedTo: header.evictedTo as number };
  }

  get length(): number {
    return this.tokenList.length;
  }

  tokens(): number[] {
    return [...this.tokenList];
  }

  /**
   * Appends tokens (computed by the worker's next sample); `opts.pinned` pins some of them: under the
   * sink-window mask every later query keeps their keys and the session never evicts them.
   */
  async append(tokens: number[], opts: SessionPins = {}): Promise<void> {
    this.ready();
    const pinned = opts.pinned;
    if (pinned && pinned.length !== tokens.length) {
      throw new EngineError(`append: pinned has ${pinned.length} flags for ${tokens.length} tokens; give one 0/1 flag per token`);
    }
    if (tokens.length === 0) return;
    this.engine.checkIds(tokens, "append");
    const arrays: Record<string, FrameArray> = { tokens: Int32Array.from(tokens) };
    if (pinned) {
      const flags = Int32Array.from(Array.from(pinned, (f) => (f ? 1 : 0)));
      flags.forEach((f, i) => {
        if (f) this.pinnedList.push(this.tokenList.length + i);
      });
      arrays.pinned = flags;
    }
    this.tokenList.push(...tokens);
    try {
      await this.engine.client.call("append", { sid: this.sid }, arrays);
    } catch (e) {
      this.failure ??= e as Error;
      throw e;
    }
  }

  async sample(params: SampleParams): Promise<SampleResult> {
    return (await this.engine.sampleBatch([this], [params]))[0]!;
  }

  fork(): TorchSession {
    this.ready();
    const child = new TorchSession(this.engine, this.engine.newSid(), [...this.tokenList]);
    child.pinnedList = [...this.pinnedList];
    child.evictedTo = this.evictedTo;
    child.evictedGeneration = this.evictedGeneration;
    this.engine.send(this, "fork", { child: child.sid });
    return child;
  }

  truncate(n: number): void {
    this.ready();
    if (!(Number.isInteger(n) && n >= 0)) throw new EngineError(`truncate: n must be an integer >= 0 (got ${n})`);
    if (n >= this.tokenList.length) return;
    this.checkHeld(n);
    this.tokenList.length = n;
    while (this.pinnedList.length > 0 && this.pinnedList[this.pinnedList.length - 1]! >= n) this.pinnedList.pop();
    this.engine.send(this, "truncate", { n });
  }

  close(): void {
    if (this.closed) return;
    if (this.busy) throw new EngineError("the session is sampling; close it after sample() finishes");
    this.closed = true;
    if (!this.engine.client.closed) this.engine.send(this, "close", {});
  }

  /**
   * The worker's check, here so that it fails at once (the same rule and message as the worker's and the
   * embedded engine's): the query at n - 1, computed again next, reads positions n - W .. n - 2 besides
   * the sink slots and pinned ones, and they must not have been evicted.
   */
  private checkHeld(n: number): void {
    const { window, sinks } = this.engine.attention;
    if (window === 0 || n === 0 || this.evictedTo === 0 || this.evictedGeneration !== this.engine.generation) return;
    const pinned = new Set(this.pinnedList);
    const missing: number[] = [];
    for (let p = Math.max(0, n - window); p < n - 1; p++) if (p >= sinks && p < this.evictedTo && !pinned.has(p)) missing.push(p);
    if (missing.length === 0) return;
    const earliest = Math.min(this.tokenList.length, this.evictedTo + window);
    throw new EngineError(
      `truncate(${n}): the keys of positions ${missing[0]}..${missing[missing.length - 1]} were evicted from this session's KV cache (sink-window mask, window ${window}, sinks ${sinks}: a session keeps its sink slots, its pinned positions and its last ${window} positions), and continuing after position ${n - 1} needs them; truncate to ${earliest} or more tokens, or open a new session with the first ${n} tokens (it recomputes them)`,
    );
  }

  /** @internal */ ready(): void {
    this.engine.alive();
    if (this.closed) throw new EngineError("the session is closed");
    if (this.busy) throw new EngineError("the session is sampling; wait for sample() to finish (or fork it before sampling)");
    if (this.failure) throw new EngineError(`an earlier request of this session failed: ${this.failure.message}`);
  }
}
