/**
 * A run's folder: the config, the metrics stream, sampled trajectories, evaluation tables, the status
 * and the checkpoints. The dashboard and `--resume` read exactly these files.
 *
 *   runs/<name>/
 *     config.json            the validated config
 *     status.json            {state, stage, step, totalSteps, startedAt, updatedAt, error?, endReason?}
 *     metrics.jsonl          one JSON object per step: {stage, step, time, ...figures}
 *     eval.json              per-stage evaluation tables (before RL, after RL)
 *     trajectories/<stage>-<step>.jsonl   the step's trajectories (tokens, mask, log-probs, turns, reward)
 *     checkpoints/<stage>-<step>/         a model checkpoint + trainer.json (step, rng, optimizer state)
 *     checkpoints/latest                  name of the newest complete checkpoint
 *
 * Every JSON file is written atomically (temp file + rename) and a checkpoint folder appears only when
 * complete, so an interrupted run never leaves a half-written file behind.
 */
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface RunStatus {
  state: "running" | "done" | "failed" | "stopped";
  stage: string;
  step: number;
  totalSteps: number;
  startedAt: string;
  updatedAt: string;
  error?: string;
  /** Why the run ended, once it has: "completed", "time budget: ...", "stopped by the user" or "failed: <message>". */
  endReason?: string;
}

export function writeJsonAtomic(path: string, value: unknown): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify(value, null, 2)}\n`);
  renameSync(tmp, path);
}

export function readJson<T>(path: string): T {
  try {
    return JSON.parse(readFileSync(path, "utf8")) as T;
  } catch (err) {
    throw new Error(`cannot read ${path}: ${(err as Error).message}`);
  }
}

export class RunDir {
  constructor(readonly path: string) {}

  static create(runsDir: string, name: string, options: { resume: boolean }): RunDir {
    const path = join(runsDir, name);
    if (existsSync(join(path, "config.json")) && !options.resume) {
      // A run that failed in setup (a config the planning refused, a suite that would not start) holds
      // nothing to lose: it is started over under its name once the config is fixed.
      if (!RunDir.failedInSetup(path)) throw new Error(`the run folder ${path} already exists; pass --resume to continue it, or choose another name (--name)`);
      rmSync(path, { recursive: true, force: true });
    }
    if (options.resume && !existsSync(join(path, "config.json"))) {
      throw new Error(`cannot resume: ${path} has no config.json (no run was started there)`);
    }
    mkdirSync(join(path, "trajectories"), { recursive: true });
    mkdirSync(join(path, "checkpoints"), { recursive: true });
    return new RunDir(path);
  }

  /** The folder's run failed before any step: status "failed" in stage "setup", no metrics, no checkpoint. */
  private static failedInSetup(path: string): boolean {
    try {
      const status = JSON.parse(readFileSync(join(path, "status.json"), "utf8")) as Partial<RunStatus>;
      const checkpoints = existsSync(join(path, "checkpoints")) ? readdirSync(join(path, "checkpoints")) : [];
      return status.state === "failed" && status.stage === "setup" && !existsSync(join(path, "metrics.jsonl")) && checkpoints.length === 0;
    } catch {
      return false;
    }
  }

  file(name: string): string {
    return join(this.path, name);
  }

  writeConfig(config: unknown): void {
    writeJsonAtomic(this.file("config.json"), config);
  }

  writeStatus(status: RunStatus): void {
    writeJsonAtomic(this.file("status.json"), status);
  }

  appendMetrics(record: Record<string, unknown>): void {
    appendFileSync(this.file("metrics.jsonl"), `${JSON.stringify(record)}\n`);
  }

  /** The metrics lines, without a torn last line (from a crash mid-write). */
  readMetrics(): Record<string, unknown>[] {
    if (!existsSync(this.file("metrics.jsonl"))) return [];
    const out: Record<string, unknown>[] = [];
    for (const line of readFileSync(this.file("metrics.jsonl"), "utf8").split("\n")) {
      if (!line.trim()) continue;
      try {
        out.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        break;
      }
    }
    return out;
  }

  /** Rewrites metrics.jsonl keeping only records up to (and including) `step` of the stages given. */
  truncateMetrics(keep: (record: Record<string, unknown>) => boolean): void {
    const kept = this.readMetrics().filter(keep);
    const tmp = `${this.file("metrics.jsonl")}.tmp-${process.pid}`;
    writeFileSync(tmp, kept.map((r) => `${JSON.stringify(r)}\n`).join(""));
    renameSync(tmp, this.file("metrics.jsonl"));
  }

  writeTrajectories(stage: string, step: number, records: unknown[]): void {
    const name = `${stage}-${String(step).padStart(5, "0")}.jsonl`;
    const tmp = join(this.path, "trajectories", `.${name}.tmp-${process.pid}`);
    writeFileSync(tmp, records.map((r) => `${JSON.stringify(r)}\n`).join(""));
    renameSync(tmp, join(this.path, "trajectories", name));
  }

  writeEval(tables: unknown): void {
    writeJsonAtomic(this.file("eval.json"), tables);
  }

  /**
   * Saves a checkpoint: `write(dir)` fills a temp folder, which is renamed into place only once
   * complete; then `latest` is updated and older checkpoints beyond `keep` are removed.
   */
  async saveCheckpoint(name: string, write: (dir: string) => Promise<void>, keep: number): Promise<string> {
    const root = join(this.path, "checkpoints");
    const final = join(root, name);
    const tmp = join(root, `.${name}.partial-${process.pid}`);
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    await write(tmp);
    rmSync(final, { recursive: true, force: true });
    renameSync(tmp, final);
    writeFileSync(join(root, "latest.tmp"), name);
    renameSync(join(root, "latest.tmp"), join(root, "latest"));
    const complete = readdirSync(root)
      .filter((n) => checkpointOrder(n) >= 0) // step checkpoints only ("reference" and others are kept)
      .sort((a, b) => checkpointOrder(a) - checkpointOrder(b));
    for (const old of complete.slice(0, Math.max(0, complete.length - keep))) {
      if (old !== name) rmSync(join(root, old), { recursive: true, force: true });
    }
    return final;
  }

  latestCheckpoint(): string | undefined {
    const pointer = join(this.path, "checkpoints", "latest");
    if (!existsSync(pointer)) return undefined;
    const dir = join(this.path, "checkpoints", readFileSync(pointer, "utf8").trim());
    return existsSync(dir) ? dir : undefined;
  }
}

/** Orders checkpoint names "sft-00003", "grpo-00010": SFT before GRPO, then by step. */
function checkpointOrder(name: string): number {
  const m = /^(\w+)-(\d+)$/.exec(name);
  if (!m) return -1;
  const stageRank = m[1] === "sft" ? 0 : m[1] === "grpo" ? 1 : 2;
  return stageRank * 1e9 + Number(m[2]);
}
