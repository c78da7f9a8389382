/**
 * The native kernels build for arm64 (Apple Silicon under Linux, Graviton): every source of
 * native/binding.gyp is compiled with an aarch64 cross compiler and the addon's own flags, so x86-only
 * code outside its guards fails here, on any machine. With qemu-user installed (qemu-aarch64 or
 * qemu-aarch64-static) the same objects also run: test/kernels/arm64-neon-check.cc, linked statically
 * against them, checks the GEMMs and decoding attention (the NEON kernels, and the portable ones under
 * SINKFLEX_SIMD=portable) against a plain loop. Running the whole addon on arm64 is not this test's: the kernel tests were run
 * under qemu-user with an arm64 Node (docs/engine.md, "Other CPUs"). Without aarch64-linux-gnu-g++ (Debian:
 * g++-aarch64-linux-gnu), or without qemu-user for the run, a test is skipped with that reason printed;
 * SINKFLEX_REQUIRE_ARM64_BUILD=1 (CI) makes either missing a failure.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const CXX = "aarch64-linux-gnu-g++";
const hasCxx = spawnSync(CXX, ["--version"], { encoding: "utf8" }).status === 0;
if (!hasCxx) {
  const why = `${CXX} is not installed (Debian: apt-get install g++-aarch64-linux-gnu)`;
  if (process.env.SINKFLEX_REQUIRE_ARM64_BUILD === "1") throw new Error(`SINKFLEX_REQUIRE_ARM64_BUILD=1 but ${why}`);
  console.warn(`skipping the arm64 build of the native kernels: ${why}`);
}
const QEMU = ["qemu-aarch64", "qemu-aarch64-static"].find((q) => spawnSync(q, ["--version"], { encoding: "utf8" }).status === 0);
if (hasCxx && !QEMU) {
  const why = "qemu-user is not installed (Debian: apt-get install qemu-user)";
  if (process.env.SINKFLEX_REQUIRE_ARM64_BUILD === "1") throw new Error(`SINKFLEX_REQUIRE_ARM64_BUILD=1 but ${why}`);
  console.warn(`skipping the run of the arm64 kernels: ${why}`);
}

describe("the native kernels on arm64", () => {
  const out = mkdtempSync(join(tmpdir(), "sinkflex-arm64-"));
  const objects = new Map<string, string>(); // source -> object, once compiled
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it.skipIf(!hasCxx)("compile and link for aarch64 with the addon's flags", () => {
    const gyp = readFileSync("native/binding.gyp", "utf8");
    const sources = JSON.parse(gyp.match(/"sources":\s*(\[[^\]]*\])/)![1]!) as string[];
    const flags = JSON.parse(gyp.match(/"cflags_cc":\s*(\[[^\]]*\])/)![1]!) as string[];
    const defines = (JSON.parse(gyp.match(/"defines":\s*(\[[^\]]*\])/)![1]!) as string[]).map((d) => `-D${d}`);
    const addonApi = createRequire(import.meta.url)("node-addon-api").include_dir as string;
    const nodeHeaders = join(process.execPath, "..", "..", "include", "node");
    for (const src of sources) {
      const obj = join(out, src.replace(/\W/g, "_") + ".o");
      // -O1: the flags' -O3 is kept for what it enables, and the lower level keeps the test short.
      const r = spawnSync(CXX, [...flags, "-O1", "-fPIC", ...defines, `-I${nodeHeaders}`, "-I/usr/include/node", `-I${addonApi}`, "-c", join("native", src), "-o", obj], { encoding: "utf8" });
      expect(r.status, `${src} does not compile for arm64:\n${r.stderr}`).toBe(0);
      objects.set(src, obj);
    }
    expect(sources.some((s) => s.includes("neon")), "binding.gyp lists the NEON kernels").toBe(true);
    const link = spawnSync(CXX, ["-shared", "-pthread", "-o", join(out, "sinkflex_native.node"), ...objects.values()], { encoding: "utf8" });
    expect(link.status, `the arm64 addon does not link:\n${link.stderr}`).toBe(0);
    const file = readFileSync(join(out, "sinkflex_native.node"));
    expect(file.readUInt16LE(18), "ELF machine of the addon (183 = aarch64)").toBe(183);
  }, 600_000);

  it.skipIf(!hasCxx || !QEMU)("the GEMMs and decoding attention built for aarch64 match a plain loop under qemu-user (NEON, and portable)", () => {
    expect(objects.size, "the objects of the previous test").toBeGreaterThan(0);
    const kernels = [...objects].filter(([src]) => !src.endsWith("addon.cc")).map(([, obj]) => obj);
    const exe = join(out, "neon-check");
    const build = spawnSync(CXX, ["-std=c++17", "-O1", "-static", "-pthread", "test/kernels/arm64-neon-check.cc", ...kernels, "-o", exe], { encoding: "utf8" });
    expect(build.status, `the check does not build:\n${build.stderr}`).toBe(0);
    for (const simd of ["neon", "portable"]) {
      const run = spawnSync(QEMU!, [exe], { encoding: "utf8", env: { ...process.env, SINKFLEX_SIMD: simd, SINKFLEX_THREADS: "2" }, timeout: 300_000 });
      expect(run.status, `under SINKFLEX_SIMD=${simd}:\n${run.stderr}${run.stdout}`).toBe(0);
      const res = JSON.parse(run.stdout) as { simd: string; products: number; worst: number };
      // every AArch64 CPU has NEON: it is the level unless SINKFLEX_SIMD=portable lowers it
      expect(res.simd).toBe(simd);
      expect(res.products).toBeGreaterThan(400);
    }
  }, 900_000);
});
