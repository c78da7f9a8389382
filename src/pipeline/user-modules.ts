/**
 * The user's own modules: files named by `--import` or by a run config's `modules`, each of which
 * registers envs when it is imported (a `ToolEnv` under the user's own id, an MCP server's tools, ...).
 * They are imported in the main thread before a command runs, and again in every data-preparation
 * worker thread sinkflex starts (a worker begins with the bundled envs only), so that a user's env id
 * works wherever a bundled one does. TypeScript modules load through tsx's loader, which the `sinkflex`
 * command and the worker threads register.
 *
 * This file is not the env registry (gym/registry.ts) and does not parse the command line.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { isAbsolute, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { registeredIds } from "../gym/index.js";

/** A module that could not be found or failed while it was imported. */
export class ModuleLoadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModuleLoadError";
  }
}

/** The modules imported so far in this thread (resolved file paths, in load order), with the env ids each registered. */
const loaded = new Map<string, string[]>();

/**
 * A module's file: a path (relative ones from `baseDir`) or a package name resolved from `baseDir`'s
 * node_modules. A missing file is an error that says where it was looked for.
 */
export function resolveModule(spec: string, baseDir: string): string {
  if (spec.trim() === "") throw new ModuleLoadError("an empty module name; give a file (./my-env.ts) or a package name");
  if (spec.startsWith(".") || isAbsolute(spec) || /\.(c|m)?(t|j)sx?$/.test(spec)) {
    const path = resolve(baseDir, spec);
    if (!existsSync(path)) throw new ModuleLoadError(`no module at ${path} (${JSON.stringify(spec)}, resolved from ${baseDir}); check the path`);
    return path;
  }
  try {
    return createRequire(join(baseDir, "package.json")).resolve(spec);
  } catch {
    throw new ModuleLoadError(`cannot find the package ${JSON.stringify(spec)} from ${baseDir}: install it there, or name its file (./path/to/module.ts)`);
  }
}

/**
 * Imports the modules (each once per thread, in order) and returns the env ids they registered. An
 * import that throws is an error naming the module.
 */
export async function importModules(specs: readonly string[], baseDir: string): Promise<string[]> {
  const ids: string[] = [];
  for (const spec of specs) {
    const path = resolveModule(spec, baseDir);
    const known = loaded.get(path);
    if (known) {
      ids.push(...known);
      continue;
    }
    const before = new Set(registeredIds());
    try {
      await import(pathToFileURL(path).href);
    } catch (err) {
      throw new ModuleLoadError(`the module ${path} failed to load: ${err instanceof Error ? err.message : String(err)}`);
    }
    const added = registeredIds().filter((id) => !before.has(id));
    loaded.set(path, added);
    ids.push(...added);
  }
  return ids;
}

/** The user modules imported in this thread, as resolved file paths in load order (what a worker thread imports too). */
export function userModules(): string[] {
  return [...loaded.keys()];
}

/** The env ids the user modules registered: a worker thread that imports `userModules()` can make them. */
export function userEnvIds(): ReadonlySet<string> {
  return new Set([...loaded.values()].flat());
}

/** Node options that preload modules; a worker thread drops them (it loads the user modules itself, after tsx). */
const PRELOAD_FLAGS = new Set(["--import", "--require", "-r", "--loader", "--experimental-loader"]);

/**
 * The Node options a worker thread starts with: the process's own, less its preloads. A preloaded
 * TypeScript module would otherwise run in the worker before tsx's loader is registered there and
 * crash it ("Unknown file extension .ts"); the worker imports `userModules()` itself.
 */
export function workerExecArgv(execArgv: readonly string[] = process.execArgv): string[] {
  const out: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const arg = execArgv[i]!;
    if (PRELOAD_FLAGS.has(arg)) {
      i++;
      continue;
    }
    const eq = arg.indexOf("=");
    if (eq > 0 && PRELOAD_FLAGS.has(arg.slice(0, eq))) continue;
    out.push(arg);
  }
  return out;
}
