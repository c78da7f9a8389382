// The dashboard app: picks a run, polls its metrics, draws the curves, the per-suite table and the
// trajectory viewer. Talks only to this server's read-only /api; when the server has a key, the page is
// opened as /?key=KEY and sends it with every API request.
import { lineChart, escapeHtml } from "./charts.js";
import { renderGroup } from "./viewer.js";

const $ = (id) => document.getElementById(id);
const state = { run: null, compare: null, metrics: {}, cursor: {}, notes: {}, trajectories: null, trajFile: null, pinnedFile: false };
const key = new window.URLSearchParams(location.search).get("key");

async function api(path) {
  const res = await fetch(path, key ? { headers: { authorization: `Bearer ${key}` } } : {});
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

async function loadRuns() {
  const runs = await api("/api/runs");
  const runSel = $("run-select");
  const cmpSel = $("compare-select");
  const current = state.run;
  runSel.innerHTML = runs.map((r) => `<option value="${escapeHtml(r.name)}">${escapeHtml(r.name)}${r.status ? ` (${escapeHtml(r.status.state)})` : ""}</option>`).join("");
  cmpSel.innerHTML = `<option value="">(none)</option>` + runs.map((r) => `<option value="${escapeHtml(r.name)}">${escapeHtml(r.name)}</option>`).join("");
  const fromHash = decodeURIComponent(location.hash.slice(1));
  state.run = current || (runs.some((r) => r.name === fromHash) ? fromHash : runs[0]?.name ?? null);
  if (state.run) runSel.value = state.run;
  if (state.compare) cmpSel.value = state.compare;
  if (!state.run) $("summary").innerHTML = `<div class="empty">no runs yet in this folder: start one with <code>sinkflex train</code> or <code>sinkflex demo</code></div>`;
}

// metrics.jsonl is read from where the last poll stopped (a byte offset in that file); a large backlog
// comes as its tail, and a rewritten file starts over.
async function pollMetrics(run) {
  const cur = state.cursor[run] || { next: 0, file: "" };
  const page = await api(`/api/runs/${encodeURIComponent(run)}/metrics?from=${cur.next}&file=${encodeURIComponent(cur.file)}`);
  if (page.reset) { state.metrics[run] = []; state.notes[run] = { skipped: 0, omittedBytes: 0 }; }
  state.metrics[run] = (state.metrics[run] || []).concat(page.records);
  const notes = state.notes[run] || (state.notes[run] = { skipped: 0, omittedBytes: 0 });
  notes.skipped += page.skipped || 0;
  notes.omittedBytes += page.omittedBytes || 0;
  state.cursor[run] = { next: page.next, file: page.file || "" };
}

function notesHtml(run) {
  const n = state.notes[run];
  if (!n) return "";
  const out = [];
  if (n.skipped) out.push(`${n.skipped} line${n.skipped === 1 ? "" : "s"} of metrics.jsonl skipped (not a JSON object)`);
  if (n.omittedBytes) out.push(`earlier records not loaded (${(n.omittedBytes / 1048576).toFixed(1)} MiB of metrics.jsonl before the last ones)`);
  return out.length ? ` · <span class="note">${escapeHtml(out.join("; "))}</span>` : "";
}

function seriesFor(run, path, stage, xKey = "step") {
  const pts = [];
  for (const m of state.metrics[run] || []) {
    if (stage && m.stage !== stage) continue;
    const v = path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), m);
    if (typeof v === "number" && typeof m[xKey] === "number") pts.push([m[xKey], v]);
  }
  return pts;
}

function drawCharts() {
  const charts = $("charts");
  charts.innerHTML = "";
  const alpha = Number($("smoothing").value);
  const runs = [state.run, state.compare].filter(Boolean);
  const suites = new Set();
  for (const r of runs) for (const m of state.metrics[r] || []) if (m.reward && typeof m.reward === "object") for (const s of Object.keys(m.reward)) suites.add(s);
  const series = (key, stage, xKey) => runs.map((r) => ({ label: runs.length > 1 ? r : key, points: seriesFor(r, key, stage, xKey) }));
  // Per-suite GRPO measures: one chart each, one line per suite (and per run when comparing).
  const perSuite = (key) => {
    const out = [];
    for (const r of runs) for (const s of suites) out.push({ label: runs.length > 1 ? `${r}: ${s}` : s, points: seriesFor(r, key(s), "grpo") });
    return out;
  };
  charts.append(lineChart("reward per suite (GRPO)", perSuite((s) => `reward.${s}`), alpha));
  charts.append(lineChart("model turns per episode (GRPO)", perSuite((s) => `episodes.${s}.turns`), alpha));
  charts.append(lineChart("episodes cut off by a limit (GRPO)", perSuite((s) => `episodes.${s}.truncated`), alpha));
  charts.append(lineChart("SFT loss", series("loss", "sft"), alpha));
  // The SFT loss of the batches of each source (a suite, a data file): each batch comes from one with batchBy "prefix".
  const sources = new Set();
  for (const r of runs) for (const m of state.metrics[r] || []) if (m.stage === "sft" && typeof m.source === "string") sources.add(m.source);
  if (sources.size > 0) {
    const bySource = [];
    for (const r of runs) {
      for (const src of sources) {
        const points = (state.metrics[r] || []).filter((m) => m.stage === "sft" && m.source === src && typeof m.loss === "number").map((m) => [m.step, m.loss]);
        bySource.push({ label: runs.length > 1 ? `${r}: ${src}` : src, points });
      }
    }
    charts.append(lineChart("SFT loss per source (context phase, then the assistant's tokens)", bySource, alpha));
  }
  charts.append(lineChart("GRPO loss", series("loss", "grpo"), alpha));
  charts.append(lineChart("KL to reference", series("kl", "grpo"), alpha));
  charts.append(lineChart("clip fraction", series("clipFraction", "grpo"), alpha));
  charts.append(lineChart("entropy (estimate)", series("entropy", "grpo"), alpha));
  charts.append(lineChart("tokens per second (x: seconds)", series("tokensPerSec", undefined, "time"), alpha));
  charts.append(lineChart("staleness (policy versions)", series("staleness", "grpo"), alpha));
}

