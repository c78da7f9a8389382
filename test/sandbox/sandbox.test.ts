/**
 * The sandbox against escape attempts, on each isolation backend (one not available here is reported
 * as skipped, with why): network access,
 * writing or reading outside the tree, a fork bomb, endless output, a command that never returns,
 * memory and file-size bombs, filling the disk. Each must end with a clear limit or error and leave
 * nothing behind.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatResult } from "../../src/envs/bash/episode.js";
import { describeRun } from "../../src/envs/code/workspace.js";
import { buildTree, diffSnapshots, makeTreeDir, probeIsolation, removeTree, Sandbox, snapshotTree, treeDiskUsage, type IsolationKind } from "../../src/sandbox/index.js";

const KINDS: IsolationKind[] = ["bwrap", "unshare"];
const backends = KINDS.filter((k) => probeIsolation(k) === undefined);

/** Processes of a uid on the host (none may outlive a command). */
function processesOf(uid: number | undefined): string {
  if (uid === undefined) return "";
  try {
    return execFileSync("ps", ["-o", "pid=,stat=,comm=", "-u", String(uid)], { encoding: "utf8" }).split("\n").filter((l) => l.trim() && !/^\s*\d+\s+Z/.test(l)).join("\n");
  } catch {
    return ""; // ps exits 1 when there are none
  }
}

// This file's own temporary folder, so that what other test files create at the same time is not counted.
const scratch = mkdtempSync(join(tmpdir(), "sinkflex-test-sandbox-"));
chmodSync(scratch, 0o755); // the sandbox's uid must reach the folders created inside
process.env.TMPDIR = scratch;

afterAll(() => {
  const left = readdirSync(scratch);
  rmSync(scratch, { recursive: true, force: true });
  expect(left, "nothing may be left in the temporary folder").toEqual([]);
});

