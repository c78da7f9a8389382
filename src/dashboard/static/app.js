// The dashboard app: picks a run (the newest that is not a replay of another), polls its metrics, and
// shows three views: the run page (status, why it ended, steps, success table, checkpoints, config),
// the curves, and the trajectory browser; a second run can be compared. It talks only to this server's
// read-only /api (when the server has a key, the page is opened as /?key=KEY and sends it with every
// request); in a static report (`sinkflex dashboard --report`) the same answers come from the data
// embedded in the page, and nothing is polled.
import { escapeHtml, lineChart } from "./charts.js";
import { chartSpecs, GROUPS, phaseInfo, suitesOf } from "./metrics.js";
import { runPageHtml } from "./runpage.js";
import { mountTrajectories } from "./viewer.js";

const $ = (id) => document.getElementById(id);
const reportEl = document.getElementById("sinkflex-report");
const REPORT = reportEl ? JSON.parse(reportEl.textContent) : null;
const key = new window.URLSearchParams(location.search).get("key");
const state = {
  run: null, compare: null, view: "run", runs: [],
  metrics: {}, cursor: {}, notes: {}, drawn: "", pageKey: "",
  trajRun: null, trajFile: null, pinnedFile: false, trajFiles: [],
  // The same task beside the one in view: another run's step, or another step of this run.
  sideRun: null, sideFile: null,
};

async function api(path) {
  if (REPORT) {
    const body = REPORT.responses[path.split("?")[0]];
    if (body === undefined) throw new Error(`this report does not hold ${path.split("?")[0]}`);
    return body;
  }
  const res = await fetch(path, key ? { headers: { authorization: `Bearer ${key}` } } : {});
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}
const runPath = (run, what) => `/api/runs/${encodeURIComponent(run)}/${what}`;

// The page's place lives in the hash: #run=NAME&view=curves&compare=OTHER (a bare #NAME names the run).
function readHash() {
  const h = decodeURIComponent(location.hash.slice(1));
  if (!h) return {};
  if (!h.includes("=")) return { run: h };
  return Object.fromEntries(new window.URLSearchParams(location.hash.slice(1)));
}
function writeHash() {
  const p = new window.URLSearchParams({ run: state.run || "", view: state.view });
  if (state.compare) p.set("compare", state.compare);
  window.history.replaceState(null, "", `${location.pathname}${location.search}#${p}`);
}

async function loadRuns() {
  const runs = await api("/api/runs");
  state.runs = runs;
  const h = readHash();
  const has = (n) => runs.some((r) => r.name === n);
  // The newest run that is not a replay of another (the demo's naive replay starts from the main run's checkpoint).
  const main = runs.find((r) => !r.replayOf) || runs[0];
  state.run = state.run && has(state.run) ? state.run : has(h.run) ? h.run : main?.name ?? null;
  state.compare = has(h.compare) && h.compare !== state.run ? h.compare : state.compare;
  if (["run", "curves", "trajectories"].includes(h.view)) state.view = h.view;
  fillRunSelects();
  if (!state.run) $("summary").innerHTML = `<div class="empty">no runs yet in this folder: start one with <code>sinkflex train</code> or <code>sinkflex demo</code></div>`;
}

function runLabel(r) {
  return `${r.name}${r.status ? ` (${r.status.state})` : ""}${r.replayOf ? ` · replay of ${r.replayOf}` : ""}`;
}

