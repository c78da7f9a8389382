#!/usr/bin/env node
// The `sinkflex` command: loads the TypeScript sources through tsx and runs the CLI.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../src/cli/main.ts");
process.exitCode = await main(process.argv.slice(2));