describe("sandbox", () => {
  it("has an isolation backend here", () => {
    expect(backends.length, `no backend: bwrap: ${probeIsolation("bwrap")}; unshare: ${probeIsolation("unshare")}`).toBeGreaterThan(0);
  });

  for (const kind of KINDS) {
    const unavailable = probeIsolation(kind);
    if (unavailable) {
      it.skip(`${kind}: not available on this machine (${unavailable})`, () => {});
      continue;
    }
    describe(kind, () => {
      let tree: string;
      let outside: string;
      let sandbox: Sandbox;
      let server: Server;
      let port = 0;
      let connections = 0;

      beforeAll(async () => {
        tree = makeTreeDir();
        buildTree(tree, [
          { path: "a.txt", kind: "file", content: "hello\n" },
          { path: "sub/b.sh", kind: "file", content: "echo hi\n", mode: 0o755, ageSeconds: 86_400 * 10 },
          { path: "link", kind: "symlink", target: "a.txt" },
        ]);
        outside = mkdtempSync(join(tmpdir(), "sinkflex-outside-"));
        writeFileSync(join(outside, "secret.txt"), "host secret\n");
        sandbox = new Sandbox({ tree, mountPoint: "/testbed", isolation: kind, limits: { timeoutMs: 2_000, maxOutputBytes: 4_096, maxProcesses: 32, memoryBytes: 256 * 1024 ** 2, maxFileBytes: 1024 ** 2 } });
        server = createServer((s) => {
          connections++;
          s.destroy();
        });
        await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
        port = (server.address() as { port: number }).port;
      });

      afterAll(async () => {
        sandbox.close();
        sandbox.close(); // twice is safe
        await new Promise<void>((resolve) => server.close(() => resolve()));
        removeTree(tree);
        rmSync(outside, { recursive: true, force: true });
      });

      it("runs a shell in the tree, which it may change", async () => {
        expect(sandbox.isolation).toBe(kind);
        const r = await sandbox.exec("pwd; cat a.txt; ls sub; echo new > c.txt; hostname");
        expect(r).toMatchObject({ stdout: "/testbed\nhello\nb.sh\nsandbox\n", exitCode: 0 });
        expect(readFileSync(join(tree, "c.txt"), "utf8")).toBe("new\n");
        expect((await sandbox.exec("exit 3")).exitCode).toBe(3);
      });

      it("cannot reach the network, not even the host's loopback", async () => {
        const r = await sandbox.exec(`exec 3<>/dev/tcp/127.0.0.1/${port} && echo connected`);
        expect(r.stdout).toBe("");
        expect(r.exitCode).not.toBe(0);
        expect(r.stderr).toMatch(/Connection refused|Network is unreachable/);
        expect(connections).toBe(0);
      });

      it("cannot see or write anything outside the tree", async () => {
        const r = await sandbox.exec(`cat ${outside}/secret.txt; echo x > ${outside}/pwned; echo x > /etc/passwd; touch /usr/bin/pwned /pwned; ls /work /root /home`);
        expect(r.stderr).toMatch(/No such file or directory/);
        expect(r.stderr).toMatch(/Read-only file system/);
        expect(r.stdout).toBe("");
        expect(existsSync(join(outside, "pwned"))).toBe(false);
        expect(existsSync("/usr/bin/pwned") || existsSync("/pwned")).toBe(false);
        expect(readFileSync(join(outside, "secret.txt"), "utf8")).toBe("host secret\n");
      });

      it("contains a fork bomb with the process limit", async () => {
        const r = await sandbox.exec(":(){ :|:& };:; sleep 1; echo survived");
        expect(r.limit).toBe("processes");
        expect(r.durationMs).toBeLessThan(8_000);
        expect(processesOf(sandbox.uid)).toBe("");
      });

      it("kills endless output at the output limit", async () => {
        const r = await sandbox.exec("yes");
        expect(r.limit).toBe("output");
        expect(r.stdout.length).toBeLessThanOrEqual(4_096);
        expect(r.exitCode).toBeNull();
      });

      it("kills a command that never returns, with everything it started", async () => {
        const r = await sandbox.exec("sleep 1000 & sleep 1000");
        expect(r.limit).toBe("timeout");
        expect(r.durationMs).toBeLessThan(8_000);
        expect(processesOf(sandbox.uid)).toBe("");
      });

      it("refuses memory and file-size bombs", async () => {
        const mem = await sandbox.exec("python3 -c 'x = bytearray(1024 ** 3)'");
        expect(mem.limit).toBe("memory");
        const big = await sandbox.exec("head -c 10000000 /dev/zero > big.bin");
        expect(big.stderr).toMatch(/File size limit exceeded/);
        expect(statSync(join(tree, "big.bin")).size).toBeLessThanOrEqual(1024 ** 2);
      });

      it("stops a command that fills the tree past its disk quota, with an error the agent can read", async () => {
        const quota = 8 * 1024 ** 2;
        const own = makeTreeDir("sinkflex-bash-");
        const small = new Sandbox({ tree: own, mountPoint: "/testbed", isolation: kind, limits: { diskBytes: quota, timeoutMs: 30_000 } });
        try {
          // Many files, each under the per-file limit: only the quota can stop this (500 MiB otherwise).
          const many = await small.exec("for i in $(seq 1 500); do head -c 1M /dev/zero > f$i; done; echo finished");
          expect(many.limit).toBe("disk");
          expect(many.exitCode).toBeNull();
          expect(many.stdout).toBe("");
          expect(many.stderr).toMatch(/sandbox: disk quota of 8 MiB exceeded/);
          // The watcher looks every 20 ms: what was written meanwhile is the bound (measured: 2 to 8 MiB).
          expect(treeDiskUsage(own)).toBeLessThanOrEqual(quota + 32 * 1024 ** 2);
          const shown = formatResult(many, small.limits);
          expect(shown).toMatch(/disk quota of 8 MiB exceeded/);
          expect(shown).toMatch(/Delete files to make room/);
          const described = describeRun(many, small.limits);
          expect(described).toMatch(/disk quota of 8 MiB exceeded/);
          expect(described).toMatch(/\[stopped: the files in \/repo went past their disk quota of 8 MiB; delete files to make room\]/);

          // Over the quota, a command may still delete files; then one big file is cut at the quota.
          const cleanup = await small.exec("rm -f f*; echo cleaned");
          expect(cleanup).toMatchObject({ stdout: "cleaned\n", exitCode: 0 });
          expect(cleanup.limit).toBeUndefined();
          const big = await small.exec("head -c 100M /dev/zero > big.bin");
          expect(big.limit).toBe("disk");
          expect(big.stderr).toMatch(/disk quota of 8 MiB exceeded: no file may grow past/);
          expect(treeDiskUsage(own)).toBeLessThanOrEqual(quota);
          expect(describeRun(big, small.limits)).toMatch(/\[the file was cut: the files in \/repo may hold at most 8 MiB \(disk quota\); delete files to make room\]/);
        } finally {
          small.close();
          removeTree(own);
        }
      });
    });
  }
});

describe("tree snapshots", () => {
  it("compare contents, modes and links, not times", () => {
    const spec = [
      { path: "x/y.txt", kind: "file" as const, content: "1", mode: 0o600, ageSeconds: 100 },
      { path: "x/z", kind: "symlink" as const, target: "y.txt" },
    ];
    const a = makeTreeDir();
    const b = makeTreeDir();
    try {
      buildTree(a, spec, 1_000_000);
      buildTree(b, spec, 2_000_000);
      expect(diffSnapshots(snapshotTree(a), snapshotTree(b))).toEqual([]);
      expect(statSync(join(a, "x/y.txt")).mtimeMs).toBe((1_000_000 - 100) * 1000);
      writeFileSync(join(b, "x/y.txt"), "2");
      writeFileSync(join(b, "x/new"), "");
      expect(diffSnapshots(snapshotTree(a), snapshotTree(b))).toEqual(["/x/y.txt has different contents", "unexpected file /x/new"]);
    } finally {
      removeTree(a);
      removeTree(b);
    }
  });
});
