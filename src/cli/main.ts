/**
 * The `sinkflex` command line: builds the command tree and runs it.
 *
 * Each command group lives in its own file under `commands/` and adds itself to the program here.
 * Errors a user can fix are printed as one clear line (with what to do next) and exit code 1 or 2;
 * they never print a stack trace unless SINKFLEX_DEBUG=1.
 */
import { Command, CommanderError } from "commander";
import { registerDashboardCommands } from "./commands/dashboard.js";
import { registerDemoCommands } from "./commands/demo.js";
import { registerTrainCommands } from "./commands/train.js";
import { registerEnvsCommands } from "./commands/envs.js";
import { registerEnvsPlayCommand } from "./commands/envs-play.js";
import { registerEnvsReplayCommands } from "./commands/envs-replay.js";
import { registerServeCommands } from "./commands/serve.js";
import { registerSinksCommands } from "./commands/sinks.js";
import { UsageError } from "./usage-error.js";

export { UsageError };

export function buildProgram(): Command {
  const program = new Command("sinkflex")
    .description("Reinforcement learning for tool-using LLM agents on long multi-step tasks.")
    .version("0.1.0")
    .showHelpAfterError("(run with --help for usage)");
  // Command groups register here.
  registerDemoCommands(program);
  registerTrainCommands(program);
  registerDashboardCommands(program);
  registerEnvsCommands(program);
  registerEnvsReplayCommands(program);
  registerEnvsPlayCommand(program);
  registerServeCommands(program);
  registerSinksCommands(program);
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
