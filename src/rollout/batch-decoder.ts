/**
 * The batch decoder: collects the sample requests of every trajectory that is ready to decode and
 * sends them to the engine as one `sampleBatch`, so that many trajectories share each decoding step
 * while the others wait on their environments. A call does not wait for the previous one to end (up
 * to `maxCalls` at once): the engine decodes the requests of all of them together.
 *
 * It is also the one place where weights change during sampling: `swapWeights(fn)` waits for the
 * calls in progress, runs `fn` (an optimizer step, a checkpoint load) with decoding paused, and
 * resumes. Sessions and their caches are kept; each result carries the policy version that sampled
 * it. It knows nothing of chat templates or environments.
 */
import type { Engine, EngineSession, SampleParams, SampleResult } from "../engine/index.js";

/** What the rollout needs from a policy: sessions, batched sampling and a version. */
export type Sampler = Pick<Engine, "session" | "sampleBatch" | "policyVersion">;

export interface VersionedSample extends SampleResult {
  policyVersion: number;
}

interface Pending {
  session: EngineSession;
  params: SampleParams;
  resolve: (r: VersionedSample) => void;
  reject: (e: unknown) => void;
}

export interface DecoderStats {
  /** sampleBatch calls. */
  steps: number;
  /** Requests served. */
  requests: number;
  /** Largest batch. */
  maxBatch: number;
}

export class BatchDecoder {
  private queue: Pending[] = [];
  private draining = false;
  /** sampleBatch calls in progress (each settles its own requests and never rejects). */
  private readonly calls = new Set<Promise<void>>();
  private gate: Promise<void> | undefined;
  readonly stats: DecoderStats = { steps: 0, requests: 0, maxBatch: 0 };

  constructor(
    readonly sampler: Sampler,
    /** At most this many sessions per `sampleBatch`. */
    readonly maxBatch = 64,
    /** At most this many `sampleBatch` calls in progress at once. */
    readonly maxCalls = 8,
  ) {
    if (!Number.isInteger(maxBatch) || maxBatch < 1) throw new RangeError(`maxBatch must be a positive integer, got ${maxBatch}`);
    if (!Number.isInteger(maxCalls) || maxCalls < 1) throw new RangeError(`maxCalls must be a positive integer, got ${maxCalls}`);
  }

  /** Samples from one session, batched with every other request made in the same tick. */
  sample(session: EngineSession, params: SampleParams): Promise<VersionedSample> {
    return new Promise((resolve, reject) => {
      this.queue.push({ session, params, resolve, reject });
      if (!this.draining) {
        this.draining = true;
        setImmediate(() => void this.drain());
      }
    });
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        while (this.gate) await this.gate;
        // A call does not wait for the one before it to end: the engine decodes the requests of every
        // call in progress together, so a trajectory that is ready joins the next decoding step rather
        // than waiting for the longest turn of an earlier batch.
        if (this.calls.size >= this.maxCalls) {
          await Promise.race(this.calls);
          continue;
        }
        const batch = this.queue.splice(0, this.maxBatch);
        const version = this.sampler.policyVersion;
        this.stats.steps++;
        this.stats.requests += batch.length;
        this.stats.maxBatch = Math.max(this.stats.maxBatch, batch.length);
        const call = this.sampler
          .sampleBatch(
            batch.map((p) => p.session),
            batch.map((p) => p.params),
          )
          .then(
            (results) => batch.forEach((p, i) => p.resolve({ ...results[i]!, policyVersion: version })),
            (err: unknown) => batch.forEach((p) => p.reject(err)),
          );
        this.calls.add(call);
        void call.then(() => this.calls.delete(call));
        // Let trajectories whose environments answered at once join this tick's call.
        if (this.queue.length === 0) await new Promise((r) => setImmediate(r));
      }
    } finally {
      this.draining = false;
    }
  }

  /** Runs `fn` between decoding steps (e.g. an optimizer step); sessions are kept. */
  async swapWeights<T>(fn: () => Promise<T> | T): Promise<T> {
    while (this.gate) await this.gate;
    let open!: () => void;
    this.gate = new Promise<void>((r) => (open = r));
    try {
      await Promise.all(this.calls);
      return await fn();
    } finally {
      this.gate = undefined;
      open();
    }
  }
}
