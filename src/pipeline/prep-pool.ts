/**
 * Data preparation spread over worker threads: reading every task's contents (to split the suites'
 * tasks), the suites' expert episodes and their SFT examples (rendering and tokenizing every
 * conversation) are CPU work that one thread would do alone while the other cores idle. The pool
 * splits each into jobs, runs them on up to `threads` workers, and puts the results back in order, so
 * the data is exactly what one thread produces: episode k of a suite still runs training task k with
 * seed `seed + k`. Calls may overlap (`planSuites` reads its suites at once): a worker serves their
 * jobs in turn, and each answer names its job.
 *
 * A worker starts with the bundled suites and imports the user modules this thread loaded
 * (user-modules.ts: `--import`, a config's `modules`), so their envs run there too. Envs registered
 * any other way (by the caller's own code, a Node preload) are not known in a worker, so their work
 * runs on this thread; so does everything when there is one core, or too little work to pay for
 * starting workers.
 */
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { bundledEnvIds } from "../envs/index.js";
import type { SftExample } from "../rl/index.js";
import { qwen3TokenizerDir } from "../model/index.js";
import type { Policy } from "./policy.js";
import { type PolicyTextSpec, type PrepJob, type PrepMessage } from "./prep-worker.js";
import { conversationToExample, type Conversation } from "./sft-data.js";
import { expertEpisodeCount, expertEpisodes, readTaskContents, type ContentsReader, type SuitePlan } from "./tasks.js";
import { userEnvIds, userModules, workerExecArgv } from "./user-modules.js";

/** Below this many expert episodes, or conversations to tokenize, the pool works on this thread. */
const MIN_PARALLEL_ITEMS = 1000;
/** Each worker gets about this many jobs of a kind, so that uneven jobs (suites' episode costs differ) even out. */
const JOBS_PER_WORKER = 8;

export interface PrepPoolOptions {
  /** Worker threads at most (default: the machine's cores, at most 4; 1 = everything on this thread). */
  threads?: number;
  /** Less work than this (expert episodes, or conversations to tokenize) stays on this thread (default 1000). */
  minParallelItems?: number;
}

export class PrepPool {
  readonly threads: number;
  private readonly minParallelItems: number;
  private workers: Worker[] = [];
  private nextId = 1;

  constructor(options: PrepPoolOptions = {}) {
    const threads = options.threads ?? Math.min(4, availableParallelism());
    if (!(Number.isInteger(threads) && threads >= 1)) throw new Error(`PrepPool: threads must be an integer >= 1, got ${threads}`);
    this.threads = threads;
    this.minParallelItems = options.minParallelItems ?? MIN_PARALLEL_ITEMS;
  }

  /**
   * Every plan's expert episodes (`count` per suite, or the plan's own `sftEpisodes`, as
   * `expertEpisodes` runs them), the kept ones as conversations in episode order, with the number of
   * failed episodes per suite.
   */
  async expertConversations(
    plans: readonly SuitePlan[],
    count: number,
    seed: number,
    onEpisodes?: (n: number) => void,
  ): Promise<{ kept: Conversation[]; failed: number }[]> {
    const total = plans.reduce((n, p) => n + expertEpisodeCount(p, count), 0);
    const parallel = this.threads > 1 && total >= this.minParallelItems;
    const inWorkers = workerEnvIds();
    const jobs: { suite: number; job: PrepJob & { kind: "episodes" } }[] = [];
    const local: number[] = [];
    plans.forEach((p, suite) => {
      const n = expertEpisodeCount(p, count);
      if (!parallel || !inWorkers.has(p.envId)) return local.push(suite);
      const pieces = Math.max(1, Math.min(Math.ceil(n / 50), Math.round((JOBS_PER_WORKER * this.threads * n) / total)));
      for (const { from, to } of evenRanges(n, pieces)) {
        jobs.push({ suite, job: { kind: "episodes", plan: { envId: p.envId, options: p.options, sftTasks: p.sftTasks, sftEpisodes: p.sftEpisodes, sftMistakes: p.sftMistakes }, count, seed, from, to } });
      }
    });
    const out = plans.map(() => ({ kept: [] as Conversation[], failed: 0 }));
    // The workers' jobs and this thread's suites at once; the first error rejects both.
    const here = async () => {
      for (const suite of local) {
        const { kept, failed } = await expertEpisodes(plans[suite]!, count, seed, () => onEpisodes?.(1));
        out[suite] = { kept: kept.map((e) => ({ messages: e.messages, tools: e.tools })), failed };
      }
    };
    const [results] = await Promise.all([this.runJobs(jobs.map((j) => j.job), onEpisodes), here()]);
    results.forEach((r, i) => {
      if (r.kind !== "episodes") throw new Error(`a data-preparation worker answered an episodes job with ${r.kind}`);
      const o = out[jobs[i]!.suite]!;
      for (const c of r.kept) o.kept.push(c);
      o.failed += r.failed;
    });
    return out;
  }

