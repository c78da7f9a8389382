// A torch worker killed in the middle of a run on the torch engine: the run fails with an error that names
// the worker's end, its status says so, the checkpoints left are whole (none half-written), and a run
// continued with resume (what `sinkflex train --resume` runs) goes on from the last checkpoint to the end.
// Skipped with a printed reason when the Python side is missing (a failure when SINKFLEX_REQUIRE_TORCH=1).
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runningWorkerPids } from "../../src/engine/torch/index.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { train } from "../../src/pipeline/train.js";
import { torchUnavailable } from "../engine/torch-helpers.js";
import { parityConfig, registerParityEnv } from "./parity-env.js";

registerParityEnv();
const missing = torchUnavailable();
const scratch = mkdtempSync(join(tmpdir(), "torch-faults-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The parity pipeline's tiny config on the torch engine (as test/pipeline/torch-train.test.ts's). */
function torchConfig(runsDir: string, name: string) {
  const base = parityConfig(runsDir, name);
  return validateConfig({ ...base, engine: { backend: "torch", threads: 1 }, sft: { ...base.sft, packPrefixes: false }, grpo: { ...base.grpo, packPrefixes: false } });
}

/** Waits until every worker this process started has exited (a stopped worker exits within a few seconds). */
async function noWorkersLeft(): Promise<number[]> {
  for (let i = 0; i < 100 && runningWorkerPids().length > 0; i++) await new Promise((r) => setTimeout(r, 100));
  return runningWorkerPids();
}

const records = (runDir: string) => readFileSync(join(runDir, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));

(missing ? describe.skip : describe)(`a killed torch worker${missing ? ` (${missing})` : ""}`, () => {
  it("stops the run with an error naming the worker's end, leaves whole checkpoints, and --resume finishes the run", async () => {
    const cfg = torchConfig(mkdtempSync(join(scratch, "runs-")), "killed");
    let killed: number | undefined;
    const run = train(cfg, {
      quiet: true,
      skipEval: true,
      onMetrics: (r) => {
        // After GRPO step 1 (its checkpoint is next): the policy's worker (started first) dies in step 2.
        if (r.stage === "grpo" && r.step === 1 && killed === undefined) {
          killed = runningWorkerPids()[0]!;
          process.kill(killed, "SIGKILL");
        }
      },
    });
    await expect(run).rejects.toThrow(/torch worker \(.*pid \d+\) ended \(killed by SIGKILL\)/);
    expect(killed).toBeGreaterThan(0);
    const runDir = join(cfg.runsDir, cfg.name);
    const status = JSON.parse(readFileSync(join(runDir, "status.json"), "utf8"));
    expect(status.state).toBe("failed");
    expect(status.error).toMatch(/killed by SIGKILL/);
    // Whole checkpoints only: each has its weights, config and trainer state.
    const ckpts = readdirSync(join(runDir, "checkpoints")).filter((n) => /^(sft|grpo)-\d+$/.test(n));
    expect(ckpts.length).toBeGreaterThan(0);
    for (const c of ckpts) {
      for (const f of ["model.safetensors", "config.json", "trainer.json", "sinkflex.json"]) expect(existsSync(join(runDir, "checkpoints", c, f))).toBe(true);
    }
    const latest = readFileSync(join(runDir, "checkpoints", "latest"), "utf8").trim();
    expect(ckpts).toContain(latest);
    // No worker of this run is left running.
    expect(await noWorkersLeft()).toEqual([]);

    const resumed = await train(cfg, { quiet: true, skipEval: true, resume: true });
    expect(resumed.stopped).toBe(false);
    expect(records(runDir).filter((r) => r.stage === "grpo").map((r) => r.step)).toEqual([1, 2, 3]);
    expect(JSON.parse(readFileSync(join(runDir, "status.json"), "utf8")).state).toBe("done");
    expect(existsSync(join(runDir, "final", "model.safetensors"))).toBe(true);
    expect(await noWorkersLeft()).toEqual([]);
  }, 600_000);
});
