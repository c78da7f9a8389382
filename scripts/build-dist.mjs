// Builds the published form of sinkflex: dist/, the TypeScript sources compiled by `tsc -p tsconfig.build.json`
// (.js, .d.ts, source maps with the sources inlined), plus every file of src/ that is not TypeScript copied
// beside them (the dashboard's static files, the worker entry points *.mjs, ...), so that paths a module
// finds from its own location resolve the same way in src/ and in dist/. Run by `npm run build` and by
// `prepack`. It is not the native kernel build (scripts/build-native.mjs).
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const src = join(root, "src");
const dist = join(root, "dist");

rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(join(root, "package.json")).resolve("typescript/bin/tsc");
const result = spawnSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json")], { cwd: root, stdio: "inherit" });
if (result.status !== 0) {
  console.error("sinkflex build: tsc failed (see above); dist/ is incomplete");
  process.exit(result.status ?? 1);
}

/** Copies every file under `dir` that tsc does not compile (not .ts) to the same place under dist/. */
function copyAssets(dir) {
  let copied = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      copied += copyAssets(path);
    } else if (entry.isFile() && !entry.name.endsWith(".ts")) {
      const to = join(dist, relative(src, path));
      mkdirSync(dirname(to), { recursive: true });
      copyFileSync(path, to);
      copied++;
    }
  }
  return copied;
}

const copied = copyAssets(src);
console.log(`sinkflex build: dist/ compiled, ${copied} asset files copied from src/`);
