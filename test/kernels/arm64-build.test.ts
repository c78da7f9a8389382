/**
 * The native kernels build for arm64 (Apple Silicon under Linux, Graviton): every source of
 * native/binding.gyp is compiled with an aarch64 cross compiler and the addon's own flags, so x86-only
 * code outside its guards fails here, on any machine. Running the arm64 build is not this test's: the
 * kernel tests were run under qemu-user emulation (docs/engine.md, "Other CPUs"). Without
 * aarch64-linux-gnu-g++ (Debian: g++-aarch64-linux-gnu) the test is skipped with that reason printed;
 * SINKFLEX_REQUIRE_ARM64_BUILD=1 (CI) makes a missing compiler a failure.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const CXX = "aarch64-linux-gnu-g++";
const hasCxx = spawnSync(CXX, ["--version"], { encoding: "utf8" }).status === 0;
if (!hasCxx) {
  const why = `${CXX} is not installed (Debian: apt-get install g++-aarch64-linux-gnu)`;
  if (process.env.SINKFLEX_REQUIRE_ARM64_BUILD === "1") throw new Error(`SINKFLEX_REQUIRE_ARM64_BUILD=1 but ${why}`);
  console.warn(`skipping the arm64 build of the native kernels: ${why}`);
}

describe("the native kernels on arm64", () => {
  it.skipIf(!hasCxx)("compile and link for aarch64 with the addon's flags", () => {
    const gyp = readFileSync("native/binding.gyp", "utf8");
    const sources = JSON.parse(gyp.match(/"sources":\s*(\[[^\]]*\])/)![1]!) as string[];
    const flags = JSON.parse(gyp.match(/"cflags_cc":\s*(\[[^\]]*\])/)![1]!) as string[];
    const defines = (JSON.parse(gyp.match(/"defines":\s*(\[[^\]]*\])/)![1]!) as string[]).map((d) => `-D${d}`);
    const addonApi = createRequire(import.meta.url)("node-addon-api").include_dir as string;
    const nodeHeaders = join(process.execPath, "..", "..", "include", "node");
    const out = mkdtempSync(join(tmpdir(), "sinkflex-arm64-"));
    try {
      const objects: string[] = [];
      for (const src of sources) {
        const obj = join(out, src.replace(/\W/g, "_") + ".o");
        // -O1: the flags' -O3 is kept for what it enables, and the lower level keeps the test short.
        const r = spawnSync(CXX, [...flags, "-O1", "-fPIC", ...defines, `-I${nodeHeaders}`, "-I/usr/include/node", `-I${addonApi}`, "-c", join("native", src), "-o", obj], { encoding: "utf8" });
        expect(r.status, `${src} does not compile for arm64:\n${r.stderr}`).toBe(0);
        objects.push(obj);
      }
      const link = spawnSync(CXX, ["-shared", "-pthread", "-o", join(out, "sinkflex_native.node"), ...objects], { encoding: "utf8" });
      expect(link.status, `the arm64 addon does not link:\n${link.stderr}`).toBe(0);
      const file = readFileSync(join(out, "sinkflex_native.node"));
      expect(file.readUInt16LE(18), "ELF machine of the addon (183 = aarch64)").toBe(183);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 600_000);
});
