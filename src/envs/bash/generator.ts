/**
 * Generated bash tasks over the suite's trees, in three levels:
 * 1 — one command reading one file or folder (line counts, heads, listings, sizes);
 * 2 — pipelines over a folder tree (find + xargs/exec, grep, sort, wc);
 * 3 — commands that change the tree (delete by age and name, chmod, copy, rename), whose effect the
 *     reward checks through the resulting tree.
 * Each task's request and reference command come from the same template, filled with names that exist
 * in the tree (read from the tree's spec), so every reference prints something or changes something.
 * This file only writes tasks; it runs nothing.
 */
import { Rng } from "../../core/index.js";
import { FILE_SYSTEMS, fileSystem, type FileSystemName } from "./fixtures.js";
import { bashTaskKey, type BashTask } from "./tasks.js";

interface TreeFacts {
  fs: FileSystemName;
  mount: string;
  files: Array<{ path: string; ext: string; ageDays: number; text: boolean; lines: number; words: string[] }>;
  dirs: string[];
}

function factsOf(fs: FileSystemName): TreeFacts {
  const spec = fileSystem(fs);
  const files: TreeFacts["files"] = [];
  const dirs = new Set<string>([spec.mountPoint]);
  for (const node of spec.nodes) {
    const abs = `${spec.mountPoint}/${node.path}`;
    if (node.kind === "dir") dirs.add(abs);
    if (node.kind !== "file") continue;
    const content = node.content ?? "";
    const text = typeof content === "string";
    const base = node.path.split("/").pop()!;
    const ext = base.includes(".") && !base.startsWith(".") ? base.split(".").pop()! : "";
    const body = text ? (content as string) : "";
    files.push({
      path: abs,
      ext,
      ageDays: (node.ageSeconds ?? 0) / 86_400,
      text,
      lines: text ? body.split("\n").length - 1 : 0,
      words: text ? [...new Set(body.toLowerCase().match(/\b[a-z]{4,}\b/g) ?? [])] : [],
    });
  }
  return { fs, mount: spec.mountPoint, files, dirs: [...dirs].sort() };
}

type Template = (f: TreeFacts, rng: Rng) => { query: string; gold: string } | undefined;

const inDir = (f: TreeFacts, dir: string) => f.files.filter((x) => x.path.startsWith(`${dir}/`));
const shortest = (f: TreeFacts) => f.files.filter((x) => x.text && x.lines >= 2);

const LEVEL1: Template[] = [
  (f, rng) => {
    const x = rng.pick(shortest(f));
    return { query: `Count the lines of the file ${x.path}.`, gold: `wc -l < ${x.path}` };
  },
  (f, rng) => {
    const x = rng.pick(shortest(f));
    const n = rng.range(1, 3);
    return { query: `Print the first ${n} line${n > 1 ? "s" : ""} of ${x.path}.`, gold: `head -n ${n} ${x.path}` };
  },
  (f, rng) => {
    const d = rng.pick(f.dirs.filter((d) => inDir(f, d).length > 0));
    return { query: `List the names of the entries directly in ${d}, one per line, in alphabetical order, hidden ones excluded.`, gold: `ls -1 ${d}` };
  },
  (f, rng) => {
    const x = rng.pick(f.files);
    return { query: `Print the size in bytes of the file ${x.path}.`, gold: `stat -c %s ${x.path}` };
  },
];

