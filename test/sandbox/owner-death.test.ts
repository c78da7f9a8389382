/**
 * What a sandbox leaves when the process that owns it is SIGKILLed (an env server that crashes or is
 * killed), on each isolation backend (one not available here is reported as skipped, with why): none
 * of its processes may keep running, whether the owner dies while the command runs (in a new session,
 * or without privileges in a user namespace of its own) or while bwrap or unshare is still setting the
 * namespace up, and its folders (the episode tree, the sandbox's support folder) are removed by the
 * next sandbox that starts, while folders of live owners stay. The owner is a real Node process
 * (owner-process.ts); processes are found through /proc.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { killStaleProcesses, makeTreeDir, ownerMark, probeIsolation, removeStaleFolders, removeTree, Sandbox, type IsolationKind } from "../../src/sandbox/index.js";

const KINDS: IsolationKind[] = ["bwrap", "unshare"];

/** Live (not zombie) processes whose command line holds `marker`: "pid uid=U: command line". */
function processesWith(marker: string): string[] {
  const found: string[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ").trim();
      if (!cmdline.includes(marker)) continue;
      const status = readFileSync(`/proc/${name}/status`, "utf8");
      if (/^State:\s+Z/m.test(status)) continue;
      found.push(`${name} uid=${/^Uid:\s+(\d+)/m.exec(status)?.[1]}: ${cmdline.slice(0, 120)}`);
    } catch {
      // gone while we looked
    }
  }
  return found;
}

async function waitFor<T>(what: string, timeoutMs: number, probe: () => T | undefined): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const scratch = mkdtempSync(join(tmpdir(), "sinkflex-test-owner-"));
chmodSync(scratch, 0o755);
process.env.TMPDIR = scratch;

afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
});

/** SIGKILLs what is left of a failed run, so that its sleeps do not stay on the machine. */
function killAll(marker: string): void {
  for (const p of processesWith(marker)) {
    try {
      process.kill(Number(p.split(" ")[0]), "SIGKILL");
    } catch {}
  }
}

/** A new owner process (owner-process.ts) for `marker`, with its stdout and stderr collected. */
function startOwner(marker: string, kind: IsolationKind, mode: "running" | "starting") {
  const owner: ChildProcess = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "owner-process.ts"), marker, kind, mode], {
    env: { ...process.env, TMPDIR: scratch },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const io = { out: "", err: "" };
  owner.stdout!.on("data", (d: Buffer) => (io.out += d.toString()));
  owner.stderr!.on("data", (d: Buffer) => (io.err += d.toString()));
  const exited = new Promise<void>((resolve) => owner.on("exit", () => resolve()));
  return { owner, io, exited };
}

function newMarker(): string {
  return `${80_000 + Math.floor(Math.random() * 10_000)}.${process.pid}${Math.floor(Math.random() * 1000)}`;
}

/** The processes holding `marker` once they are all gone (within `ms`), or those still there. */
async function leftAfter(marker: string, ms: number): Promise<string[]> {
  let left: string[] = [];
  try {
    await waitFor("the sandbox's processes end", ms, () => ((left = processesWith(marker)).length === 0 ? true : undefined));
  } catch {
    // reported by the caller
  }
  return left;
}

