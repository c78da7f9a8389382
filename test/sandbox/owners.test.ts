/**
 * Owners as sandboxed commands see them, on each isolation backend (one not available here is reported
 * as skipped): two sandboxes with different host uids print the same owner names and ids (`id`,
 * `ls -l`, `stat`, `tar tvf`), all root, while each keeps its own host uid (the tree's files are owned
 * by it on the host) for the process limit and the sweep after each command.
 */
import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { buildTree, makeTreeDir, probeIsolation, removeTree, Sandbox, type IsolationKind } from "../../src/sandbox/index.js";

const scratch = mkdtempSync(join(tmpdir(), "sinkflex-test-owners-"));
chmodSync(scratch, 0o755); // the sandbox's uid must reach the folders created inside
process.env.TMPDIR = scratch;
afterAll(() => {
  const left = readdirSync(scratch);
  rmSync(scratch, { recursive: true, force: true });
  expect(left).toEqual([]);
});

const SHOW_OWNERS = "id; ls -ln; ls -l; touch new.txt; stat -c '%U:%G %u:%g %n' a.txt new.txt; tar cf /tmp/t.tar a.txt new.txt && tar tvf /tmp/t.tar | cut -c1-30";

describe("sandbox owners", () => {
  for (const kind of ["bwrap", "unshare"] as IsolationKind[]) {
    const unavailable = probeIsolation(kind);
    if (unavailable) {
      it.skip(`${kind}: not available on this machine (${unavailable})`, () => {});
      continue;
    }
    it(`${kind}: two sandboxes print the same owners (root), each with its own host uid`, async () => {
      const outputs: string[] = [];
      const hostUids: number[] = [];
      for (let i = 0; i < 2; i++) {
        const tree = makeTreeDir();
        buildTree(tree, [{ path: "a.txt", kind: "file", content: "a\n", mode: 0o644, ageSeconds: 3_600 }], 1_700_000_000);
        const sandbox = new Sandbox({ tree, mountPoint: "/testbed", isolation: kind });
        try {
          const r = await sandbox.exec(SHOW_OWNERS);
          expect(r.exitCode, r.stderr).toBe(0);
          outputs.push(r.stdout.replace(/ \w{3} +\d+ \d\d:\d\d new\.txt/g, " <now> new.txt"));
          hostUids.push(statSync(join(tree, "new.txt")).uid);
          if (sandbox.uid !== undefined) expect(hostUids[i]).toBe(sandbox.uid);
        } finally {
          sandbox.close();
          removeTree(tree);
        }
      }
      expect(outputs[0]).toMatch(/^uid=0\(root\) gid=0\(root\)/);
      expect(outputs[0]).toMatch(/root:root 0:0 a\.txt\nroot:root 0:0 new\.txt\n/);
      expect(outputs[0]).toMatch(/-rw-r--r-- root\/root/);
      expect(outputs[1]).toBe(outputs[0]);
      if (process.getuid?.() === 0) expect(hostUids[0], "each sandbox keeps a host uid of its own").not.toBe(hostUids[1]);
    }, 60_000);
  }
});
