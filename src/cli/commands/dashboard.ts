/**
 * `sinkflex dashboard`: serves the run dashboard over a runs folder and opens it in a browser.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import type { Command } from "commander";
import { startDashboard } from "../../dashboard/server.js";
import { UsageError } from "../usage-error.js";

/** Opens a URL in the desktop's browser when there is one; does nothing on a headless machine. */
export function openInBrowser(url: string): void {
  const opener = process.platform === "darwin" ? "open" : process.platform === "win32" ? "cmd" : "xdg-open";
  const args = process.platform === "win32" ? ["/c", "start", "", url] : [url];
  if (process.platform === "linux" && !process.env.DISPLAY && !process.env.WAYLAND_DISPLAY) return;
  try {
    const child = spawn(opener, args, { stdio: "ignore", detached: true });
    child.on("error", () => {});
    child.unref();
  } catch {}
}

export function registerDashboardCommands(program: Command): void {
  program
    .command("dashboard")
    .description("Serve the run dashboard (live curves, per-suite success, trajectory viewer) over a runs folder")
    .option("--runs <dir>", "the runs folder to show", "runs")
    .option("--port <port>", "port to listen on (0 = any free port)", "8484")
    .option("--host <host>", "address to bind (loopback by default; the dashboard has no authentication)", "127.0.0.1")
    .option("--no-open", "do not open a browser")
    .action(async (opts: { runs: string; port: string; host: string; open: boolean }) => {
      const port = Number(opts.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`--port must be an integer in 0..65535, got "${opts.port}"`);
      if (!existsSync(opts.runs)) throw new UsageError(`the runs folder "${opts.runs}" does not exist; start a run with \`sinkflex demo\` or pass --runs DIR`);
      const { server, url } = await startDashboard({ runsDir: opts.runs, port, host: opts.host });
      console.log(`dashboard: ${url} (runs folder ${opts.runs}); Ctrl-C to stop`);
      if (opts.open) openInBrowser(url);
      await new Promise<void>((resolve) => {
        const stop = () => server.close(() => resolve());
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    });
}
