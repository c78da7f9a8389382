// The engine contract (contract.ts) for the torch engine: a real Python worker (python/) started as a
// child process over a Unix socket, on the tiny checkpoint written by the embedded engine. Skipped with a
// printed reason when the Python side is missing (a failure when SINKFLEX_REQUIRE_TORCH=1).
import { describe, vi } from "vitest";
import { openTorchEngine } from "../../src/engine/torch/index.js";
import { engineContract } from "./contract.js";
import { tinyCheckpoint, testDevice, torchUnavailable } from "./torch-helpers.js";

// Each test starts a worker (importing torch): about 70 s measured on the 2-core machine under load 30.
vi.setConfig({ testTimeout: 240_000 });
const missing = torchUnavailable();
if (missing) {
  describe.skip(`engine contract: torch engine (${missing})`, () => {});
} else {
  const dir = tinyCheckpoint();
  engineContract("torch engine, CPU fp32", async () => ({
    engine: await openTorchEngine({ model: dir, threads: 1, ...testDevice() }),
    vocabSize: 64,
  }));
}
