/**
 * The GRPO peer benchmark's own checks (bench/peer.bench.ts, bench/peers/trl_grpo.py): that the TRL side's
 * learning-rate schedule is sinkflex's step by step, and that bad options are refused with what to do. Not a
 * run of the benchmark (that takes minutes of TRL per step): only the cheap parts, in real processes.
 */
import { spawnSync } from "node:child_process";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { learningRateAt } from "../../src/rl/index.js";

const root = resolve(import.meta.dirname, "..", "..");
const PYTHON = process.env.SINKFLEX_BENCH_PYTHON || "python3";

describe("bench:peer", () => {
  it("the TRL side's learning rate is sinkflex's learningRateAt at every step (warm-up, cosine, constant)", (ctx) => {
    const schedules = [
      { lr: 2e-4, warmupSteps: 5, lrSchedule: "cosine" as const, minLrRatio: 0.1 },
      { lr: 3e-4, warmupSteps: 0, lrSchedule: "constant" as const },
      { lr: 1e-3, warmupSteps: 20, lrSchedule: "cosine" as const, minLrRatio: 0 },
    ];
    const totals = [1, 3, 16, 72];
    // trl_grpo.py imports only the standard library at its top: its schedule runs without torch.
    const script = [
      "import importlib.util, json, sys",
      `spec = importlib.util.spec_from_file_location("trl_grpo", ${JSON.stringify(join(root, "bench", "peers", "trl_grpo.py"))})`,
      "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)",
      "cases = json.loads(sys.stdin.read())",
      "print(json.dumps([[m.learning_rate_at(s, t, hp) for s in range(1, t + 1)] for hp, t in cases]))",
    ].join("\n");
    const cases = schedules.flatMap((hp) => totals.map((t) => [hp, t] as const));
    const res = spawnSync(PYTHON, ["-c", script], { input: JSON.stringify(cases), encoding: "utf8", timeout: 60_000 });
    if (res.error) {
      console.log(`skipped: cannot start ${PYTHON} (${res.error.message})`);
      ctx.skip();
    }
    expect(res.status, res.stderr).toBe(0);
    const got = JSON.parse(res.stdout) as number[][];
    cases.forEach(([hp, total], i) => {
      const want = Array.from({ length: total }, (_, s) => learningRateAt(s + 1, total, hp));
      expect(got[i]!.length).toBe(total);
      got[i]!.forEach((x, s) => expect(x).toBeCloseTo(want[s]!, 15));
    });
  });

  it("refuses a bad --eval-every, --group-size or --batch-tasks with the option and what it takes", () => {
    const tsx = join(root, "node_modules", ".bin", "tsx");
    const bench = join(root, "bench", "peer.bench.ts");
    for (const [args, message] of [
      [["--eval-every", "-1"], "--eval-every must be 0 or a positive integer, got -1"],
      [["--group-size", "1"], "--group-size must be at least 2"],
      [["--batch-tasks", "0"], "--batch-tasks must be a positive integer, got 0"],
    ] as const) {
      const res = spawnSync(tsx, [bench, ...args], { cwd: root, encoding: "utf8", timeout: 60_000 });
      expect(res.status, res.stderr).toBe(1);
      expect(res.stderr).toContain(message);
    }
  }, 180_000);
});
