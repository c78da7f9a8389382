/**
 * The bash suite's tasks: NL2Bash execution tasks (`../shared/data/nl2bash/exec/nl2bash_fs_{1,2,3}.json`,
 * `{query, gold}` over the `/testbed`, `/system` and `/workspace` trees) and generated ones (generator.ts).
 *
 * The data folder is `../shared/data` next to the repository (resolved from this file's location), or
 * `SINKFLEX_DATA_DIR` when set. This file reads files; it runs nothing.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { FileSystemName } from "./fixtures.js";

export interface BashTask {
  /** Stable id: `nl2bash/fs_<n>/<index>` or `gen/<seed>/<level>/<index>`. */
  id: string;
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
  if (process.env.SINKFLEX_DATA_DIR) return resolve(process.env.SINKFLEX_DATA_DIR);
  // src/envs/bash -> repository root -> ../shared/data
  return fileURLToPath(new URL("../../../../shared/data", import.meta.url));
}

const FS_OF_FILE: Record<string, FileSystemName> = { "1": "testbed", "2": "system", "3": "workspace" };

/**
 * The NL2Bash execution tasks, in file order (fs_1, fs_2, fs_3). `file` reads one task file in the same
 * format instead; its file system is taken from its name (`..._1.json` -> /testbed, `_2` -> /system,
 * `_3` -> /workspace) unless `fs` says.
 */
export function loadNl2BashTasks(options: { file?: string; fs?: FileSystemName } = {}): BashTask[] {
  const files = options.file ? [options.file] : ["1", "2", "3"].map((n) => join(dataDir(), "nl2bash", "exec", `nl2bash_fs_${n}.json`));
  const tasks: BashTask[] = [];
  for (const path of files) {
    if (!existsSync(path)) throw new Error(`bash: the task file ${path} does not exist (set SINKFLEX_DATA_DIR, or pass a file of [{query, gold}])`);
    const n = /_(\d)\.json$/.exec(path)?.[1];
    const fs = options.fs ?? (n ? FS_OF_FILE[n] : undefined);
    if (!fs) throw new Error(`bash: cannot tell which tree ${path} runs on; name it *_1.json, *_2.json or *_3.json, or pass fs`);
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
      tasks.push({ id: `nl2bash/fs_${n ?? "x"}/${i}`, fs, query: t.query, gold: t.gold });
    });
  }
  return tasks;
}
