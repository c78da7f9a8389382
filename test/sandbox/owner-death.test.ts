/**
 * What a sandbox leaves when the process that owns it is SIGKILLed (an env server that crashes or is
 * killed): none of its processes may keep running, and its folders (the episode tree, the sandbox's
 * support folder) are removed by the next sandbox that starts, while folders of live owners stay.
 * The owner is a real Node process (owner-process.ts); processes are found through /proc.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { makeTreeDir, ownerMark, probeIsolation, removeStaleFolders, removeTree, Sandbox, type IsolationKind } from "../../src/sandbox/index.js";

const backends = (["bwrap", "unshare"] as IsolationKind[]).filter((k) => probeIsolation(k) === undefined);

/** Live (not zombie) processes whose command line holds `marker`: "pid: command line". */
function processesWith(marker: string): string[] {
  const found: string[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ").trim();
      if (!cmdline.includes(marker)) continue;
      if (/^State:\s+Z/m.test(readFileSync(`/proc/${name}/status`, "utf8"))) continue;
      found.push(`${name}: ${cmdline.slice(0, 120)}`);
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

describe("when the owner of a sandbox is SIGKILLed", () => {
  for (const kind of backends) {
    it(`${kind}: no process of its sandbox stays, and the next sandbox removes its folders but not a live owner's`, async () => {
      const marker = `${80_000 + Math.floor(Math.random() * 10_000)}.${process.pid}${Math.floor(Math.random() * 1000)}`;
      const owner: ChildProcess = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "owner-process.ts"), marker], {
        env: { ...process.env, TMPDIR: scratch },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let ownerErr = "";
      owner.stderr!.on("data", (d: Buffer) => (ownerErr += d.toString()));
      const exited = new Promise<void>((resolve) => owner.on("exit", () => resolve()));
      try {
        // The sandboxed command runs: its sleeps are visible from here.
        await waitFor(`the owner's sandboxed sleep ${marker} starts (owner's stderr: ${ownerErr})`, 30_000, () =>
          processesWith(marker).some((p) => p.includes(`sleep ${marker}`)) ? true : undefined,
        );
        const ownerFolders = readdirSync(scratch).filter((n) => n.startsWith("sinkflex-"));
        expect(ownerFolders.some((n) => n.startsWith("sinkflex-bash-"))).toBe(true);
        expect(ownerFolders.some((n) => n.startsWith("sinkflex-sandbox-"))).toBe(true);

        owner.kill("SIGKILL");
        await exited;
        // Every process of the tree (launcher, namespace, shell, both sleeps) is gone within seconds.
        let left: string[] = [];
        try {
          await waitFor("the sandbox's processes end", 10_000, () => ((left = processesWith(marker)).length === 0 ? true : undefined));
        } catch {
          // reported below
        }
        expect(left, "processes left running after their owner died").toEqual([]);

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
        // On failure, do not leave the sleeps running on the machine.
        for (const p of processesWith(marker)) {
          try {
            process.kill(Number(p.split(":")[0]), "SIGKILL");
          } catch {}
        }
      }
    }, 60_000);
  }
});
