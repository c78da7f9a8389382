// Conformance of the retail and airline tools: every public task's gold replay gives exactly the
// expected output strings and changed records; and the Python-compatible JSON layer prints like Python.
import { describe, expect, it } from "vitest";
import { calculate } from "../../../src/envs/tau/calculate.js";
import { conform } from "../../../src/envs/tau/conform.js";
import { expectedFile, taskFile } from "../../../src/envs/tau/tasks.js";
import { pyClone, pyDumps, pyFloat, pyParse, pyRound } from "../../../src/envs/tau/pyjson.js";

describe("tau-bench conformance", () => {
  for (const [domain, set, count] of [
    ["retail", "train", 500],
    ["retail", "dev", 20],
    ["airline", "dev", 25],
  ] as const) {
    it(`${domain} ${set}: all ${count} gold replays match the expected outputs and records`, () => {
      const report = conform(taskFile(domain, set), expectedFile(domain, set));
      expect(report.mismatches.map((m) => `task ${m.task}: ${m.detail}`)).toEqual([]);
      expect(report.total).toBe(count);
      expect(report.matched).toBe(count);
    });
  }

  it("detects a wrong expected output", async () => {
    const { mkdtempSync, writeFileSync, readFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const dir = mkdtempSync(join(tmpdir(), "tau-conform-"));
    const tasks = JSON.parse(readFileSync(taskFile("retail", "dev"), "utf8")).slice(0, 3);
    const expected = JSON.parse(readFileSync(expectedFile("retail", "dev"), "utf8"));
    expected.tasks = expected.tasks.slice(0, 3);
    expected.tasks[1].action_outputs[0] = "Error: order not found";
    writeFileSync(join(dir, "tasks.json"), JSON.stringify(tasks));
    writeFileSync(join(dir, "expected.json"), JSON.stringify(expected));
    const report = conform(join(dir, "tasks.json"), join(dir, "expected.json"));
    expect(report.matched).toBe(2);
    expect(report.mismatches[0]!.task).toBe(1);
  });
});

describe("data location", () => {
  it("finds ../shared/data from the source files, and honours SINKFLEX_DATA_DIR", async () => {
    const { resolve } = await import("node:path");
    const { domainDir } = await import("../../../src/envs/tau/db.js");
    const saved = process.env.SINKFLEX_DATA_DIR;
    try {
      delete process.env.SINKFLEX_DATA_DIR;
      // The folder beside the checkout when it is there; else (a clone made elsewhere) the one beside the
      // checkout it was cloned from, or the path beside this one for errors to name (test/envs/data-dir.test.ts).
      const { existsSync } = await import("node:fs");
      const beside = resolve(import.meta.dirname, "../../../../shared/data");
      if (existsSync(beside)) expect(domainDir("retail")).toBe(resolve(beside, "tau-bench/retail"));
      else expect(domainDir("retail")).toMatch(/shared[/\\]data[/\\]tau-bench[/\\]retail$/);
      process.env.SINKFLEX_DATA_DIR = "/elsewhere/data";
      expect(domainDir("airline")).toBe("/elsewhere/data/tau-bench/airline");
    } finally {
      if (saved === undefined) delete process.env.SINKFLEX_DATA_DIR;
      else process.env.SINKFLEX_DATA_DIR = saved;
    }
  });

  it("replays over another database folder (--db-dir), where the same gold gives other outputs", async () => {
    const { mkdtempSync, writeFileSync, readFileSync, copyFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const { domainDir } = await import("../../../src/envs/tau/db.js");
    const dir = mkdtempSync(join(tmpdir(), "tau-db-"));
    for (const name of ["users", "products"]) copyFileSync(join(domainDir("retail"), "db", `${name}.json`), join(dir, `${name}.json`));
    const orders = JSON.parse(readFileSync(join(domainDir("retail"), "db", "orders.json"), "utf8"));
    const task = JSON.parse(readFileSync(taskFile("retail", "dev"), "utf8"))[0];
    orders[task.actions[0].kwargs.order_id].status = "processed";
    writeFileSync(join(dir, "orders.json"), JSON.stringify(orders));
    const report = conform(taskFile("retail", "dev"), expectedFile("retail", "dev"), { dbDir: dir });
    expect(report.mismatches[0]).toMatchObject({ task: 0, where: 0, actual: "Error: non-pending order cannot be cancelled" });
  });
});

describe("Python-compatible JSON", () => {
  it("keeps integral floats and index-like key order through parse, clone and dump", () => {
    const text = '{"b": 10.0, "a": 10, "variants": {"9": 1, "10": 2.5, "1": -0.5}, "s": "caf\\u00e9 \\"x\\""}';
    const v = pyParse(text);
    expect(pyDumps(v)).toBe(text);
    expect(pyDumps(pyClone(v))).toBe(text);
    expect(pyDumps({ x: [1e-5, pyFloat(1e16), 1e16, 0.1 + 0.2] })).toBe('{"x": [1e-05, 1e+16, 10000000000000000, 0.30000000000000004]}');
  });

  it("rounds like Python's round(x, 2)", () => {
    expect(pyDumps(pyRound(2.675, 2))).toBe("2.67");
    expect(pyDumps(pyRound(pyFloat(0.125), 2))).toBe("0.12");
    expect(pyDumps(pyRound(pyFloat(0.375), 2))).toBe("0.38");
    expect(pyDumps(pyRound(100.0 + 0.001, 2))).toBe("100.0");
    expect(pyDumps(pyRound(7, 2))).toBe("7");
  });

  it("calculates like the benchmark's calculate tool", () => {
    expect(calculate("2 * ((350 - 122) + (499 - 127))")).toBe("1200.0");
    expect(calculate("10 / 4")).toBe("2.5");
    expect(calculate("1 / 3")).toBe("0.33");
    expect(calculate("1 / 0")).toBe("Error: division by zero");
    expect(calculate("import os")).toBe("Error: invalid characters in expression");
  });
});
