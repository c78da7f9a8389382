/**
 * `sinkflex envs ...`: the environment commands. This file defines the group and `list`, `check`
 * and `serve`.
 *
 * Other command files attach more subcommands to the same group (`envs replay`, `envs play`, ...)
 * without editing this one: in their own `register...Commands(program)` they call
 * `envsCommand(program)`, which returns the `envs` Command (creating it when it does not exist yet),
 * and add to it: `envsCommand(program).command("replay")...`.
 */
import { readFileSync } from "node:fs";
import { Command } from "commander";
import { checkEnv, formatCheckReport, sampledActions } from "../../gym/index.js";
import { serveEnv, serveEnvWorkers, isEnvWorker, type EnvServer, type WorkersHandle } from "../../gym/index.js";
import { make, makeUnwrapped, registeredIds, specs } from "../../gym/index.js";
import { registerBundledEnvs } from "../../envs/index.js";
import { UsageError } from "../usage-error.js";

/** The `envs` command group of `program`, created on first use. */
export function envsCommand(program: Command): Command {
  const existing = program.commands.find((c) => c.name() === "envs");
  if (existing) return existing;
  return program.command("envs").description("List, check and serve the registered environments");
}

export interface EnvListing {
  id: string;
  suite: string;
  taskCount: number | null;
  description: string;
}

/** Every registered env (bundled suites included), sorted by id. */
export async function listEnvs(): Promise<EnvListing[]> {
  registerBundledEnvs();
  const out: EnvListing[] = [];
  for (const s of specs()) {
    let taskCount = s.defaults.taskCount ?? null;
    if (taskCount === null) {
      // Not declared at registration: ask the env itself.
      const env = await makeUnwrapped(s.id).catch(() => undefined);
      taskCount = env?.metadata.taskCount ?? null;
      await env?.close().catch(() => undefined);
    }
    out.push({ id: s.id, suite: s.defaults.suite, taskCount, description: s.defaults.description });
  }
  return out;
}

function knownId(id: string): string {
  registerBundledEnvs();
  const ids = registeredIds();
  if (!ids.includes(id)) throw new UsageError(`unknown env id "${id}"; run \`sinkflex envs list\` to see the ${ids.length} registered ids`);
  return id;
}

