// Builds the native kernel addon (native/binding.gyp) with node-gyp during `npm install`.
// It never downloads anything: it uses the Node.js headers installed with node itself.
// If the build fails, installation still succeeds and sinkflex runs on the TypeScript reference
// kernels (it says so once at run time).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
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
const nodeGyp = join(root, "node_modules", "node-gyp", "bin", "node-gyp.js");
if (!existsSync(nodeGyp)) {
  console.warn("sinkflex: node-gyp is not installed; the native kernels were not built (TypeScript kernels will be used).");
  process.exit(0);
}
console.log("sinkflex: building the native kernels (native/) ...");
const result = spawnSync(process.execPath, [nodeGyp, "rebuild", ...nodedirArgs], {
  cwd: nativeDir,
  stdio: "inherit",
  env: { ...process.env, JOBS: process.env.JOBS ?? "2" },
});
if (result.status !== 0) {
  console.warn("sinkflex: the native kernel build failed; sinkflex will run on the TypeScript reference kernels.");
}
process.exit(0);