function fillRunSelects() {
  const runs = state.runs;
  $("run-select").innerHTML = runs.map((r) => `<option value="${escapeHtml(r.name)}">${escapeHtml(runLabel(r))}</option>`).join("");
  if (state.run) $("run-select").value = state.run;
  // A run is never compared with itself.
  if (state.compare === state.run) state.compare = null;
  $("compare-select").innerHTML = `<option value="">(none)</option>` + runs.filter((r) => r.name !== state.run).map((r) => `<option value="${escapeHtml(r.name)}">${escapeHtml(runLabel(r))}</option>`).join("");
  $("compare-select").value = state.compare || "";
  $("compare-select").disabled = runs.length < 2 || !!REPORT;
  const trajRuns = [state.run, state.compare].filter(Boolean);
  if (!trajRuns.includes(state.trajRun)) state.trajRun = state.run;
  $("traj-run").innerHTML = trajRuns.map((r) => `<option>${escapeHtml(r)}</option>`).join("");
  $("traj-run").value = state.trajRun || "";
  if (!trajRuns.includes(state.sideRun)) state.sideRun = null;
  $("traj-side").innerHTML = `<option value="">(nothing)</option>` + trajRuns.map((r) => `<option value="${escapeHtml(r)}">${escapeHtml(r)}</option>`).join("");
  $("traj-side").value = state.sideRun || "";
}

// metrics.jsonl is read from where the last poll stopped (a byte offset in that file); a large backlog
// comes as its tail, and a rewritten file starts over.
async function pollMetrics(run) {
  const cur = state.cursor[run] || { next: 0, file: "" };
  if (REPORT && state.cursor[run]) return false;
  const page = await api(`${runPath(run, "metrics")}?from=${cur.next}&file=${encodeURIComponent(cur.file)}`);
  if (page.reset) { state.metrics[run] = []; state.notes[run] = { skipped: 0, omittedBytes: 0 }; }
  state.metrics[run] = (state.metrics[run] || []).concat(page.records);
  const notes = state.notes[run] || (state.notes[run] = { skipped: 0, omittedBytes: 0 });
  notes.skipped += page.skipped || 0;
  notes.omittedBytes += page.omittedBytes || 0;
  state.cursor[run] = { next: page.next, file: page.file || "" };
  return page.reset || page.records.length > 0;
}

function notesHtml(run) {
  const n = state.notes[run];
  if (!n) return "";
  const out = [];
  if (n.skipped) out.push(`${n.skipped} line${n.skipped === 1 ? "" : "s"} of metrics.jsonl skipped (not a JSON object)`);
  if (n.omittedBytes) out.push(`earlier records not loaded (${(n.omittedBytes / 1048576).toFixed(1)} MiB of metrics.jsonl before the last ones)`);
  return out.length ? ` · <span class="note">${escapeHtml(out.join("; "))}</span>` : "";
}

function showView() {
  for (const v of ["run", "curves", "trajectories"]) $(`view-${v}`).hidden = state.view !== v;
  for (const b of document.querySelectorAll(".tabs button")) b.setAttribute("aria-selected", String(b.dataset.view === state.view));
  document.body.dataset.view = state.view;
}

function drawCharts(force = false) {
  const runs = [state.run, state.compare].filter(Boolean);
  const alpha = Number($("smoothing").value);
  const set = $("curve-set").value;
  const stamp = JSON.stringify([runs, runs.map((r) => (state.metrics[r] || []).length), alpha, set]);
  if (!force && stamp === state.drawn) return;
  state.drawn = stamp;
  const ctx = {
    runs: runs.map((name) => ({ name, records: state.metrics[name] || [], info: phaseInfo(state.metrics[name] || []) })),
    compare: runs.length > 1,
  };
  ctx.suites = [...new Set(ctx.runs.flatMap((r) => suitesOf(r.records)))];
  const specs = chartSpecs(ctx, alpha).filter((c) => set === "all" || c.key);
  const charts = $("charts");
  charts.innerHTML = specs.length ? "" : `<div class="empty">no figures logged yet</div>`;
  for (const group of GROUPS) {
    const inGroup = specs.filter((c) => c.group === group);
    if (!inGroup.length) continue;
    const box = document.createElement("div");
    box.className = "chart-group";
    box.innerHTML = `<h3 class="group-title">${escapeHtml(group)}</h3><div class="charts"></div>`;
    for (const c of inGroup) {
      const el = lineChart(c.spec);
      el.dataset.id = c.id;
      box.querySelector(".charts").append(el);
    }
    charts.append(box);
  }
  if (REPORT) {
    const csv = REPORT.responses[runPath(state.run, "metrics.csv")] || "";
    $("csv-link").href = `data:text/csv;charset=utf-8,${encodeURIComponent(csv)}`;
  } else {
    $("csv-link").href = `${runPath(state.run, "metrics.csv")}${key ? `?key=${encodeURIComponent(key)}` : ""}`;
  }
  $("csv-link").setAttribute("download", `${state.run}-metrics.csv`);
}

