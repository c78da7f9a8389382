// The engine benchmark's training section runs to its table (--quick: batch 2 x 128, one step a
// contender), the LoRA rows included: a LoRA config the benchmark's Qwen2-shaped model refuses (as when
// every target name of every family was asked for) stops the section with a LoraError. A peer whose
// Python exits at once is unavailable, never a crash (its stdin's EPIPE once stopped the benchmark). The
// weight-streaming section (stream-05b) runs to its table of read rates.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");

it("bench:engine --only train --quick prints the full and LoRA training rows and writes them as JSON", () => {
  const dir = mkdtempSync(join(tmpdir(), "engine-bench-"));
  try {
    const json = join(dir, "engine.json");
    const r = spawnSync(process.execPath, ["--import", "tsx", "bench/engine.bench.ts", "--only", "train", "--quick", "--threads", "1", "--json", json], {
      cwd: ROOT, encoding: "utf8", timeout: 240_000,
    });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/LoRA r16 on every projection, fp32 base/);
    expect(r.stdout).toMatch(/LoRA r16 on every projection, bf16 base/);
    const out = JSON.parse(readFileSync(json, "utf8")) as { train?: { sinkflexTokensPerS?: number; lora?: unknown } };
    expect(out.train?.sinkflexTokensPerS).toBeGreaterThan(0);
    expect(out.train?.lora).toBeDefined();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 300_000);

it("a peer Python that exits at once leaves its rows 'peer unavailable' and the benchmark goes on", () => {
  const r = spawnSync(process.execPath, ["--import", "tsx", "bench/engine.bench.ts", "--only", "train", "--quick", "--threads", "1"], {
    cwd: ROOT, encoding: "utf8", timeout: 240_000, env: { ...process.env, SINKFLEX_BENCH_PYTHON: "false" },
  });
  expect(r.status, r.stdout + r.stderr).toBe(0);
  expect(r.stdout).toMatch(/peer torch: peer unavailable \(peer process exited\)/);
  expect(r.stdout).toMatch(/LoRA r16 on every projection, fp32 base/);
}, 300_000);

it("bench:engine --only stream-05b --quick prints each matrix's read rates beside a sequential read and writes them as JSON", () => {
  const dir = mkdtempSync(join(tmpdir(), "sinkflex-bench-stream-"));
  try {
    const json = join(dir, "out.json");
    const r = spawnSync(process.execPath, ["--import", "tsx", "bench/engine.bench.ts", "--only", "stream-05b", "--quick", "--threads", "1", "--json", json], {
      cwd: ROOT, encoding: "utf8", timeout: 300_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/One decoded row, y = x W\^T/);
    const rows = (JSON.parse(readFileSync(json, "utf8")) as { stream05b: { matrix: string; bf16: number; int8: number; fp32: number; read: number }[] }).stream05b;
    expect(rows.map((x) => x.matrix)).toEqual(["q, o", "k, v", "gate, up", "down"]);
    for (const x of rows) for (const v of [x.bf16, x.int8, x.fp32, x.read]) expect(v).toBeGreaterThan(0.1);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 320_000);
