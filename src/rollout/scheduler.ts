/**
 * The rollout scheduler: keeps many trajectories in flight and hands finished batches to a trainer,
 * with a bound on how far sampling may run ahead of training.
 *
 * Groups start while there is room (`maxInFlight` trajectories); while some trajectories wait on their
 * environments (HTTP, databases, sandboxes, a user simulator), the others decode together in the batch
 * decoder. Batches are `batchGroups` groups, yielded in order. Batch b may start sampling only once the
 * consumer has finished batch b - 1 - maxStaleness (it signals that by asking for the next batch), so
 * `maxStaleness: 0` is exactly synchronous: sample a batch, train on it, sample the next. Weights change
 * through `Rollout.decoder.swapWeights` between decoding steps. This file does not train.
 */
import type { GroupTask, Rollout } from "./agent-loop.js";
import type { Trajectory } from "./trajectory.js";

export interface SchedulerOptions {
  /** Trajectories in flight at once (a group counts G). Default 64. */
  maxInFlight?: number;
  /** Groups per batch. Default 1. */
  batchGroups?: number;
  /** Batches sampling may run ahead of the consumer; 0 = synchronous. Default 0. */
  maxStaleness?: number;
}

export interface RolloutBatch {
  index: number;
  /** groups[i] holds the G trajectories of the batch's i-th task, in task order. */
  groups: Trajectory[][];
}

class Signal {
  private waiters: (() => void)[] = [];
  wait(): Promise<void> {
    return new Promise((r) => this.waiters.push(r));
  }
  notify(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const r of w) r();
  }
}

export class RolloutScheduler {
  private readonly maxInFlight: number;
  private readonly batchGroups: number;
  private readonly maxStaleness: number;

  constructor(
    readonly rollout: Rollout,
    options: SchedulerOptions = {},
  ) {
    this.maxInFlight = options.maxInFlight ?? 64;
    this.batchGroups = options.batchGroups ?? 1;
    this.maxStaleness = options.maxStaleness ?? 0;
    for (const [k, v, min] of [
      ["maxInFlight", this.maxInFlight, 1],
      ["batchGroups", this.batchGroups, 1],
      ["maxStaleness", this.maxStaleness, 0],
    ] as const) {
      if (!Number.isInteger(v) || v < min) throw new RangeError(`scheduler option ${k} must be an integer >= ${min}, got ${v}`);
    }
  }

  /**
   * Plays the tasks, yielding batches in order. Asking for batch b + 1 tells the scheduler batch b is
   * consumed (trained on), which lets later batches start within the staleness bound.
   */
  async *batches(tasks: Iterable<GroupTask> | AsyncIterable<GroupTask>): AsyncGenerator<RolloutBatch> {
    const signal = new Signal();
    const done = new Map<number, Trajectory[][]>();
    const pendingGroups = new Map<number, number>();
    let consumed = 0;
    let inFlight = 0;
    let produced = 0;
    let finished = false;
    let stopped = false;
    let failure: unknown;
    /** Batches below this index have had every group started. */
    let started = 0;

    const producer = (async () => {
      let b = 0;
      let slot = 0;
      for await (const task of tasks as AsyncIterable<GroupTask>) {
        if (failure || stopped) break;
        const batch = b;
        const index = slot;
        while (!stopped && (batch - consumed > this.maxStaleness || (inFlight > 0 && inFlight + task.groupSize > this.maxInFlight))) await signal.wait();
        if (stopped) break;
        if (!done.has(batch)) done.set(batch, []);
        pendingGroups.set(batch, (pendingGroups.get(batch) ?? 0) + 1);
        inFlight += task.groupSize;
        void this.rollout
          .runGroup(task)
          .then(
            (trajs) => {
              done.get(batch)![index] = trajs;
            },
            (err) => {
              failure ??= err;
            },
          )
          .finally(() => {
            inFlight -= task.groupSize;
            pendingGroups.set(batch, pendingGroups.get(batch)! - 1);
            signal.notify();
          });
        slot++;
        if (slot === this.batchGroups) {
          slot = 0;
          b++;
          started = b;
          signal.notify();
        }
      }
      produced = b + (slot > 0 ? 1 : 0);
      finished = true;
      signal.notify();
    })();

    try {
      for (let next = 0; ; next++) {
        for (;;) {
          if (failure) throw failure;
          const ready = done.has(next) && pendingGroups.get(next) === 0 && (next < started || finished);
          if (ready) break;
          if (finished && next >= produced) {
            await producer;
            return;
          }
          await signal.wait();
        }
        const groups = done.get(next)!;
        done.delete(next);
        yield { index: next, groups };
        consumed = next + 1;
        signal.notify();
      }
    } finally {
      stopped = true;
      signal.notify();
    }
  }

  /**
   * Plays every task with up to `maxInFlight` trajectories at once (no staleness bound: for work with no
   * training in between, such as an evaluation); groups in task order. `onGroup` hears of each group
   * as it finishes (for progress).
   */
  async runAll(tasks: GroupTask[], onGroup?: (group: Trajectory[], index: number) => void): Promise<Trajectory[][]> {
    const out: Trajectory[][] = new Array(tasks.length);
    let inFlight = 0;
    const signal = new Signal();
    const running: Promise<void>[] = [];
    for (let i = 0; i < tasks.length; i++) {
      const task = tasks[i]!;
      while (inFlight > 0 && inFlight + task.groupSize > this.maxInFlight) await signal.wait();
      inFlight += task.groupSize;
      running.push(
        this.rollout
          .runGroup(task)
          .then((t) => {
            out[i] = t;
            onGroup?.(t, i);
          })
          .finally(() => {
            inFlight -= task.groupSize;
            signal.notify();
          }),
      );
    }
    await Promise.all(running);
    return out;
  }
}