async function drawRunPage() {
  const run = state.run;
  const [status, config, ev, checkpoints] = await Promise.all([api(runPath(run, "status")), api(runPath(run, "config")), api(runPath(run, "eval")), api(runPath(run, "checkpoints"))]);
  const compare = state.compare ? [{ name: state.compare, eval: await api(runPath(state.compare, "eval")) }] : [];
  const entry = state.runs.find((r) => r.name === run);
  const records = state.metrics[run] || [];
  const stamp = JSON.stringify([run, status, checkpoints, ev, compare, records.length]);
  updateStatusLine(status, config, records);
  if (stamp === state.pageKey) return;
  state.pageKey = stamp;
  $("run-page").innerHTML = runPageHtml({ name: run, status, config, eval: ev, checkpoints, records, replayOf: entry?.replayOf, compare });
}

function updateStatusLine(status, config, records) {
  const grpo = records.filter((m) => m.stage === "grpo").reduce((a, m) => Math.max(a, m.step || 0), 0);
  const planned = config?.grpo?.enabled === false ? 0 : config?.grpo?.steps;
  const st = status && typeof status === "object" ? status.state : "no status";
  const where = status?.state === "running" ? `${status.stage} step ${status.step}${status.totalSteps ? `/${status.totalSteps}` : ""}` : planned ? `GRPO ${grpo}/${planned} steps` : "";
  $("run-status").textContent = [st, where].filter(Boolean).join(" · ");
}

// Every trajectory view that is asked for takes the next number; an answer that comes back after a
// later view was asked for is dropped, so a slow answer never paints over (or fetches for) the view
// the user has since moved to.
let trajAsked = 0;
const trajRunNow = () => state.trajRun || state.run;

async function loadTrajectoryFiles() {
  const run = trajRunNow();
  const asked = trajAsked;
  const files = await api(runPath(run, "trajectories"));
  if (asked !== trajAsked || run !== trajRunNow()) return;
  // Follow the newest step unless the user picked another one.
  const keep = state.trajFile && files.includes(state.trajFile) && state.pinnedFile ? state.trajFile : files[files.length - 1];
  if (JSON.stringify(files) !== JSON.stringify(state.trajFiles)) {
    state.trajFiles = files;
    $("traj-file").innerHTML = files.map((f) => `<option>${escapeHtml(f)}</option>`).join("");
  }
  if (!keep) {
    state.trajFile = null;
    $("viewer").innerHTML = `<div class="empty">no trajectories saved${REPORT ? " in this report" : " yet"} for ${escapeHtml(run)}</div>`;
    return;
  }
  $("traj-file").value = keep;
  if (keep !== state.trajFile) await loadTrajectories(keep, run);
}

/**
 * The step shown beside `file` of `run`: the one picked, else for the same run another step (the
 * oldest, or the newest when `file` is the oldest), for another run the same step when it has one.
 */
function sideStep(files, run, file) {
  if (state.sideFile && files.includes(state.sideFile)) return state.sideFile;
  if (state.sideRun === run) return files.find((f) => f !== file) || files[0];
  return files.includes(file) ? file : files[files.length - 1];
}