function intOption(name: string, raw: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer in ${min}..${max}`;
    throw new UsageError(`${name} must be ${range}, got "${raw}"`);
  }
  return n;
}

/** The `--options-file` of `envs serve`: a JSON object of env options fixed for every session. */
function readOptionsFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new UsageError(`--options-file: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? "error"}); give a JSON file such as {"dbDir": "/data/spider/database"}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new UsageError(`--options-file: ${path} is not valid JSON; give a JSON object such as {"dbDir": "/data/spider/database"}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new UsageError(`--options-file: ${path} must hold a JSON object of env options`);
  return value as Record<string, unknown>;
}

export function registerEnvsCommands(program: Command): Command {
  const envs = envsCommand(program);

  envs
    .command("list")
    .description("List every registered env: id, suite, task count and description")
    .option("--json", "print JSON (an array of {id, suite, taskCount, description})")
    .action(async (opts: { json?: boolean }) => {
      const rows = await listEnvs();
      if (opts.json) {
        console.log(JSON.stringify(rows, null, 2));
        return;
      }
      const table = [["ID", "SUITE", "TASKS", "DESCRIPTION"], ...rows.map((r) => [r.id, r.suite, r.taskCount === null ? "-" : String(r.taskCount), r.description])];
      const widths = [0, 1, 2].map((c) => Math.max(...table.map((row) => row[c]!.length)));
      for (const row of table) console.log(row.map((cell, c) => (c < 3 ? cell.padEnd(widths[c]!) : cell)).join("  "));
    });

  envs
    .command("check")
    .description("Run checkEnv on a registered env (made in its standard wrapper stack); exit 0 when every check passes")
    .argument("<id>", "the env id, e.g. sinkflex/arith-v0")
    .option("--seed <n>", "seed of the first checked episode", "0")
    .option("--episodes <n>", "episodes to check (each is played twice)", "2")
    .option("--max-steps <n>", "steps per episode (also the TimeLimit the env is made with)", "8")
    .option("--json", "print the report as JSON")
    .action(async (id: string, opts: { seed: string; episodes: string; maxSteps: string; json?: boolean }) => {
      knownId(id);
      const seed = intOption("--seed", opts.seed, 0);
      const episodes = intOption("--episodes", opts.episodes, 1, 100);
      const maxSteps = intOption("--max-steps", opts.maxSteps, 1, 10_000);
      const env = await make(id, { maxEpisodeSteps: maxSteps });
      const report = await checkEnv(env, { seed, episodes, maxSteps: maxSteps + 1, actions: sampledActions(env) });
      console.log(opts.json ? JSON.stringify(report, null, 2) : formatCheckReport(report));
      if (!report.passed) {
        const failed = report.checks.filter((c) => c.status === "failed").map((c) => c.name);
        throw new Error(`${id} failed ${failed.length} check(s): ${failed.join("; ")}`);
      }
    });

  envs
    .command("serve")
    .description("Serve a registered env over HTTP and WebSocket (the remote protocol, see docs/remote-protocol.md) until Ctrl-C")
    .argument("<id>", "the env id, e.g. sinkflex/arith-v0")
    .option("--port <port>", "port to listen on (0 = any free port)", "8765")
    .option("--host <host>", "address to bind (loopback by default; any other address needs --api-key or --insecure)", "127.0.0.1")
    .option("--max-sessions <n>", "most sessions open at once; more get HTTP 429", "64")
    .option("--idle-timeout <ms>", "close a session after this many milliseconds without requests", "300000")
    .option("--options-file <file>", "a JSON object of env options fixed for every session (paths, URLs, sizes); clients cannot change them")
    .option("--api-key <key>", "require Authorization: Bearer <key> on every request (default: $SINKFLEX_API_KEY, else no key)")
    .option("--insecure", "serve beyond loopback without an API key (refused otherwise)")
    .option("--workers <n>", "worker processes behind the one port (node:cluster); sessions then belong to one worker each, so clients should use WebSocket sessions", "1")
    .option("--grace <ms>", "on SIGINT/SIGTERM: milliseconds the steps in flight get to finish before their sessions are closed", "10000")
    .action(async (id: string, opts: { port: string; host: string; maxSessions: string; idleTimeout: string; optionsFile?: string; apiKey?: string; insecure?: boolean; workers: string; grace: string }) => {
      knownId(id);
      const apiKey = opts.apiKey ?? (process.env.SINKFLEX_API_KEY || undefined);
      const workers = intOption("--workers", opts.workers, 1, 256);
      const graceMs = intOption("--grace", opts.grace, 0, 3_600_000);
      const serveOptions = {
        port: intOption("--port", opts.port, 0, 65535),
        host: opts.host,
        maxSessions: intOption("--max-sessions", opts.maxSessions, 1),
        idleTimeoutMs: intOption("--idle-timeout", opts.idleTimeout, 1),
        ...(opts.optionsFile ? { envOptions: readOptionsFile(opts.optionsFile) } : {}),
        ...(apiKey !== undefined ? { apiKey } : {}),
        insecure: opts.insecure === true,
      };
      const server: EnvServer | WorkersHandle = await (workers > 1 ? serveEnvWorkers(id, serveOptions, workers) : serveEnv(id, serveOptions)).catch((err: Error) => {
        throw err.message.includes("refusing to serve") ? new UsageError(err.message.replace(/^serveEnv: /, "")) : err;
      });
      if (isEnvWorker()) return; // a worker process serves until the primary drains it
      console.log(`serving ${id} at ${server.url} (WebSocket ${server.wsUrl})${workers > 1 ? ` with ${workers} workers` : ""}${apiKey !== undefined ? " with an API key" : ""}; Ctrl-C to stop`);
      await new Promise<void>((resolve) => {
        const stop = (signal: string) => {
          process.off("SIGINT", onInt);
          process.off("SIGTERM", onTerm);
          const sessions = "sessionCount" in server ? `${server.sessionCount()} session(s)` : `${workers} workers`;
          console.log(`${signal}: finishing the steps in flight (up to ${graceMs} ms), closing ${sessions} and stopping`);
          // Steps in flight get the grace period; a second signal, or an env that does not close, ends the process.
          const force = setTimeout(() => process.exit(1), graceMs + 5_000);
          force.unref();
          const again = () => process.exit(1);
          process.once("SIGINT", again);
          process.once("SIGTERM", again);
          server.drain(graceMs).then(
            () => {
              process.off("SIGINT", again);
              process.off("SIGTERM", again);
              resolve();
            },
            () => resolve(),
          );
        };
        const onInt = () => stop("SIGINT");
        const onTerm = () => stop("SIGTERM");
        process.once("SIGINT", onInt);
        process.once("SIGTERM", onTerm);
      });
    });

  return envs;
}
