import { vi } from "vitest";
import { main } from "../src/cli/main.js";

/** Runs the CLI in this process, capturing what it prints (stdout and stderr, in order). */
export async function runCli(args: string[]) {
  const out: string[] = [];
  const log = vi.spyOn(console, "log").mockImplementation((...a) => void out.push(a.join(" ")));
  const err = vi.spyOn(console, "error").mockImplementation((...a) => void out.push(a.join(" ")));
  try {
    return { code: await main(args), output: out.join("\n") };
  } finally {
    log.mockRestore();
    err.mockRestore();
  }
}
