// The torch worker's own tests (python/tests: the engine, its attention, the socket server, FSDP2 across two gloo
// processes) run by $SINKFLEX_TORCH_PYTHON (default python3) under pytest, so that `npm test` covers the
// Python side. Skipped with a printed reason when that Python lacks torch, transformers or safetensors
// (a failure when SINKFLEX_REQUIRE_TORCH=1), or pytest.
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { defaultPython, WORKER_PACKAGE_DIR } from "../../src/engine/torch/launcher.js";
import { torchUnavailable } from "./torch-helpers.js";

const missing = torchUnavailable() ?? pytestUnavailable();

function pytestUnavailable(): string | null {
  const r = spawnSync(defaultPython(), ["-c", "import pytest"], { encoding: "utf8", timeout: 60_000 });
  if (r.status === 0) return null;
  if (process.env.SINKFLEX_REQUIRE_TORCH === "1") throw new Error(`SINKFLEX_REQUIRE_TORCH=1 but ${defaultPython()} cannot import pytest; pip install pytest`);
  console.warn(`skipping the worker's pytest: ${defaultPython()} cannot import pytest`);
  return "no pytest";
}

(missing ? describe.skip : describe)(`the torch worker's pytest${missing ? ` (${missing})` : ""}`, () => {
  it("python -m pytest -q python/tests passes", () => {
    const r = spawnSync(defaultPython(), ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], {
      cwd: WORKER_PACKAGE_DIR, encoding: "utf8", timeout: 900_000,
      env: { ...process.env, PYTHONPATH: [WORKER_PACKAGE_DIR, process.env.PYTHONPATH].filter(Boolean).join(":") },
    });
    const tail = `${r.stdout ?? ""}\n${r.stderr ?? ""}`.trim().split("\n").slice(-30).join("\n");
    expect(r.status, tail).toBe(0);
    expect(r.stdout).toMatch(/\d+ passed/);
  }, 960_000);
});
