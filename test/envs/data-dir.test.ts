// The benchmark data folder of a clone made elsewhere (`git clone <checkout> <tmp>`, as a new user tries
// a checkout): without SINKFLEX_DATA_DIR it is the data beside the checkout the clone came from, when
// no shared/data sits beside the clone itself.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const DATA = resolve(ROOT, "..", "shared", "data");

it.skipIf(!existsSync(DATA) || !existsSync(join(ROOT, ".git")))("a clone in a temporary folder finds the data beside the checkout it was cloned from", () => {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), "sinkflex-clone-")));
  try {
    const clone = join(dir, "clone");
    execFileSync("git", ["clone", "-q", "--no-hardlinks", "--depth", "1", `file://${ROOT}`, clone]);
    // a clone over file:// records its origin as that URL; a plain path clone records the path
    execFileSync("git", ["-C", clone, "remote", "set-url", "origin", ROOT]);
    symlinkSync(join(ROOT, "node_modules"), join(clone, "node_modules"));
    const env = { ...process.env };
    delete env.SINKFLEX_DATA_DIR;
    const r = spawnSync(process.execPath, ["--import", "tsx", "-e", "import('./src/envs/data-dir.ts').then((m) => console.log(m.benchmarkDataDir()))"], { cwd: clone, env, encoding: "utf8" });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(DATA);
    // SINKFLEX_DATA_DIR still comes first
    const o = spawnSync(process.execPath, ["--import", "tsx", "-e", "import('./src/envs/data-dir.ts').then((m) => console.log(m.benchmarkDataDir()))"], { cwd: clone, env: { ...env, SINKFLEX_DATA_DIR: dir }, encoding: "utf8" });
    expect(o.stdout.trim()).toBe(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);