const LEVEL2: Template[] = [
  (f, rng) => {
    const ext = rng.pick([...new Set(f.files.map((x) => x.ext).filter((e) => e))]);
    return { query: `Count the regular files whose names end in ".${ext}" anywhere under ${f.mount}.`, gold: `find ${f.mount} -type f -name '*.${ext}' | wc -l` };
  },
  (f, rng) => {
    const exts = [...new Set(f.files.filter((x) => x.text && x.ext).map((x) => x.ext))];
    const ext = rng.pick(exts);
    return { query: `Print the total number of lines in all ".${ext}" files under ${f.mount}.`, gold: `find ${f.mount} -type f -name '*.${ext}' -exec cat {} + | wc -l` };
  },
  (f, rng) => {
    const words = [...new Set(f.files.flatMap((x) => x.words))].sort();
    const w = rng.pick(words);
    return { query: `List, sorted, the paths of the files under ${f.mount} that contain the word "${w}" (any case).`, gold: `grep -ril '${w}' ${f.mount} | sort` };
  },
  (f, rng) => {
    const n = rng.range(2, 4);
    return { query: `Print the ${n} largest regular files under ${f.mount} as "<size in bytes> <path>", largest first.`, gold: `find ${f.mount} -type f -printf '%s %p\\n' | sort -k1,1nr -k2 | head -n ${n}` };
  },
];

const LEVEL3: Template[] = [
  (f, rng) => {
    const exts = [...new Set(f.files.filter((x) => x.ext && x.ageDays >= 2).map((x) => x.ext))];
    const ext = rng.pick(exts);
    const ages = f.files.filter((x) => x.ext === ext).map((x) => x.ageDays);
    const days = Math.max(1, Math.floor(Math.max(...ages)) - 1);
    return { query: `Delete every ".${ext}" file under ${f.mount} last modified more than ${days} days ago.`, gold: `find ${f.mount} -type f -name '*.${ext}' -mtime +${days} -delete` };
  },
  (f, rng) => {
    const ext = rng.pick([...new Set(f.files.map((x) => x.ext).filter((e) => e))]);
    const mode = rng.pick(["600", "640", "700", "755"]);
    return { query: `Set the permissions of every ".${ext}" file under ${f.mount} to ${mode}.`, gold: `find ${f.mount} -type f -name '*.${ext}' -exec chmod ${mode} {} +` };
  },
  (f, rng) => {
    const d = rng.pick(f.dirs.filter((d) => inDir(f, d).some((x) => x.ext === "txt" && x.path.split("/").length === d.split("/").length + 1)));
    if (!d) return undefined;
    return { query: `Create the folder ${d}/backup and copy every ".txt" file directly in ${d} into it.`, gold: `mkdir -p ${d}/backup && cp ${d}/*.txt ${d}/backup/` };
  },
  (f, rng) => {
    const ext = rng.pick([...new Set(f.files.map((x) => x.ext).filter((e) => e))]);
    return { query: `Rename every ".${ext}" file under ${f.mount} by adding ".bak" to the end of its name.`, gold: `find ${f.mount} -type f -name '*.${ext}' -exec mv {} {}.bak \\;` };
  },
];

const LEVELS: Template[][] = [LEVEL1, LEVEL2, LEVEL3];

/** The `index`-th generated task; the same seed, level and index always give the same task. */
export function generateBashTask(options: { seed: number; difficulty?: 1 | 2 | 3 }, index: number): BashTask {
  const level = options.difficulty ?? (((index % 3) + 1) as 1 | 2 | 3);
  const rng = new Rng((options.seed * 2_654_435_761 + index * 40_503 + level) >>> 0);
  // Levels cycle fastest, then trees: any 9 consecutive tasks cover every level on every tree.
  const fs = FILE_SYSTEMS[Math.floor(index / 3) % FILE_SYSTEMS.length]!;
  const facts = factsOf(fs);
  for (let attempt = 0; attempt < 20; attempt++) {
    const template = rng.pick(LEVELS[level - 1]!);
    let made: { query: string; gold: string } | undefined;
    try {
      made = template(facts, rng);
    } catch {
      made = undefined; // nothing in this tree fits the template
    }
    if (made) return { id: `gen/${options.seed}/${options.difficulty ?? "mixed"}/${index}`, key: bashTaskKey(fs, made.gold), fs, ...made, difficulty: level };
  }
  throw new Error(`bash generator: no template fits (seed ${options.seed}, index ${index}, level ${level})`);
}
