// A data-preparation worker thread's entry point. A worker does not inherit its parent's module loader, so
// it registers tsx here (a user's env module may be TypeScript), then serves jobs (prep-worker.ts). In a
// checkout this file sits beside prep-worker.ts and imports the source (with the "sinkflex-source" export
// condition, as the `sinkflex` command does: source-condition.mjs); in the published package it sits in
// dist/ beside the compiled prep-worker.js and imports that.
import { existsSync } from "node:fs";
import { register as registerHooks } from "node:module";
import { register } from "tsx/esm/api";

register();
const source = new URL("./prep-worker.ts", import.meta.url);
const fromSource = existsSync(source);
if (fromSource) registerHooks(new URL("./source-condition.mjs", import.meta.url));
await import(fromSource ? source.href : new URL("./prep-worker.js", import.meta.url).href);
