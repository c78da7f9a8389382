import { spawn, spawnSync } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { register, unregister } from "../../src/gym/registry.js";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { WalkEnv } from "../gym/helpers.js";
import { runCli } from "../run-cli.js";

const BIN = "bin/sinkflex.mjs";


describe("sinkflex envs", () => {
  afterEach(() => {
    unregister("test/walk-v0");
  });

  it("list --json prints every registered env with id, suite, task count and description", () => {
    const res = spawnSync(process.execPath, [BIN, "envs", "list", "--json"], { encoding: "utf8", timeout: 60_000 });
    expect(res.status, res.stderr).toBe(0);
    const rows = JSON.parse(res.stdout) as { id: string; suite: string; taskCount: number; description: string }[];
    registerBundledEnvs();
    const arith = rows.find((r) => r.id === "sinkflex/arith-v0");
    expect(arith).toEqual({ id: "sinkflex/arith-v0", suite: "arith", taskCount: 300, description: expect.stringContaining("Arithmetic") });
    for (const r of rows) expect(Object.keys(r)).toEqual(["id", "suite", "taskCount", "description"]);
  });

  it("list prints a table, with a task count asked from the env when not registered", async () => {
    register("test/walk-v0", () => Object.assign(new WalkEnv(), { metadata: { taskCount: 42 } }), { suite: "test", description: "a walk" });
    const { code, output } = await runCli(["envs", "list"]);
    expect(code).toBe(0);
    expect(output).toMatch(/^ID +SUITE +TASKS +DESCRIPTION/);
    expect(output).toMatch(/test\/walk-v0 +test +42 +a walk/);
  });

  it("check exits 0 for a passing env, 1 with the failed checks for a broken one, 2 for an unknown id", async () => {
    const ok = await runCli(["envs", "check", "sinkflex/arith-v0", "--episodes", "1"]);
    expect(ok.code, ok.output).toBe(0);
    expect(ok.output).toMatch(/: passed/);
    // An env whose reset ignores the seed.
    register("test/walk-v0", () => {
      const env = new WalkEnv(5);
      env.reset = async () => [`pos=${Math.random()}`, {}];
      return env;
    }, { suite: "test", description: "unseeded" });
    const bad = await runCli(["envs", "check", "test/walk-v0"]);
    expect(bad.code).toBe(1);
    expect(bad.output).toMatch(/FAIL seeded reset is repeatable: reset\(\{seed: 0\}\) twice gave different observations/);
    expect(bad.output).toMatch(/test\/walk-v0 failed \d+ check\(s\): seeded reset is repeatable/);
    const unknown = await runCli(["envs", "check", "test/none-v0"]);
    expect(unknown.code).toBe(2);
    expect(unknown.output).toMatch(/unknown env id "test\/none-v0"; run `sinkflex envs list`/);
    const badFlag = await runCli(["envs", "check", "sinkflex/arith-v0", "--episodes", "zero"]);
    expect(badFlag.code).toBe(2);
    expect(badFlag.output).toMatch(/--episodes must be an integer in 1..100, got "zero"/);
  });

  it("serve prints its URL, serves sessions, and stops cleanly on SIGTERM", async () => {
    const child = spawn(process.execPath, [BIN, "envs", "serve", "sinkflex/arith-v0", "--port", "0", "--max-sessions", "3"], { stdio: ["ignore", "pipe", "pipe"] });
    try {
      let stdout = "";
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout.on("data", (d: Buffer) => {
          stdout += d.toString();
          const m = stdout.match(/at (http:\/\/127\.0\.0\.1:\d+)/);
          if (m) resolve(m[1]!);
        });
        child.once("exit", (code) => reject(new Error(`serve exited early with ${code}: ${stdout}`)));
      });
      expect((await (await fetch(`${url}/health`)).json()) as object).toMatchObject({ status: "healthy", envId: "sinkflex/arith-v0", maxSessions: 3 });
      const created = await fetch(`${url}/sessions`, { method: "POST", body: "{}" });
      expect(created.status).toBe(201);
      const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
      expect(stdout).toMatch(/SIGTERM: finishing the steps in flight \(up to \d+ ms\), closing 1 session\(s\) and stopping/);
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
  });
});
