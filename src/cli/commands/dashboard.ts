/**
 * `sinkflex dashboard`: serves the run dashboard over a runs folder and opens it in a browser.
 * It binds to loopback by default; beyond loopback it needs a key (--key or SINKFLEX_DASHBOARD_KEY)
 * or --insecure. With --report RUN --out FILE it writes the run's static report (one HTML file that
 * opens without the server) instead of serving; with --export-tensorboard RUN --out DIR it writes the
 * run's scalar metrics as TensorBoard event files. It is not the server itself (see dashboard/).
 */
import { spawn } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import type { Command } from "commander";
import { buildReport, exportTensorboard, exposureRefusal, HttpError, isLoopbackHost, startDashboard } from "../../dashboard/index.js";
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

interface DashboardFlags {
  runs: string;
  port: string;
  host: string;
  key?: string;
  insecure?: boolean;
  open: boolean;
  report?: string;
  exportTensorboard?: string;
  out?: string;
}

/** Writes the static report of `run` to `out`; a missing run or folder is a usage error naming it. */
async function writeReport(runsDir: string, run: string, out: string | undefined): Promise<void> {
  if (!out) throw new UsageError(`--report needs --out FILE: where to write the report of "${run}" (e.g. --out ${run}.html)`);
  let html: string;
  try {
    html = await buildReport(runsDir, run);
  } catch (err) {
    if (err instanceof HttpError) throw new UsageError(err.message);
    throw err;
  }
  writeFileSync(out, html);
  console.log(`report of ${run}: ${out} (${(html.length / 1024).toFixed(0)} KiB; opens without the server)`);
}

/** Writes `run`'s metrics as TensorBoard event files under `out` (one folder per stage). */
async function writeTensorboard(runsDir: string, run: string, out: string | undefined): Promise<void> {
  if (!out) throw new UsageError(`--export-tensorboard needs --out DIR: the folder to write the event files of "${run}" into (e.g. --out tb/${run})`);
  try {
    const done = await exportTensorboard(runsDir, run, out);
    console.log(`TensorBoard events of ${run}: ${done.events} events, ${done.tags.length} tags, in ${done.files.length} stage folders under ${out} (view with \`tensorboard --logdir ${out}\`)`);
  } catch (err) {
    if (err instanceof HttpError) throw new UsageError(err.message);
    throw err;
  }
}

export function registerDashboardCommands(program: Command): void {
  program
    .command("dashboard")
    .description("Serve the run dashboard (live curves, per-suite success, trajectory viewer) over a runs folder")
    .option("--runs <dir>", "the runs folder to show", "runs")
    .option("--port <port>", "port to listen on (0 = any free port)", "8484")
    .option("--host <host>", "address to bind (loopback by default; any other address needs --key or --insecure)", "127.0.0.1")
    .option("--key <key>", "require this key for the API: open the page as /?key=KEY or send Authorization: Bearer KEY (default: $SINKFLEX_DASHBOARD_KEY, else none)")
    .option("--insecure", "allow serving beyond loopback without a key (anyone who reaches it can read every run)")
    .option("--no-open", "do not open a browser")
    .option("--report <run>", "write a static HTML report of this run (curves, run page, newest trajectories) instead of serving; needs --out")
    .option("--export-tensorboard <run>", "write this run's scalar metrics as TensorBoard event files (one folder per stage, one tag per figure) instead of serving; needs --out")
    .option("--out <path>", "where --report writes its HTML file, or the folder --export-tensorboard writes into")
    .action(async (opts: DashboardFlags) => {
      if (opts.report && opts.exportTensorboard) throw new UsageError("--report and --export-tensorboard each need their own --out: run them one at a time");
      if (opts.out && !opts.report && !opts.exportTensorboard) throw new UsageError("--out is for --report RUN or --export-tensorboard RUN: name the run");
      if (opts.exportTensorboard) {
        if (!existsSync(opts.runs)) throw new UsageError(`the runs folder "${opts.runs}" does not exist; pass --runs DIR`);
        return writeTensorboard(opts.runs, opts.exportTensorboard, opts.out);
      }
      if (opts.report) {
        if (!existsSync(opts.runs)) throw new UsageError(`the runs folder "${opts.runs}" does not exist; pass --runs DIR`);
        return writeReport(opts.runs, opts.report, opts.out);
      }
      const port = Number(opts.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`--port must be an integer in 0..65535, got "${opts.port}"`);
      if (opts.key !== undefined && opts.key.trim() === "") throw new UsageError("--key must not be empty: pass a secret, or leave --key out");
      if (!existsSync(opts.runs)) throw new UsageError(`the runs folder "${opts.runs}" does not exist; start a run with \`sinkflex demo\` or pass --runs DIR`);
      const key = opts.key ?? (process.env.SINKFLEX_DASHBOARD_KEY || undefined);
      const refusal = exposureRefusal(opts.host, key, opts.insecure);
      if (refusal) throw new UsageError(refusal);
      if (!isLoopbackHost(opts.host) && !key) {
        console.error(`warning: serving the dashboard on ${opts.host} without a key (--insecure): anyone who can reach it can read every run in ${opts.runs}`);
      }
      const { server, url } = await startDashboard({ runsDir: opts.runs, port, host: opts.host, key, insecure: opts.insecure });
      console.log(`dashboard: ${url} (runs folder ${opts.runs})${key ? "; open it as " + url + "?key=KEY with your key" : ""}; Ctrl-C to stop`);
      if (opts.open) openInBrowser(key ? `${url}?key=${encodeURIComponent(key)}` : url);
      await new Promise<void>((resolve) => {
        const stop = () => server.close(() => resolve());
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    });
}