describe("when the owner of a sandbox is SIGKILLed", () => {
  for (const kind of KINDS) {
    const unavailable = probeIsolation(kind);
    if (unavailable) {
      it.skip(`${kind}: not available on this machine (${unavailable})`, () => {});
      continue;
    }

    it(`${kind}: while its command runs, no process of the sandbox stays (new session, own user namespace, dropped uid included), and the next sandbox removes its folders but not a live owner's`, async () => {
      const marker = newMarker();
      const { owner, io, exited } = startOwner(marker, kind, "running");
      try {
        // The sandboxed command runs: its four sleeps are visible from here.
        await waitFor(`the owner's four sandboxed sleeps ${marker} start (owner's stderr: ${io.err})`, 30_000, () =>
          processesWith(marker).filter((p) => p.includes(`: sleep ${marker}`)).length === 4 ? true : undefined,
        );
        const [, isolation, uid] = io.out.trim().split(" ");
        expect(isolation, "the owner's sandbox uses the backend under test").toBe(kind);
        if (process.getuid?.() === 0) {
          // Run as root, the sandbox drops to its own uid: the parent-death signal must survive that.
          expect(Number(uid)).toBeGreaterThan(0);
          for (const p of processesWith(marker).filter((p) => p.includes(`: sleep ${marker}`))) expect(p).toContain(`uid=${uid}:`);
        }
        const ownerFolders = readdirSync(scratch).filter((n) => n.startsWith("sinkflex-"));
        expect(ownerFolders.some((n) => n.startsWith("sinkflex-bash-"))).toBe(true);
        expect(ownerFolders.some((n) => n.startsWith("sinkflex-sandbox-"))).toBe(true);

        owner.kill("SIGKILL");
        await exited;
        // Every process of the tree (launcher, namespace, shells, all sleeps) is gone within seconds.
        expect(await leftAfter(marker, 10_000), "processes left running after their owner died").toEqual([]);

        // Folders: a live owner's (this process's), one whose pid was reused (same pid, other start
        // time) and one without an owner mark, next to the dead owner's.
        const live = makeTreeDir("sinkflex-bash-");
        const reused = join(scratch, `sinkflex-bash-${ownerMark().replace(/-\d+$/, "-1")}-AAAAAA`);
        const unmarked = join(scratch, "sinkflex-bash-AAAAAA");
        mkdirSync(reused);
        mkdirSync(unmarked);
        const sandbox = new Sandbox({ tree: live, mountPoint: "/testbed", isolation: kind });
        try {
          const now = readdirSync(scratch);
          for (const name of ownerFolders) expect(now, `the dead owner's ${name} is removed`).not.toContain(name);
          expect(existsSync(live), "a live owner's tree is kept").toBe(true);
          expect(existsSync(reused), "a folder whose pid now belongs to another process is removed").toBe(false);
          expect(existsSync(unmarked), "a folder without an owner mark is kept").toBe(true);
          expect((await sandbox.exec("echo ok")).stdout).toBe("ok\n");
          expect(removeStaleFolders(scratch), "nothing of a live owner is removed").toEqual([]);
        } finally {
          sandbox.close();
          removeTree(live);
          removeTree(unmarked);
        }
      } finally {
        owner.kill("SIGKILL");
        killAll(marker);
      }
    }, 60_000);

    it(`${kind}: while the namespace is still being set up, its command never runs on, and the next sandbox ends what is left`, async () => {
      // Three owners at once, each killing itself as soon as its launcher has forked the namespace's
      // first process (before bwrap or unshare arms that process's parent-death signal).
      const markers = [newMarker(), newMarker(), newMarker()];
      const owners = markers.map((m) => startOwner(m, kind, "starting"));
      try {
        await Promise.all(owners.map((o) => o.exited));
        for (const o of owners) expect(o.io.err, "the owner died where it meant to").toBe("");
        // The command either never started or is killed: no sleep of it runs after a few seconds.
        const sleeping = async () => {
          const left: string[] = [];
          for (const m of markers) for (const p of await leftAfter(m, 5_000)) if (p.includes(`: sleep ${m}`)) left.push(p);
          return left;
        };
        const left = await sleeping();
        expect(left, "commands left running after their owner died during start-up").toEqual([]);
        // A first process still waiting for its dead launcher is ended by the next sandbox.
        const tree = makeTreeDir("sinkflex-bash-");
        const sandbox = new Sandbox({ tree, mountPoint: "/testbed", isolation: kind });
        try {
          for (const m of markers) expect(await leftAfter(m, 5_000), "processes left after the next sandbox started").toEqual([]);
        } finally {
          sandbox.close();
          removeTree(tree);
        }
      } finally {
        for (const o of owners) o.owner.kill("SIGKILL");
        for (const m of markers) killAll(m);
      }
    }, 60_000);
  }

  it("a process naming a dead owner's sandbox folder is ended; one naming a live owner's is not", async () => {
    // What bwrap leaves when its launcher dies before letting the namespace's first process go on.
    const dead = `sinkflex-sandbox-${ownerMark().replace(/-\d+$/, "-1")}-AAAAAA`;
    const alive = `sinkflex-sandbox-${ownerMark()}-BBBBBB`;
    const marker = newMarker();
    const start = (folder: string) => spawn(process.execPath, ["-e", "setTimeout(() => {}, 60_000)", marker, join(scratch, folder, "etc")], { stdio: "ignore" });
    const [a, b] = [start(dead), start(alive)];
    try {
      await waitFor("both stand-ins run", 10_000, () => (processesWith(marker).length === 2 ? true : undefined));
      expect(killStaleProcesses()).toEqual([a.pid]);
      await waitFor("the dead owner's is gone", 10_000, () => (processesWith(marker).length === 1 ? true : undefined));
      expect(processesWith(marker)[0]).toMatch(new RegExp(`^${b.pid} `));
    } finally {
      a.kill("SIGKILL");
      b.kill("SIGKILL");
    }
  });
});
