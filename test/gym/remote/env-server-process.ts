/**
 * A real `sinkflex envs serve` child process on 127.0.0.1, for the env-pool tests and the env-pool
 * benchmark: spawned with the given arguments, resolved once it prints the URL it serves at. The caller
 * kills it (and may restart one on the same port).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

const BIN = fileURLToPath(new URL("../../../bin/sinkflex.mjs", import.meta.url));

export interface EnvServerProcess {
  proc: ChildProcess;
  url: string;
  port: number;
}

/** Starts `sinkflex <args>` (an `envs serve` command line); rejects if it exits or prints no URL within `timeoutMs`. */
export async function spawnEnvServer(args: string[], timeoutMs = 60_000): Promise<EnvServerProcess> {
  const proc = spawn(process.execPath, [BIN, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the env server did not start in ${timeoutMs / 1000} s: ${out}`)), timeoutMs);
      const read = (d: Buffer) => {
        out += d.toString();
        const m = /serving \S+ at (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      };
      proc.stdout!.on("data", read);
      proc.stderr!.on("data", read);
      proc.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`the env server exited with ${code}: ${out}`));
      });
    });
    return { proc, url, port: Number(new URL(url).port) };
  } catch (err) {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    throw err;
  }
}
