// Builds the native kernel addon (native/binding.gyp) with node-gyp: run by `npm install` (the package's
// install script) and by `sinkflex build-native` (when npm skipped the install script, as it does for a
// package installed from a path, a tarball or git until its scripts are approved).
// It never downloads anything: it uses the Node.js headers installed with node itself.
// If the build fails during installation, installation still succeeds and sinkflex runs on the TypeScript
// reference kernels (it says so at run time); with SINKFLEX_BUILD_STRICT=1 (`sinkflex build-native`) a
// failed build exits with status 1.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const nativeDir = join(root, "native");

if (process.env.SINKFLEX_SKIP_NATIVE === "1") {
  console.log("sinkflex: SINKFLEX_SKIP_NATIVE=1, skipping the native kernel build.");
  process.exit(0);
}
if (!existsSync(join(nativeDir, "binding.gyp"))) {
  console.log("sinkflex: no native/binding.gyp, nothing to build.");
  process.exit(0);
}

// Node's own headers: <prefix>/include/node next to the running binary.
const prefix = resolve(dirname(process.execPath), "..");
const nodedirArgs = existsSync(join(prefix, "include", "node", "node_api.h")) ? [`--nodedir=${prefix}`] : [];
const strict = process.env.SINKFLEX_BUILD_STRICT === "1";
// node-gyp is a dependency: in sinkflex's own node_modules, or hoisted into the installing project's.
let nodeGyp;
try {
  nodeGyp = createRequire(join(root, "package.json")).resolve("node-gyp/bin/node-gyp.js");
} catch {
  console.warn("sinkflex: node-gyp is not installed; the native kernels were not built (TypeScript kernels will be used). Install node-gyp, then run `npx sinkflex build-native`.");
  process.exit(strict ? 1 : 0);
}
console.log("sinkflex: building the native kernels (native/) ...");
const result = spawnSync(process.execPath, [nodeGyp, "rebuild", ...nodedirArgs], {
  cwd: nativeDir,
  stdio: "inherit",
  env: { ...process.env, JOBS: process.env.JOBS ?? "2" },
});
if (result.status !== 0) {
  console.warn("sinkflex: the native kernel build failed (see above; it needs a C++17 compiler, make and python3); sinkflex will run on the TypeScript reference kernels. Fix the cause, then run `npx sinkflex build-native`.");
  process.exit(strict ? 1 : 0);
}
process.exit(0);