async function loadTrajectories(file, run = trajRunNow()) {
  const asked = ++trajAsked;
  const stale = () => asked !== trajAsked;
  state.trajFile = file;
  const sideRun = state.sideRun;
  const { records, skipped } = await api(`${runPath(run, "trajectories")}/${encodeURIComponent(file)}`);
  if (stale()) return;
  let side = null;
  $("traj-side-file").disabled = !sideRun;
  if (sideRun) {
    const files = await api(runPath(sideRun, "trajectories"));
    if (stale()) return;
    const pick = sideStep(files, run, file);
    $("traj-side-file").innerHTML = files.map((f) => `<option>${escapeHtml(f)}</option>`).join("");
    $("traj-side-file").value = pick || "";
    if (pick) {
      const other = await api(`${runPath(sideRun, "trajectories")}/${encodeURIComponent(pick)}`);
      if (stale()) return;
      side = { label: `${sideRun} · ${pick}`, records: other.records, mainLabel: `${run} · ${file}` };
    }
  }
  mountTrajectories($("viewer"), records, side);
  if (skipped) $("viewer").insertAdjacentHTML("afterbegin", `<div class="note">${skipped} line(s) of ${escapeHtml(file)} skipped (not a JSON object)</div>`);
}

async function refresh() {
  if (!state.run) return;
  try {
    const changed = (await Promise.all([state.run, state.compare].filter(Boolean).map(pollMetrics))).some(Boolean);
    const last = (state.metrics[state.run] || []).slice(-1)[0];
    $("summary").innerHTML = `<b>${escapeHtml(state.run)}</b>${state.compare ? ` compared with <b>${escapeHtml(state.compare)}</b>` : ""}${last ? ` · last record: ${escapeHtml(last.stage)} step ${escapeHtml(last.step)}` : " · no metrics yet"}${REPORT ? ` · static report made ${escapeHtml(new Date(REPORT.madeAt).toLocaleString())}` : ""}${notesHtml(state.run)}`;
    // Every view is kept current (hidden ones too), so switching views shows data at once.
    if (changed || !state.drawn) drawCharts();
    await drawRunPage();
    await loadTrajectoryFiles();
  } catch (err) {
    $("run-status").textContent = `error: ${err.message}`;
  }
}

function reset() {
  state.drawn = "";
  state.pageKey = "";
  state.trajFile = null;
  state.trajFiles = [];
  state.pinnedFile = false;
  trajAsked++;
}

$("run-select").addEventListener("change", (e) => { state.run = e.target.value; state.trajRun = state.run; reset(); fillRunSelects(); writeHash(); refresh(); });
$("compare-select").addEventListener("change", (e) => { state.compare = e.target.value || null; reset(); fillRunSelects(); writeHash(); refresh(); });
$("smoothing").addEventListener("input", () => drawCharts());
$("curve-set").addEventListener("change", () => drawCharts());
$("traj-run").addEventListener("change", (e) => { state.trajRun = e.target.value; state.trajFile = null; state.trajFiles = []; state.pinnedFile = false; trajAsked++; loadTrajectoryFiles(); });
$("traj-file").addEventListener("change", (e) => { state.pinnedFile = true; loadTrajectories(e.target.value); });
$("traj-side").addEventListener("change", (e) => { state.sideRun = e.target.value || null; state.sideFile = null; if (state.trajFile) loadTrajectories(state.trajFile); });
$("traj-side-file").addEventListener("change", (e) => { state.sideFile = e.target.value; if (state.trajFile) loadTrajectories(state.trajFile); });
for (const b of document.querySelectorAll(".tabs button")) b.addEventListener("click", () => { state.view = b.dataset.view; showView(); writeHash(); });

window.addEventListener("hashchange", () => {
  const h = readHash();
  if (["run", "curves", "trajectories"].includes(h.view) && h.view !== state.view) { state.view = h.view; showView(); }
  if (h.run && h.run !== state.run && state.runs.some((r) => r.name === h.run)) { state.run = h.run; state.trajRun = h.run; reset(); fillRunSelects(); refresh(); }
});

try {
  await loadRuns();
  showView();
  await refresh();
  if (state.run) writeHash();
} catch (err) {
  $("summary").innerHTML = `<div class="empty">${escapeHtml(err.message)}</div>`;
}
document.body.dataset.ready = "1";
if (!REPORT) setInterval(refresh, 2000);
