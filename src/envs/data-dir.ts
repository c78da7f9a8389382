/**
 * Where the bundled suites read their benchmark data (tau-bench, Spider, NL2Bash, ALFWorld, MINT): the
 * first of
 *   1. `$SINKFLEX_DATA_DIR` when set (used as given, existing or not);
 *   2. `shared/data` beside the repository root (the folder holding sinkflex's package.json, found from
 *      this file's location, not the working directory);
 *   3. in a clone of a local checkout (`git clone <folder> <dir>`), `shared/data` beside the folder it
 *      was cloned from (its `origin`), so a clone made anywhere finds the data its source found;
 * that exists; else the path of 2, which the suites' errors then name with what to do.
 * Resolves paths only; reads no data.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The folder holding sinkflex's package.json, from this file up. */
function repositoryRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let up = 0; up < 8; up++) {
    if (existsSync(join(dir, "package.json"))) return dir;
    dir = dirname(dir);
  }
  throw new Error("cannot find sinkflex's package root to locate ../shared/data; set SINKFLEX_DATA_DIR to the data folder");
}

/** The local folder a git clone at `root` was made from (its origin's URL as a path), if any. */
function localOrigin(root: string): string | undefined {
  let config: string;
  try {
    config = readFileSync(join(root, ".git", "config"), "utf8");
  } catch {
    return undefined;
  }
  const url = /\[remote "origin"\][^[]*?\burl\s*=\s*(.+)/.exec(config)?.[1]?.trim();
  if (!url) return undefined;
  const path = url.startsWith("file://") ? fileURLToPath(url) : url;
  return isAbsolute(path) ? path : undefined;
}

/** The benchmark data folder (see the file comment). */
export function benchmarkDataDir(): string {
  if (process.env.SINKFLEX_DATA_DIR) return resolve(process.env.SINKFLEX_DATA_DIR);
  const root = repositoryRoot();
  const beside = resolve(root, "..", "shared", "data");
  if (existsSync(beside)) return beside;
  const origin = localOrigin(root);
  const besideOrigin = origin ? resolve(origin, "..", "shared", "data") : undefined;
  return besideOrigin && existsSync(besideOrigin) ? besideOrigin : beside;
}