async function drawEval() {
  const ev = await api(`/api/runs/${encodeURIComponent(state.run)}/eval`);
  const obj = (v) => (v && typeof v === "object" ? v : {});
  const before = obj(obj(ev.stages)["before-rl"]);
  const after = obj(obj(ev.stages)["after-rl"]);
  const suites = [...new Set([...Object.keys(before), ...Object.keys(after)])];
  if (suites.length === 0) {
    $("eval-table").innerHTML = `<div class="empty">no evaluation yet</div>`;
    return;
  }
  const num = (v) => Number(v);
  const pct = (x) => (x == null || typeof x !== "object" ? "–" : `${(100 * num(x.rate)).toFixed(1)}% <small>[${(100 * num(x.ciLow)).toFixed(0)}–${(100 * num(x.ciHigh)).toFixed(0)}]</small>`);
  const rows = suites.map((s) => {
    const b = before[s], a = after[s];
    const d = a && b ? 100 * (num(a.rate) - num(b.rate)) : null;
    const cls = d == null ? "" : d > 0 ? "up" : d < 0 ? "down" : "";
    return `<tr><td>${escapeHtml(s)}</td><td>${pct(b)}</td><td>${pct(a)}</td><td class="${cls}">${d == null ? "–" : `${d > 0 ? "+" : ""}${d.toFixed(1)}`}</td><td>${a ? num(a.avgReward).toFixed(3) : "–"}</td><td>${escapeHtml(a ? a.trials : b ? b.trials : "–")}</td></tr>`;
  });
  $("eval-table").innerHTML = `<table><thead><tr><th>suite</th><th>before RL</th><th>after RL</th><th>Δ points</th><th>avg reward</th><th>tasks</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

async function loadTrajectoryFiles() {
  const files = await api(`/api/runs/${encodeURIComponent(state.run)}/trajectories`);
  const sel = $("traj-file");
  // Follow the newest step unless the user picked another one.
  const keep = state.trajFile && files.includes(state.trajFile) && state.pinnedFile ? state.trajFile : files[files.length - 1];
  sel.innerHTML = files.map((f) => `<option>${escapeHtml(f)}</option>`).join("");
  if (!keep) {
    $("viewer").innerHTML = `<div class="empty">no trajectories saved yet</div>`;
    return;
  }
  sel.value = keep;
  if (keep !== state.trajFile) await loadTrajectories(keep);
}

async function loadTrajectories(file) {
  state.trajFile = file;
  const { records } = await api(`/api/runs/${encodeURIComponent(state.run)}/trajectories/${encodeURIComponent(file)}`);
  state.trajectories = records;
  const suites = [...new Set(records.map((r) => r.suite))];
  $("traj-suite").innerHTML = suites.map((s) => `<option>${escapeHtml(s)}</option>`).join("");
  fillTasks();
}

function fillTasks() {
  const suite = $("traj-suite").value;
  const groups = [...new Set((state.trajectories || []).filter((r) => r.suite === suite).map((r) => r.group))];
  $("traj-task").innerHTML = groups
    .map((g) => {
      const r = state.trajectories.find((x) => x.suite === suite && x.group === g);
      return `<option value="${escapeHtml(g)}">group ${escapeHtml(g)} · task ${escapeHtml(r.taskIndex)}</option>`;
    })
    .join("");
  showGroup();
}

function showGroup() {
  const suite = $("traj-suite").value;
  const group = Number($("traj-task").value);
  renderGroup($("viewer"), (state.trajectories || []).filter((r) => r.suite === suite && r.group === group));
}

async function refresh() {
  if (!state.run) return;
  try {
    await Promise.all([state.run, state.compare].filter(Boolean).map(pollMetrics));
    const status = await api(`/api/runs/${encodeURIComponent(state.run)}/status`);
    $("run-status").textContent = status && typeof status === "object" ? `${status.state} · ${status.stage} step ${status.step}/${status.totalSteps}` : "";
    const last = (state.metrics[state.run] || []).slice(-1)[0];
    $("summary").innerHTML = last ? `<b>${escapeHtml(state.run)}</b> · last record: stage ${escapeHtml(last.stage)}, step ${escapeHtml(last.step)}, ${Math.round(Number(last.time) || 0)} s${notesHtml(state.run)}` : `<b>${escapeHtml(state.run)}</b>${notesHtml(state.run)}`;
    drawCharts();
    await drawEval();
    await loadTrajectoryFiles();
  } catch (err) {
    $("run-status").textContent = `error: ${err.message}`;
  }
}

$("run-select").addEventListener("change", (e) => { state.run = e.target.value; state.trajFile = null; state.pinnedFile = false; location.hash = state.run; refresh(); });
$("compare-select").addEventListener("change", (e) => { state.compare = e.target.value || null; refresh(); });
$("smoothing").addEventListener("input", drawCharts);
$("traj-file").addEventListener("change", (e) => { state.pinnedFile = true; loadTrajectories(e.target.value); });
$("traj-suite").addEventListener("change", fillTasks);
$("traj-task").addEventListener("change", showGroup);

try {
  await loadRuns();
  await refresh();
} catch (err) {
  $("summary").innerHTML = `<div class="empty">${escapeHtml(err.message)}</div>`;
}
document.body.dataset.ready = "1";
setInterval(refresh, 2000);
