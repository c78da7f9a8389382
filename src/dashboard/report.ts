/**
 * The static report of a run: one HTML file holding the dashboard's page, its scripts and styles, and
 * the run's data (every answer the page asks the API for), so that it opens in a browser without the
 * server. The page runs unchanged: its `api()` answers from the embedded data instead of the network.
 *
 * It is not a live view (the data is what the run folder held when the report was made), and it holds
 * one step's trajectories (the newest) to stay small. It reads through the server's API functions, so
 * the same rules apply (plain names, no links, size caps).
 */
import { readFile, realpath } from "node:fs/promises";
import { join } from "node:path";
import { handleApi, HttpError, RawReply, STATIC_DIR } from "./server.js";

/** The page's modules in dependency order: each is inlined with its import and export keywords removed. */
const MODULES = ["charts.js", "metrics.js", "viewer.js", "runpage.js", "app.js"];

/** Strips a module's `import ... from "./x.js";` lines and `export` keywords, so modules can share one script. */
export function inlineModule(source: string): string {
  return source
    .replace(/^import\s[^;]*?from\s+"\.\/[a-z-]+\.js";\s*$/gm, "")
    .replace(/^export\s+(?=(async\s+)?function|const|let|class)/gm, "");
}

/** JSON that is safe inside a <script> element (no "</script>", no HTML comment openers). */
function scriptJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
}

/** The report's HTML for the run `run` of `runsDir`; throws an HttpError naming what is missing. */
export async function buildReport(runsDir: string, run: string): Promise<string> {
  const root = await realpath(runsDir).catch(() => {
    throw new HttpError(404, `the runs folder ${runsDir} does not exist`);
  });
  const enc = encodeURIComponent(run);
  const get = (path: string) => handleApi(root, path, new URLSearchParams());
  const responses: Record<string, unknown> = {};
  const runs = (await get("/api/runs")) as { name: string }[];
  const entry = runs.find((r) => r.name === run);
  if (!entry) throw new HttpError(404, `no run named "${run}" in ${runsDir} (runs there: ${runs.map((r) => r.name).join(", ") || "none"})`);
  responses["/api/runs"] = [{ ...entry, replayOf: undefined }];
  for (const what of ["metrics", "eval", "config", "status", "checkpoints"]) responses[`/api/runs/${enc}/${what}`] = await get(`/api/runs/${enc}/${what}`);
  const files = (await get(`/api/runs/${enc}/trajectories`)) as string[];
  const newest = files[files.length - 1];
  responses[`/api/runs/${enc}/trajectories`] = newest ? [newest] : [];
  if (newest) responses[`/api/runs/${enc}/trajectories/${encodeURIComponent(newest)}`] = await get(`/api/runs/${enc}/trajectories/${encodeURIComponent(newest)}`);
  const csv = await get(`/api/runs/${enc}/metrics.csv`);
  responses[`/api/runs/${enc}/metrics.csv`] = csv instanceof RawReply ? csv.body : "";

  const html = await readFile(join(STATIC_DIR, "index.html"), "utf8");
  const css = await readFile(join(STATIC_DIR, "style.css"), "utf8");
  const scripts = await Promise.all(MODULES.map(async (m) => `// ${m}\n${inlineModule(await readFile(join(STATIC_DIR, m), "utf8"))}`));
  const report = { run, madeAt: new Date().toISOString(), responses };
  return html
    .replace(/<link rel="stylesheet" href="\/style.css">/, () => `<style>\n${css}\n</style>`)
    .replace(/<script type="module" src="\/app.js"><\/script>/, () =>
      `<script id="sinkflex-report" type="application/json">${scriptJson(report)}</script>\n<script type="module">\n${scripts.join("\n").replace(/<\/script/gi, "<\\/script")}\n</script>`,
    );
}
