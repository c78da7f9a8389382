/**
 * A stand-in for an env server, run as its own process by owner-death.test.ts: it builds a tree,
 * starts a sandboxed command that sleeps for `argv[2]` seconds (the marker the test looks for in
 * /proc), prints "started" and waits to be killed. Not a test itself.
 */
import { Sandbox, makeTreeDir } from "../../src/sandbox/index.js";

const marker = process.argv[2];
if (!marker || !/^\d+\.\d+$/.test(marker)) throw new Error("usage: owner-process.ts <seconds.fraction> (the marker)");
const tree = makeTreeDir("sinkflex-bash-");
const sandbox = new Sandbox({ tree, mountPoint: "/testbed", limits: { timeoutMs: 600_000 } });
void sandbox.exec(`sleep ${marker} & sleep ${marker}`);
process.stdout.write("started\n");
setInterval(() => {}, 60_000);
