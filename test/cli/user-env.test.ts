/**
 * A user's own env through the real `sinkflex` command, as a new user runs it: a fresh project folder
 * that depends on sinkflex (node_modules links), an env module of its own (fixtures/inventory-env.ts: a
 * ToolEnv under the id acme/inventory-v0, with an expert and a taskKey), loaded by `--import`, by a
 * Node preload, or by the config's `modules`. Each run is a separate `node bin/sinkflex.mjs` process.
 */
import { execFile } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const BIN = join(ROOT, "bin/sinkflex.mjs");
const scratch = mkdtempSync(join(tmpdir(), "user-env-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A fresh project folder: package.json, node_modules/{sinkflex,zod,tsx} (as npm would install them), the env module. */
function project(name: string): string {
  const dir = join(scratch, name);
  mkdirSync(join(dir, "node_modules"), { recursive: true });
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name, type: "module", dependencies: { sinkflex: "*", zod: "*" } }));
  symlinkSync(ROOT, join(dir, "node_modules/sinkflex"));
  for (const dep of ["zod", "tsx"]) symlinkSync(join(ROOT, "node_modules", dep), join(dir, "node_modules", dep));
  copyFileSync(join(import.meta.dirname, "fixtures/inventory-env.ts"), join(dir, "inventory-env.ts"));
  return dir;
}

function config(extra: string, episodes: number, evalTasks = 4): string {
  return [
    "name: inv",
    "runsDir: runs",
    extra,
    "suites:",
    "  - env: acme/inventory-v0",
    "model:",
    "  init: { hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64, maxPositions: 1024 }",
    `sft: { expertEpisodes: ${episodes}, epochs: 1, batchSize: 64 }`,
    "grpo: { enabled: false }",
    `eval: { tasksPerSuite: ${evalTasks} }`,
    "",
  ].join("\n");
}

function run(cwd: string, args: string[], env: Record<string, string> = {}, nodeArgs: string[] = []): Promise<{ code: number; out: string }> {
  return new Promise((done) => {
    execFile(process.execPath, [...nodeArgs, BIN, ...args], { cwd, env: { ...process.env, ...env }, timeout: 240_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      done({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, out: `${stdout}\n${stderr}` });
    });
  });
}

const loads = (file: string) => (existsSync(file) ? readFileSync(file, "utf8").trim().split("\n") : []);

describe("sinkflex on a user's own env module", () => {
  it("--import loads the module in the main thread and in the data workers (1,200 conversations), and a run without GRPO prints no 'after RL' table", async () => {
    const dir = project("import-flag");
    writeFileSync(join(dir, "my.yaml"), config("", 1200));
    const log = join(dir, "load.log");
    const res = await run(dir, ["--import", "./inventory-env.ts", "train", "--config", "my.yaml", "--quiet", "--no-dashboard"], { INVENTORY_LOAD_LOG: log });
    expect(res.code, res.out).toBe(0);
    const where = loads(log);
    expect(where.filter((w) => w === "main")).toHaveLength(1);
    // The expert episodes and the tokenizing ran on worker threads that imported the module.
    expect(where.filter((w) => w === "worker").length).toBeGreaterThanOrEqual(1);
    expect(res.out).toMatch(/evaluation \(after SFT; GRPO is disabled/);
    expect(res.out).not.toMatch(/after RL:/);
    const setup = readFileSync(join(dir, "runs/inv/metrics.jsonl"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)).find((r) => r.stage === "setup");
    expect(setup.sftConversations).toBeGreaterThanOrEqual(1000);
  }, 300_000);

  it("a Node preload of a TypeScript module (node --import tsx --import ./env.ts) does not crash the data workers", async () => {
    const dir = project("preload");
    writeFileSync(join(dir, "my.yaml"), config("", 1200));
    // In a checkout, a preload that imports "sinkflex" names the source export condition (see bin/sinkflex.mjs).
    const res = await run(dir, ["train", "--config", "my.yaml", "--quiet", "--no-dashboard"], {}, ["--conditions=sinkflex-source", "--import", "tsx", "--import", "./inventory-env.ts"]);
    expect(res.out).not.toMatch(/Unknown file extension/);
    expect(res.code, res.out).toBe(0);
  }, 300_000);

  it("a config's modules are resolved from its folder, kept in the run's config, and `eval --config` finds them; a short held-out set is warned about", async () => {
    const dir = project("modules");
    mkdirSync(join(dir, "configs"));
    writeFileSync(join(dir, "configs/my.yaml"), config("modules: [../inventory-env.ts]", 16));
    const res = await run(dir, ["train", "--config", "configs/my.yaml", "--quiet", "--no-dashboard"]);
    expect(res.code, res.out).toBe(0);
    const saved = JSON.parse(readFileSync(join(dir, "runs/inv/config.json"), "utf8"));
    expect(saved.modules).toEqual([join(dir, "inventory-env.ts")]);
    const again = await run(dir, ["eval", "runs/inv/final", "--config", "runs/inv/config.json"]);
    expect(again.code, again.out).toBe(0);
    expect(again.out).toMatch(/inventory\s+\d/);

    // Without its taskKey the 400 tasks are 9 distinct prompts: 20 held-out tasks asked, 3 given, and said.
    const short = await run(dir, ["--import", "./inventory-env.ts", "eval", "runs/inv/final", "--suites", "acme/inventory-v0", "--tasks", "20"], { INVENTORY_NO_TASK_KEY: "1" });
    expect(short.code, short.out).toBe(0);
    expect(short.out).toMatch(/warning: inventory: 3 held-out tasks, not the 20 asked for \(eval.tasksPerSuite\): its 400 tasks are 9 distinct ones by their opening messages and tools/);
    expect(short.out).toMatch(/taskKey/);

    const missing = await run(dir, ["--import", "./nope.ts", "envs", "list"]);
    expect(missing.code).toBe(2);
    expect(missing.out).toMatch(/--import: no module at .*nope\.ts/);
  }, 300_000);
});
