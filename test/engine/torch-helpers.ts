/**
 * Test helpers for the torch engine: whether the Python side can run (torch and transformers importable
 * by $SINKFLEX_TORCH_PYTHON, default python3), and a tiny checkpoint written by the embedded engine.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "vitest";
import { createRandomModel } from "../../src/engine/embedded.js";
import { defaultPython } from "../../src/engine/torch/index.js";
import { tinyConfig } from "./helpers.js";

/** Why the torch engine cannot be tested here, or null when it can. SINKFLEX_REQUIRE_TORCH=1 turns a reason into a failure. */
export function torchUnavailable(): string | null {
  const python = defaultPython();
  const r = spawnSync(python, ["-c", "import torch, transformers, safetensors"], { encoding: "utf8", timeout: 120_000 });
  const reason = r.error
    ? `${python} cannot run (${r.error.message})`
    : r.status !== 0 ? `${python} cannot import torch/transformers/safetensors: ${(r.stderr ?? "").trim().split("\n").pop()}` : null;
  if (reason && process.env.SINKFLEX_REQUIRE_TORCH === "1") {
    throw new Error(`SINKFLEX_REQUIRE_TORCH=1 but ${reason}; install them (pip install ./python) or set SINKFLEX_TORCH_PYTHON`);
  }
  if (reason) console.warn(`skipping the torch engine tests: ${reason} (set SINKFLEX_TORCH_PYTHON to a Python with torch)`);
  return reason;
}

/**
 * Where the torch engine tests run the worker: $SINKFLEX_TORCH_DEVICE (scripts/gpu-check.sh sets "cuda"),
 * else the CPU; with fp32 weights (no bf16 autocast) so the parity tolerances hold.
 */
export function testDevice(): { device: string; autocast: "off" } {
  return { device: process.env.SINKFLEX_TORCH_DEVICE || "cpu", autocast: "off" };
}

/** A checkpoint folder of the tiny test model (tinyConfig, seed 21, std 0.15), written by the embedded engine. */
export function tinyCheckpoint(): string {
  const dir = join(mkdtempSync(join(tmpdir(), "sinkflex-torch-ckpt-")), "tiny");
  createRandomModel(tinyConfig(), 21, { std: 0.15 }).saveSync(dir);
  return dir;
}

/** The largest absolute difference between two lists of log-prob arrays of the same lengths. */
export function maxDiff(a: Float32Array[], b: Float32Array[]): number {
  let d = 0;
  a.forEach((x, i) => {
    expect(x.length).toBe(b[i]!.length);
    for (let t = 0; t < x.length; t++) d = Math.max(d, Math.abs(x[t]! - b[i]![t]!));
  });
  return d;
}
