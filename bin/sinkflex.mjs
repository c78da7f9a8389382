#!/usr/bin/env node
// The `sinkflex` command. One rule picks what it runs: the TypeScript sources (src/) when they are beside
// it, as in a checkout, and otherwise the compiled JavaScript (dist/), as in the installed package, which
// ships dist/ and not src/. Either way tsx's loader is registered first, so that a user's own modules
// (`--import ./my-env.ts`) may be TypeScript. When it runs the sources, the import "sinkflex" (from a user
// module in a project that links this checkout) resolves to src/index.ts too (the package's
// "sinkflex-source" export condition), so both see one env registry.
import { existsSync } from "node:fs";
import { register as registerHooks } from "node:module";
import { register } from "tsx/esm/api";

const source = new URL("../src/cli/main.ts", import.meta.url);
const built = new URL("../dist/cli/main.js", import.meta.url);
const fromSource = existsSync(source);
if (!fromSource && !existsSync(built)) {
  console.error("sinkflex: neither src/cli/main.ts nor dist/cli/main.js is here; in a checkout run `npm run build`, or reinstall the package");
  process.exit(1);
}
register();
if (fromSource) registerHooks(new URL("../src/pipeline/source-condition.mjs", import.meta.url));
const { main } = await import(fromSource ? source.href : built.href);
process.exitCode = await main(process.argv.slice(2));
