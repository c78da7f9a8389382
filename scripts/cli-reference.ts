// Prints the `sinkflex` command reference (every command and option, read off the command tree) as
// Markdown; with --write, refreshes it inside docs/cli.md between its markers.
// usage: npx tsx scripts/cli-reference.ts [--write]
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { buildProgram, commandReference, withReference } from "../src/cli/index.js";

const reference = commandReference(buildProgram());
if (process.argv.includes("--write")) {
  const path = fileURLToPath(new URL("../docs/cli.md", import.meta.url));
  writeFileSync(path, withReference(readFileSync(path, "utf8"), reference));
  console.log(`wrote the command reference into ${path}`);
} else {
  process.stdout.write(reference);
}