  /**
   * Every task's contents digest, in task order, as `readTaskContents` reads them: a `ContentsReader`
   * for `planSuites`. A generated task set makes each task as a reset first asks for it, so reading
   * them all is most of the suites' planning.
   */
  readonly taskContents: ContentsReader = async (envId, options, count, env) => {
    if (this.threads === 1 || count < this.minParallelItems || !workerEnvIds().has(envId)) return readTaskContents(envId, options, count, env);
    const jobs = evenRanges(count, JOBS_PER_WORKER * this.threads).map(({ from, to }): PrepJob => ({ kind: "contents", envId, options, from, to }));
    return (await this.runJobs(jobs)).flatMap((r) => {
      if (r.kind !== "contents") throw new Error(`a data-preparation worker answered a contents job with ${r.kind}`);
      return r.keys;
    });
  };

  /** The SFT example of every conversation, in order (as `conversationToExample` makes them). */
  async examples(policy: Policy, conversations: readonly Conversation[]): Promise<(SftExample & { drifted: boolean })[]> {
    if (this.threads === 1 || conversations.length < this.minParallelItems) return conversations.map((c) => conversationToExample(policy, c));
    const text = policyTextSpec(policy);
    const jobs = evenRanges(conversations.length, JOBS_PER_WORKER * this.threads).map(
      ({ from, to }): PrepJob => ({ kind: "examples", text, conversations: conversations.slice(from, to) }),
    );
    const results = await this.runJobs(jobs);
    return results.flatMap((r) => {
      if (r.kind !== "examples") throw new Error(`a data-preparation worker answered an examples job with ${r.kind}`);
      return r.examples.map((e) => ({ tokens: Array.from(e.tokens), lossMask: e.lossMask, contextStart: e.contextStart, ...(e.untrained ? { untrained: e.untrained } : {}), drifted: e.drifted }));
    });
  }

  /** Stops the workers (the pool starts new ones if used again). Call it when done: a worker keeps the process alive. */
  async close(): Promise<void> {
    const workers = this.workers;
    this.workers = [];
    await Promise.all(workers.map((w) => w.terminate()));
  }

  /** Runs the jobs on the workers, each taking the next job when it finishes one; results in job order. */
  private async runJobs(jobs: PrepJob[], onTick?: (n: number) => void): Promise<PrepMessage[]> {
    if (jobs.length === 0) return [];
    while (this.workers.length < Math.min(this.threads, jobs.length)) {
      const worker = startWorker();
      // A worker that dies between jobs leaves the pool (an 'error' event with no listener would throw).
      worker.on("error", () => (this.workers = this.workers.filter((w) => w !== worker)));
      this.workers.push(worker);
    }
    const results: PrepMessage[] = new Array(jobs.length);
    let next = 0;
    let failed = false;
    const serve = async (worker: Worker): Promise<void> => {
      // After a failure no worker takes another job: the call is rejected anyway.
      while (next < jobs.length && !failed) {
        const index = next++;
        try {
          results[index] = await this.runOn(worker, jobs[index]!, onTick);
        } catch (err) {
          failed = true;
          throw err;
        }
      }
    };
    await Promise.all(this.workers.map(serve));
    return results;
  }

  private runOn(worker: Worker, job: PrepJob, onTick?: (n: number) => void): Promise<PrepMessage> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const done = () => {
        worker.off("message", onMessage);
        worker.off("error", onError);
        worker.off("exit", onExit);
      };
      const onMessage = (m: PrepMessage) => {
        if (m.id !== id) return;
        if (m.kind === "tick") return onTick?.(m.n);
        done();
        if (m.kind === "error") reject(new Error(`data preparation failed in a worker thread: ${m.message}`));
        else resolve(m);
      };
      // A worker that crashed or exited is dropped; the next call starts a new one.
      const dead = (message: string) => {
        done();
        this.workers = this.workers.filter((w) => w !== worker);
        reject(new Error(message));
      };
      const onError = (err: Error) => dead(`a data-preparation worker thread crashed: ${err.message}`);
      const onExit = (code: number) => dead(`a data-preparation worker thread exited (code ${code}) before finishing its job`);
      worker.on("message", onMessage);
      worker.on("error", onError);
      worker.on("exit", onExit);
      worker.postMessage({ id, job });
    });
  }
}

/** [0, n) cut into `pieces` consecutive ranges of nearly equal size, the empty ones left out. */
function evenRanges(n: number, pieces: number): { from: number; to: number }[] {
  const out: { from: number; to: number }[] = [];
  for (let j = 0; j < pieces; j++) {
    const from = Math.floor((j * n) / pieces);
    const to = Math.floor(((j + 1) * n) / pieces);
    if (to > from) out.push({ from, to });
  }
  return out;
}

/** The env ids a worker thread can make: the bundled ones and those of the user modules it imports. */
function workerEnvIds(): ReadonlySet<string> {
  return new Set([...bundledEnvIds(), ...userEnvIds()]);
}

/** A worker that imports this thread's user modules; the process's preloads are left out (see `workerExecArgv`). */
function startWorker(): Worker {
  return new Worker(new URL("./prep-worker.mjs", import.meta.url), { workerData: { modules: userModules() }, execArgv: workerExecArgv() });
}

/** The policy's text side as plain data (see `policyTextFromSpec`). */
export function policyTextSpec(policy: Policy): PolicyTextSpec {
  return {
    tokenizerDir: policy.engine.tokenizerDir ?? qwen3TokenizerDir(),
    templateSource: policy.template.source,
    toolArguments: policy.template.toolArguments,
    ...(policy.template.tools ? { toolFormat: policy.template.tools.format } : {}),
    vocab: policy.vocab ? policy.vocab.toJSON() : null,
    templateVars: policy.templateVars,
  };
}
