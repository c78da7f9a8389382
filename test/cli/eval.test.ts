import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { train } from "../../src/pipeline/train.js";
import { parityConfig, registerParityEnv } from "../pipeline/parity-env.js";
import { runCli } from "../run-cli.js";

registerParityEnv();
const scratch = mkdtempSync(join(tmpdir(), "eval-cli-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));


describe("sinkflex eval --config", () => {
  it("evaluates a run's final checkpoint as the run did: the same held-out tasks and success", async () => {
    const run = await train(parityConfig(join(scratch, "runs"), "eval-cli"), { quiet: true });
    const json = join(scratch, "eval.json");
    const res = await runCli(["eval", join(run.runDir, "final"), "--config", join(run.runDir, "config.json"), "--json", json]);
    expect(res.code, res.output).toBe(0);
    const table = JSON.parse(readFileSync(json, "utf8")).suites as Record<string, { successes: number; trials: number }>;
    expect(table.parity!.trials).toBe(run.evalAfter!.parity!.trials);
    expect(table.parity!.successes).toBe(run.evalAfter!.parity!.successes);

    const both = await runCli(["eval", join(run.runDir, "final"), "--config", join(run.runDir, "config.json"), "--tasks", "5"]);
    expect(both.code).not.toBe(0);
    expect(both.output).toMatch(/--config takes the suites and evaluation settings from .*config\.json; drop --tasks/);
  }, 300_000);
});
