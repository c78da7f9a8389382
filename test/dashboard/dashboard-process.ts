/**
 * A dashboard server in a process of its own, for tests that must survive a server that hangs:
 * `node --import tsx test/dashboard/dashboard-process.ts RUNS_DIR` prints "dashboard: URL" and serves
 * on 127.0.0.1 until killed. It loads only the server, not the whole command line.
 */
import { startDashboard } from "../../src/dashboard/server.js";

const { url } = await startDashboard({ runsDir: process.argv[2]!, port: 0 });
console.log(`dashboard: ${url}`);
