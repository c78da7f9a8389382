/**
 * The bash suite's tasks: NL2Bash execution tasks (`../shared/data/nl2bash/exec/nl2bash_fs_{1,2,3}.json`,
 * `{query, gold}` over the `/testbed`, `/system` and `/workspace` trees) and generated ones (generator.ts).
 *
 * The data folder is `../shared/data` next to the repository (resolved from this file's location), or
 * `SINKFLEX_DATA_DIR` when set. This file reads files; it runs nothing.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import type { FileSystemName } from "./fixtures.js";
import { benchmarkDataDir } from "../data-dir.js";

export interface BashTask {
  /**
   * Where the task comes from: `nl2bash/fs_<n>/<index>` for the bundled files, `<file name>/<index>` for
   * a user's task file, `gen/<seed>/<level>/<index>` for generated tasks. A label, not an identity:
   * two files may both have a task 3 (see `key`).
   */
  id: string;
  /** What the task is: a hash of its tree and reference command (`bashTaskKey`), the same in any file. */
  key: string;
  fs: FileSystemName;
  /** The request in English. */
  query: string;
  /** The reference command. */
  gold: string;
  /** 1-3 for generated tasks. */
  difficulty?: number;
}

/** The shared benchmark data folder. */
export function dataDir(): string {
  return benchmarkDataDir();
}

const FS_OF_FILE: Record<string, FileSystemName> = { "1": "testbed", "2": "system", "3": "workspace" };
const TREES: FileSystemName[] = ["testbed", "system", "workspace"];

/**
 * A task's identity: the first 16 hex digits of sha256 over its tree and reference command. Two tasks
 * with the same key run the same command on the same tree, whatever file, position or query they have.
 */
export function bashTaskKey(fs: FileSystemName, gold: string): string {
  return createHash("sha256").update(`${fs}\0${gold}`).digest("hex").slice(0, 16);
}

/** `name` as a tree name, or an error saying which names there are. */
export function parseTreeName(name: string, where = "tree"): FileSystemName {
  if ((TREES as string[]).includes(name)) return name as FileSystemName;
  throw new RangeError(`bash: ${where} must be one of ${TREES.join(", ")} (/testbed, /system, /workspace), got ${JSON.stringify(name)}`);
}

/**
 * The NL2Bash execution tasks, in file order (fs_1, fs_2, fs_3). `file` reads one task file in the same
 * format instead, over the tree `fs` names; without `fs`, the tree is taken from the file's name
 * (`..._1.json` -> /testbed, `_2` -> /system, `_3` -> /workspace). Tasks of a user's file are labelled
 * `<file name>/<index>`; what they are is their `key`, never their file's name.
 */
export function loadNl2BashTasks(options: { file?: string; fs?: FileSystemName } = {}): BashTask[] {
  const bundled = !options.file;
  const files = options.file ? [options.file] : ["1", "2", "3"].map((n) => join(dataDir(), "nl2bash", "exec", `nl2bash_fs_${n}.json`));
  const tasks: BashTask[] = [];
  for (const path of files) {
    if (!existsSync(path)) throw new Error(`bash: the task file ${path} does not exist (set SINKFLEX_DATA_DIR, or pass a file of [{query, gold}])`);
    const n = /_(\d)\.json$/.exec(path)?.[1];
    const fs = options.fs ?? (n ? FS_OF_FILE[n] : undefined);
    if (!fs) throw new Error(`bash: cannot tell which tree ${path} runs on; say it (envs replay --tree testbed|system|workspace, env option tree), or name the file *_1.json, *_2.json or *_3.json`);
    const label = bundled ? `nl2bash/fs_${n}` : basename(path);
    let items: unknown;
    try {
      items = JSON.parse(readFileSync(path, "utf8"));
    } catch (err) {
      throw new Error(`bash: ${path} is not valid JSON (${(err as Error).message})`);
    }
    if (!Array.isArray(items)) throw new Error(`bash: ${path} must hold a JSON array of {query, gold}`);
    items.forEach((item, i) => {
      const t = item as { query?: unknown; gold?: unknown };
      if (typeof t.query !== "string" || typeof t.gold !== "string") throw new Error(`bash: ${path}[${i}] needs string fields query and gold`);
      tasks.push({ id: `${label}/${i}`, key: bashTaskKey(fs, t.gold), fs, query: t.query, gold: t.gold });
    });
  }
  return tasks;
}
