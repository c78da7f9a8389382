/**
 * File trees for sandboxes: build one from a declarative spec (files with contents, modes and ages,
 * folders, symlinks), take a snapshot (paths, kinds, modes, sizes, content hashes, link targets) and
 * compare two snapshots. Modification times are set when building but left out of snapshots, so two
 * trees built or changed at different moments compare equal when their contents do. `treeDiskUsage`
 * is what a tree holds against the sandbox's disk quota.
 *
 * A tree's folder name carries its owner process (owner.ts), so that a tree left behind by a process
 * that died is removed when the next sandbox starts. This file knows nothing of isolation (see
 * sandbox.ts and isolation.ts).
 */
import { createHash } from "node:crypto";
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, utimesSync, lutimesSync, writeFileSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { ownerMark } from "./owner.js";

export interface TreeNode {
  /** Relative path inside the tree, "/"-separated. */
  path: string;
  kind: "file" | "dir" | "symlink";
  /** File contents (text is written as UTF-8). */
  content?: string | Buffer;
  /** Permission bits, e.g. 0o644 (files), 0o755 (folders). */
  mode?: number;
  /** Age in seconds at build time (modification and access time = now - age). */
  ageSeconds?: number;
  /** Symlink target. */
  target?: string;
}

/**
 * A fresh, empty host folder for one tree (remove it with `removeTree`), named
 * `<prefix><owner mark>-XXXXXX`. With a prefix of the form `sinkflex-<letters>-`, the folder is
 * removed by the next sandbox that starts after this process is gone (see owner.ts).
 */
export function makeTreeDir(prefix = "sinkflex-tree-"): string {
  return mkdtempSync(join(tmpdir(), `${prefix}${ownerMark()}-`));
}

/**
 * Bytes a tree holds on disk: for each entry, the larger of its size and its allocated blocks
 * (folders count their blocks; a file hard-linked twice counts once). Entries that vanish while it
 * walks are skipped, so it may run while a command changes the tree.
 */
export function treeDiskUsage(root: string): number {
  const seen = new Set<number>();
  let total = 0;
  const walk = (abs: string) => {
    let st;
    try {
      st = lstatSync(abs);
    } catch {
      return;
    }
    if (st.nlink > 1 && !st.isDirectory()) {
      if (seen.has(st.ino)) return;
      seen.add(st.ino);
    }
    total += Math.max(st.isDirectory() ? 0 : st.size, st.blocks * 512);
    if (!st.isDirectory()) return;
    let names: string[];
    try {
      names = readdirSync(abs);
    } catch {
      return;
    }
    for (const name of names) walk(join(abs, name));
  };
  walk(root);
  return total;
}

export function removeTree(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Writes `nodes` under `root` (which must exist). Times are set relative to `now` (seconds since the
 * epoch), folders last and deepest first, so listing a folder does not change them.
 */
export function buildTree(root: string, nodes: readonly TreeNode[], now = Math.floor(Date.now() / 1000)): void {
  const dirs = new Map<string, TreeNode | undefined>();
  const ensureDir = (rel: string) => {
    if (rel === "" || rel === ".") return;
    ensureDir(dirname(rel) === "." ? "" : dirname(rel));
    if (!dirs.has(rel)) {
      mkdirSync(join(root, rel), { recursive: true });
      dirs.set(rel, undefined);
    }
  };
  for (const node of nodes) {
    if (node.path.startsWith("/") || node.path.split("/").includes("..")) throw new Error(`buildTree: "${node.path}" must be a relative path inside the tree`);
    const parent = dirname(node.path) === "." ? "" : dirname(node.path);
    ensureDir(parent);
    const abs = join(root, node.path);
    if (node.kind === "dir") {
      ensureDir(node.path);
      dirs.set(node.path, node);
    } else if (node.kind === "symlink") {
      if (node.target === undefined) throw new Error(`buildTree: symlink "${node.path}" needs a target`);
      symlinkSync(node.target, abs);
      const t = now - (node.ageSeconds ?? 0);
      lutimesSync(abs, t, t);
    } else {
      writeFileSync(abs, node.content ?? "");
      chmodSync(abs, node.mode ?? 0o644);
      const t = now - (node.ageSeconds ?? 0);
      utimesSync(abs, t, t);
    }
  }
  const ordered = [...dirs.keys()].sort((a, b) => b.split("/").length - a.split("/").length || (a < b ? 1 : -1));
  for (const rel of ordered) {
    const node = dirs.get(rel);
    const abs = join(root, rel);
    chmodSync(abs, node?.mode ?? 0o755);
    const t = now - (node?.ageSeconds ?? 0);
    utimesSync(abs, t, t);
  }
  chmodSync(root, 0o755);
  utimesSync(root, now, now);
}

export interface SnapshotEntry {
  path: string;
  kind: "file" | "dir" | "symlink" | "other";
  mode: number;
  size: number;
  sha256?: string;
  target?: string;
}

/** Every entry under `root` (root itself as ""), sorted by path. */
export function snapshotTree(root: string): SnapshotEntry[] {
  const out: SnapshotEntry[] = [];
  const walk = (rel: string) => {
    const abs = rel === "" ? root : join(root, rel);
    const st = lstatSync(abs);
    const mode = st.mode & 0o7777;
    if (st.isSymbolicLink()) out.push({ path: rel, kind: "symlink", mode: 0, size: 0, target: readlinkSync(abs) });
    else if (st.isFile()) out.push({ path: rel, kind: "file", mode, size: st.size, sha256: createHash("sha256").update(readFileSync(abs)).digest("hex") });
    else if (st.isDirectory()) {
      out.push({ path: rel, kind: "dir", mode, size: 0 });
      for (const name of readdirSync(abs).sort()) walk(rel === "" ? name : `${rel}/${name}`);
    } else out.push({ path: rel, kind: "other", mode, size: 0 });
  };
  walk("");
  return out;
}

/** Human-readable differences between two snapshots (empty when they are equal), at most `max`. */
export function diffSnapshots(expected: readonly SnapshotEntry[], actual: readonly SnapshotEntry[], max = 20): string[] {
  const a = new Map(expected.map((e) => [e.path, e]));
  const b = new Map(actual.map((e) => [e.path, e]));
  const out: string[] = [];
  const show = (p: string) => `/${p}`;
  for (const [p, e] of a) {
    const f = b.get(p);
    if (!f) out.push(`missing ${e.kind} ${show(p)}`);
    else if (e.kind !== f.kind) out.push(`${show(p)} is a ${f.kind}, expected a ${e.kind}`);
    else if (e.mode !== f.mode) out.push(`${show(p)} has mode ${f.mode.toString(8)}, expected ${e.mode.toString(8)}`);
    else if (e.sha256 !== f.sha256 || e.size !== f.size) out.push(`${show(p)} has different contents`);
    else if (e.target !== f.target) out.push(`${show(p)} points to ${f.target}, expected ${e.target}`);
  }
  for (const [p, f] of b) if (!a.has(p)) out.push(`unexpected ${f.kind} ${show(p)}`);
  return out.slice(0, max);
}
