/**
 * `sinkflex envs serve --workers N` as a real process: N workers behind one port, /health summing the
 * cluster (sessions, steps/s, errors, each worker's), and a graceful stop on SIGTERM that lets the steps
 * in flight finish before the sessions close and the process exits 0.
 */
import { spawn } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";
import { RemoteEnv } from "../../../src/gym/remote/client.js";
import { SLOW_ENV_ID } from "./slow-env.js";

const kills: (() => void)[] = [];
afterEach(() => kills.splice(0).forEach((k) => k()));

describe("envs serve --workers", () => {
  it("serves WebSocket sessions from 2 workers on one port, reports the cluster in /health, and drains on SIGTERM", async () => {
    const proc = spawn(process.execPath, ["bin/sinkflex.mjs", "--import", "test/gym/remote/slow-env.ts", "envs", "serve", SLOW_ENV_ID, "--port", "0", "--workers", "2", "--grace", "20000"], { stdio: ["ignore", "pipe", "pipe"], detached: false });
    kills.push(() => proc.exitCode === null && proc.kill("SIGKILL"));
    let out = "";
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no URL in 90 s: ${out}`)), 90_000);
      const read = (d: Buffer) => {
        out += d.toString();
        const m = /serving \S+ at (http:\/\/127\.0\.0\.1:\d+) .*with 2 workers/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      };
      proc.stdout.on("data", read);
      proc.stderr.on("data", read);
    });
    // 6 sessions: connections are handed to the workers in turn, so both hold some.
    const envs = await Promise.all(Array.from({ length: 6 }, () => RemoteEnv.connect<string, number>(url, { transport: "ws", options: { stepMs: 1500, episodeSteps: 3 } })));
    expect(new Set(envs.map((e) => e.session.sessionId.split(".")[0])).size).toBe(2);
    await Promise.all(envs.map((e, i) => e.reset({ seed: i })));
    const first = await Promise.all(envs.map((e) => e.step(1)));
    expect(first.every(([obs]) => obs.startsWith("step 1 "))).toBe(true);
    let health: any;
    for (let i = 0; i < 40; i++) {
      health = await (await fetch(`${url}/health`)).json();
      if (health.sessions === 6 && health.steps === 6) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(health).toMatchObject({ status: "healthy", workers: 2, workersUp: 2, sessions: 6, steps: 6, errors: 0 });
    expect(health.stepsPerSec).toBeGreaterThan(0);
    expect(health.perWorker.map((w: any) => w.sessions).every((n: number) => n > 0)).toBe(true);
    // Steps in flight when SIGTERM arrives still get their answers; then the process exits 0.
    const inFlight = envs.map((e) => e.step(2));
    await new Promise((r) => setTimeout(r, 300));
    const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
    proc.kill("SIGTERM");
    const answers = await Promise.all(inFlight);
    expect(answers.every(([obs]) => obs.startsWith("step 2 "))).toBe(true);
    expect(await exited).toBe(0);
    await expect(fetch(`${url}/health`)).rejects.toThrow();
    await Promise.all(envs.map((e) => e.close().catch(() => undefined)));
  }, 180_000);
});
