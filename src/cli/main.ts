/**
 * The `sinkflex` command line: builds the command tree and runs it.
 *
 * Each command group lives in its own file under `commands/` and adds itself to the program here.
 * Errors a user can fix are printed as one clear line (with what to do next) and exit code 1 or 2;
 * they never print a stack trace unless SINKFLEX_DEBUG=1.
 *
 * `--import <module>` (repeatable, before or after the command) is global: the user's modules, which
 * register their own envs, are imported before any command runs (pipeline/user-modules.ts).
 */
import { Command, CommanderError } from "commander";
import { registerDashboardCommands } from "./commands/dashboard.js";
import { registerDemoCommands } from "./commands/demo.js";
import { registerTrainCommands } from "./commands/train.js";
import { registerEnvsCommands } from "./commands/envs.js";
import { registerEnvsPlayCommand } from "./commands/envs-play.js";
import { registerEnvsReplayCommands } from "./commands/envs-replay.js";
import { registerServeCommands } from "./commands/serve.js";
import { registerGatewayCommands } from "./commands/gateway.js";
import { registerSinksCommands } from "./commands/sinks.js";
import { registerMergeCommand } from "./commands/merge.js";
import { registerSizeCommand } from "./commands/size.js";
import { registerBuildNativeCommand } from "./commands/build-native.js";
import { UsageError } from "./usage-error.js";
import { importModules, ModuleLoadError } from "../pipeline/index.js";

export { UsageError };

export function buildProgram(): Command {
  const program = new Command("sinkflex")
    .description("Reinforcement learning for tool-using LLM agents on long multi-step tasks.")
    .version("0.1.0")
    .showHelpAfterError("(run with --help for usage)")
    .option("--import <module>", "a module (./my-env.ts, ./my-env.js or a package) that registers your own envs, imported before the command runs; repeat for several", (m: string, all: string[]) => [...all, m], [] as string[])
    .hook("preAction", async (root) => {
      try {
        await importModules(root.opts<{ import: string[] }>().import, process.cwd());
      } catch (err) {
        if (err instanceof ModuleLoadError) throw new UsageError(`--import: ${err.message}`);
        throw err;
      }
    });
  // Command groups register here.
  registerDemoCommands(program);
  registerTrainCommands(program);
  registerDashboardCommands(program);
  registerEnvsCommands(program);
  registerEnvsReplayCommands(program);
  registerEnvsPlayCommand(program);
  registerServeCommands(program);
  registerGatewayCommands(program);
  registerSinksCommands(program);
  registerMergeCommand(program);
  registerSizeCommand(program);
  registerBuildNativeCommand(program);
  return program;
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  program.exitOverride();
  try {
    await program.parseAsync(argv, { from: "user" });
    return typeof process.exitCode === "number" ? process.exitCode : 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      return err.exitCode;
    }
    if (process.env.SINKFLEX_DEBUG === "1") console.error(err);
    else console.error(`sinkflex: ${err instanceof Error ? err.message : String(err)}`);
    return err instanceof UsageError ? 2 : 1;
  }
}
