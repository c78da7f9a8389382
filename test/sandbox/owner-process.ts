/**
 * A stand-in for an env server, run as its own process by owner-death.test.ts:
 * `owner-process.ts <marker> <bwrap|unshare> <running|starting>`. It builds a tree and starts a
 * sandboxed command whose processes all carry `marker` (a number of seconds to sleep) in their
 * command line: plain background sleeps, one in a new session, and one in a new user namespace where
 * the backend lets the command make one (it runs there as nobody, without privileges).
 * - `running`: prints "started <isolation> <uid>" and waits to be killed.
 * - `starting`: SIGKILLs itself as soon as the launcher has forked the namespace's first process,
 *   while bwrap or unshare is still setting it up.
 * Not a test itself.
 */
import { readFileSync } from "node:fs";
import { Sandbox, makeTreeDir, type IsolationKind } from "../../src/sandbox/index.js";

const [marker, kind, mode] = process.argv.slice(2);
if (!marker || !/^\d+\.\d+$/.test(marker) || (kind !== "bwrap" && kind !== "unshare") || (mode !== "running" && mode !== "starting")) {
  throw new Error("usage: owner-process.ts <seconds.fraction> (the marker) <bwrap|unshare> <running|starting>");
}
/** Direct children of `pid` (its main thread's). */
function children(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

const tree = makeTreeDir("sinkflex-bash-");
const sandbox = new Sandbox({ tree, mountPoint: "/testbed", isolation: kind as IsolationKind, limits: { timeoutMs: 600_000 } });
const s = `sleep ${marker}`;
const before = new Set(children(process.pid)); // e.g. the TypeScript loader's helper
void sandbox.exec(`${s} & setsid ${s} & { unshare --user ${s} || ${s}; } 2>/dev/null & ${s}`);

if (mode === "starting") {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const launcher = children(process.pid).find((c) => !before.has(c));
    if ((launcher !== undefined && children(launcher).length > 0) || Date.now() > deadline) process.kill(process.pid, "SIGKILL");
  }
}
process.stdout.write(`started ${sandbox.isolation} ${sandbox.uid ?? "none"}\n`);
setInterval(() => {}, 60_000);
