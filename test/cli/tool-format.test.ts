// `--tool-format` on the commands that take a model (serve, gateway, eval, train): each lists the formats
// in its help, and an unknown value is refused before anything loads, naming the formats and the default;
// train --stage refuses it (a stage runs with its run folder's saved config).
import { describe, expect, it } from "vitest";
import { buildProgram } from "../../src/cli/index.js";
import { parseToolFormat } from "../../src/cli/commands/served-checkpoint.js";
import { runCli } from "../run-cli.js";

/** Each command with the arguments before the flag. */
const COMMANDS: [string, string[]][] = [
  ["serve", ["some-checkpoint"]],
  ["gateway", ["some-checkpoint"]],
  ["eval", ["some-checkpoint"]],
  ["train", ["--config", "some-config.yaml"]],
];

describe("--tool-format", () => {
  it.each(COMMANDS)("%s: an unknown format is refused, naming the formats", async (name, args) => {
    const res = await runCli([name, ...args, "--tool-format", "xml"]);
    expect(res.code).not.toBe(0);
    expect(res.output).toMatch(/--tool-format must be one of hermes, llama3-json, phi3-hermes, got "xml"; leave it out to read the format the checkpoint's chat template \(or family\) declares/);
  });

  it.each(COMMANDS)("%s: the help lists it", (name) => {
    const cmd = buildProgram().commands.find((c) => c.name() === name)!;
    const opt = cmd.options.find((o) => o.long === "--tool-format");
    expect(opt?.description).toMatch(/hermes, llama3-json, phi3-hermes/);
  });

  it("takes each format the families use", () => {
    for (const f of ["hermes", "llama3-json", "phi3-hermes"]) expect(parseToolFormat(f)).toBe(f);
  });

  it("train --stage refuses it: the stage runs with the run folder's saved config", async () => {
    const res = await runCli(["train", "--stage", "grpo", "--run", ".", "--tool-format", "hermes"]);
    expect(res.code).not.toBe(0);
    expect(res.output).toMatch(/--stage runs with the run folder's saved config; drop --tool-format/);
  });
});
