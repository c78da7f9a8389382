/**
 * `sinkflex build-native`: builds the native kernel addon (native/) with node-gyp, then loads it and says
 * what it runs on. It is for an install where npm skipped the package's install script (a path, tarball or
 * git install whose scripts were not approved), which leaves sinkflex on the slow TypeScript reference
 * kernels. The build itself is scripts/build-native.mjs, the same script `npm install` runs; this file only
 * starts it and checks the result.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Command } from "commander";
import { loadNativeKernels, nativeLoadError } from "../../kernels/index.js";

/** The build script, at the package root (the same from src/cli/commands and dist/cli/commands). */
export const BUILD_NATIVE_SCRIPT = fileURLToPath(new URL("../../../scripts/build-native.mjs", import.meta.url));

export function registerBuildNativeCommand(program: Command): void {
  program
    .command("build-native")
    .description("Build the native kernels (a C++ addon; needs a C++17 compiler, make and python3) when npm skipped sinkflex's install script")
    .action(() => {
      if (!existsSync(BUILD_NATIVE_SCRIPT)) throw new Error(`the build script ${BUILD_NATIVE_SCRIPT} is missing; reinstall sinkflex`);
      const result = spawnSync(process.execPath, [BUILD_NATIVE_SCRIPT], { stdio: "inherit", env: { ...process.env, SINKFLEX_SKIP_NATIVE: "", SINKFLEX_BUILD_STRICT: "1" } });
      if (result.status !== 0) {
        process.exitCode = 1;
        return;
      }
      const kernels = loadNativeKernels();
      if (!kernels) {
        console.error(`sinkflex: the build finished but the addon does not load: ${nativeLoadError()}`);
        process.exitCode = 1;
        return;
      }
      console.log("sinkflex: the native kernels are built and load; sinkflex uses them from the next run on.");
    });
}
