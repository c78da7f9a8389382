/**
 * Owner marks on the sandbox's temporary folders, and removal of the folders whose owner is gone.
 *
 * Every temporary folder the sandbox module creates (episode trees, a sandbox's own support folder)
 * carries its owner in its name: `<prefix><pid namespace>-<pid>-<start time>-XXXXXX`, the start time
 * being field 22 of /proc/<pid>/stat (clock ticks since boot), so a recycled pid is not taken for the
 * owner. The mark is in the name, not in a file inside, because a tree is what the sandboxed command
 * sees and what snapshots compare. `removeStaleFolders` removes the marked folders whose owner no
 * longer runs; a folder whose owner is alive, whose owner lives in another pid namespace, or whose
 * name carries no mark is never touched. `killStaleProcesses` ends the processes that still name a
 * dead owner's sandbox folder.
 *
 * This file knows nothing of isolation or of what the folders hold, beyond the support folder's name.
 */
import { readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The process's start time in clock ticks since boot, or undefined when it does not run (or /proc cannot tell). */
export function processStartTime(pid: number): number | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name (field 2) may hold spaces and parentheses: count fields after the last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  if (fields[0] === "Z" || fields[0] === "X") return undefined; // exited, not yet reaped
  const start = Number(fields[19]);
  return Number.isInteger(start) ? start : undefined;
}

/** The inode of this process's pid namespace (0 when /proc cannot tell: such folders are never judged). */
function pidNamespace(): number {
  try {
    return Number(/\[(\d+)\]/.exec(readlinkSync("/proc/self/ns/pid"))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** This process's owner mark, `<pid namespace>-<pid>-<start time>`, to put in a folder's name. */
export function ownerMark(pid = process.pid): string {
  return `${pidNamespace()}-${pid}-${processStartTime(pid) ?? 0}`;
}

/** Names the sandbox module gives its temporary folders: `sinkflex-<kind>-<ns>-<pid>-<start>-XXXXXX`. */
const MARKED = /^sinkflex-[a-z]+-(\d+)-(\d+)-(\d+)-[A-Za-z0-9]{6}$/;

/** Whether the owner written in a marked folder name `name` is gone; undefined when the name carries no mark. */
export function ownerGone(name: string): boolean | undefined {
  const m = MARKED.exec(name);
  if (!m) return undefined;
  const [ns, pid, start] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (ns === 0 || start === 0 || ns !== pidNamespace()) return false; // cannot tell: keep it
  return processStartTime(pid) !== start;
}

/**
 * SIGKILLs every process (other than this one) whose command line names a sandbox support folder
 * (`sinkflex-sandbox-<mark>-XXXXXX`) whose owner is gone, and returns their pids. Only the launchers
 * of a sandbox name that folder (bwrap binds its `etc/`, unshare's setup script mounts it); what is
 * left of them is a namespace's first process that bwrap or unshare was still setting up when its
 * owner died, which would otherwise wait forever. Processes it may not signal are skipped.
 */
export function killStaleProcesses(): number[] {
  const killed: number[] = [];
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((n) => /^\d+$/.test(n) && Number(n) !== process.pid);
  } catch {
    return [];
  }
  const verdicts = new Map<string, boolean | undefined>();
  for (const pid of pids) {
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      continue; // gone, or not ours to read
    }
    for (const m of cmdline.matchAll(/sinkflex-sandbox-\d+-\d+-\d+-[A-Za-z0-9]{6}/g)) {
      if (!verdicts.has(m[0])) verdicts.set(m[0], ownerGone(m[0]));
      if (verdicts.get(m[0]) !== true) continue;
      try {
        process.kill(Number(pid), "SIGKILL");
        killed.push(Number(pid));
      } catch {
        // exited meanwhile, or another user's
      }
      break;
    }
  }
  return killed;
}

/**
 * Removes every marked folder directly under `dir` (default: the temporary folder) whose owner is
 * gone, and returns their paths. Never throws: a folder that cannot be removed is left for next time.
 */
export function removeStaleFolders(dir = tmpdir()): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    if (ownerGone(name) !== true) continue;
    const path = join(dir, name);
    try {
      rmSync(path, { recursive: true, force: true });
      removed.push(path);
    } catch {
      // e.g. a folder the command made unreadable under an unprivileged user: left for next time
    }
  }
  return removed;
}
