// The run page: where the run stands and why it ended, steps planned against steps taken, the success
// table per suite (side by side when comparing), the checkpoints on disk (with the evaluation made of
// one where there is one), and the config. It renders what app.js fetched; it fetches nothing itself.
import { escapeHtml, fmt } from "./charts.js";

const obj = (v) => (v && typeof v === "object" && !Array.isArray(v) ? v : {});
const lastStep = (records, stage) => records.filter((m) => m.stage === stage && typeof m.step === "number").reduce((a, m) => Math.max(a, m.step), 0);

function ago(iso) {
  const ms = Date.now() - Date.parse(iso);
  if (!Number.isFinite(ms)) return "";
  const s = Math.round(ms / 1000);
  return s < 90 ? `${s} s ago` : s < 5400 ? `${Math.round(s / 60)} min ago` : s < 172800 ? `${Math.round(s / 3600)} h ago` : `${Math.round(s / 86400)} days ago`;
}

/** The newest trainer.json among the checkpoints (SFT's planned steps live there). */
function latestTrainer(checkpoints) {
  const withTrainer = (checkpoints?.checkpoints || []).filter((c) => c.trainer && typeof c.trainer === "object");
  return withTrainer[withTrainer.length - 1]?.trainer;
}

/** Steps planned and taken, per stage: [{stage, planned, taken, note}]. */
export function stepsTable(config, records, checkpoints) {
  const rows = [];
  const sft = obj(config.sft), grpo = obj(config.grpo);
  const trainer = obj(latestTrainer(checkpoints));
  if (sft.enabled !== false && config.sft) {
    const planned = trainer.sftSteps || null;
    const taken = trainer.sftDone ?? lastStep(records, "sft");
    rows.push({ stage: "SFT", planned, taken, note: trainer.sftPlanned && planned && trainer.sftPlanned < planned ? `a time budget planned ${trainer.sftPlanned} of every epoch's ${planned}` : "" });
  }
  if (grpo.enabled !== false && config.grpo) rows.push({ stage: "GRPO", planned: grpo.steps ?? null, taken: lastStep(records, "grpo"), note: "" });
  return rows;
}

/**
 * One sentence on where the run stands: for an ended run, the reason the pipeline recorded in
 * status.json (`endReason`: completed, a time budget, stopped by the user, failed) with the steps
 * taken; for a running one, its step and last update. Nothing is inferred from the metrics.
 */
export function whyEnded(status, config, records, replayOf) {
  if (!status || typeof status !== "object") return "no status.json yet: the run has not started writing";
  const reason = typeof status.endReason === "string" ? status.endReason : "";
  const noEval = !records.some((m) => m.stage === "eval-before" || m.stage === "eval-after");
  const evalNote = noEval ? (replayOf ? `; it replays ${replayOf}'s first GRPO steps from its reference checkpoint, with no evaluation of its own` : "; it made no evaluation") : "";
  if (status.state === "done") {
    const asked = status.stage && status.stage !== "done" ? ` (the run was asked for stage ${status.stage} only)` : "";
    if (reason === "completed") return `completed: ${status.totalSteps ? `all ${status.totalSteps} GRPO steps` : "every planned step"}${records.some((m) => m.stage === "eval-after") ? ", then the evaluation after RL" : ""}${asked}${evalNote}`;
    if (reason.startsWith("time budget")) return `ended by its time budget: ${reason.replace(/^time budget:?\s*/, "")}${asked}${evalNote}`;
    if (!reason) return `done (this run folder predates recorded end reasons: status.json has no endReason)${asked}`;
    return `done: ${reason}${asked}`;
  }
  if (status.state === "stopped") return `${reason || "stopped"} at ${status.stage} step ${status.step}: continue it with \`sinkflex train --resume\``;
  if (status.state === "failed") return `${reason || `failed${status.error ? `: ${status.error}` : ""}`} (in ${status.stage})`;
  const quiet = Date.now() - Date.parse(status.updatedAt) > 10 * 60 * 1000;
  return `running: ${status.stage} step ${status.step}${status.totalSteps ? ` of ${status.totalSteps}` : ""}, last update ${ago(status.updatedAt)}${quiet ? " (no update for over 10 minutes: the process may have died; check it, and continue with --resume)" : ""}`;
}

/** A rate with its 95% interval, both in percent with one decimal. */
export function pct(x) {
  if (!x || typeof x !== "object") return "–";
  const p = (v) => (100 * Number(v)).toFixed(1);
  return `${p(x.rate)}% <small>[${p(x.ciLow)}–${p(x.ciHigh)}]</small>`;
}

/** The success table: per suite, before and after RL for each run given ([{name, eval}]), with the change. */
export function evalTableHtml(runs) {
  const stagesOf = (ev) => ({ before: obj(obj(obj(ev).stages)["before-rl"]), after: obj(obj(obj(ev).stages)["after-rl"]) });
  const per = runs.map((r) => ({ name: r.name, ...stagesOf(r.eval) }));
  const suites = [...new Set(per.flatMap((r) => [...Object.keys(r.before), ...Object.keys(r.after)]))];
  if (suites.length === 0) return `<div class="empty">no evaluation${runs.length > 1 ? " in these runs" : " in this run"} (evaluation before and after RL writes eval.json)</div>`;
  const many = runs.length > 1;
  const head = per.map((r) => `<th colspan="${many ? 3 : 5}" class="run-head">${escapeHtml(r.name)}</th>`).join("");
  const sub = per.map(() => `<th>before RL</th><th>after RL</th><th>Δ points</th>${many ? "" : "<th>avg reward</th><th>tasks</th>"}`).join("");
  const rows = suites.map((s) => {
    const cells = per.map((r) => {
      const b = r.before[s], a = r.after[s];
      const d = a && b ? 100 * (Number(a.rate) - Number(b.rate)) : null;
      const cls = d == null ? "" : d > 0 ? "up" : d < 0 ? "down" : "";
      return `<td>${pct(b)}</td><td>${pct(a)}</td><td class="${cls}">${d == null ? "–" : `${d > 0 ? "+" : ""}${d.toFixed(1)}`}</td>${many ? "" : `<td>${a ? Number(a.avgReward).toFixed(3) : "–"}</td><td>${escapeHtml(a ? a.trials : b ? b.trials : "–")}</td>`}`;
    });
    return `<tr><td>${escapeHtml(s)}</td>${cells.join("")}</tr>`;
  });
  return `<div class="scroll-x"><table class="eval"><thead>${many ? `<tr><th></th>${head}</tr>` : ""}<tr><th>suite</th>${sub}</tr></thead><tbody>${rows.join("")}</tbody></table></div><div class="hint">95% intervals in brackets; Δ in percentage points.</div>`;
}

function bytes(n) {
  return n >= 1 << 30 ? `${(n / (1 << 30)).toFixed(1)} GiB` : n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : `${(n / 1024).toFixed(0)} KiB`;
}

/** Which evaluation was made of a checkpoint: before RL of the policy SFT handed over, after RL of the final step's. */
function checkpointEval(c, ev, records) {
  const stages = obj(obj(ev).stages);
  const after = records.find((m) => m.stage === "eval-after");
  const summary = (table) => Object.entries(obj(table)).map(([s, x]) => `${escapeHtml(s)} ${pct(x)}`).join(" · ");
  if ((c.name === "reference" || (c.stage === "grpo" && c.step === 0)) && stages["before-rl"]) return `before RL: ${summary(stages["before-rl"])}`;
  if ((c.name === "final" || (c.stage === "grpo" && after && c.step === after.step)) && stages["after-rl"]) return `after RL: ${summary(stages["after-rl"])}`;
  return "";
}

export function checkpointsHtml(cps, ev, records) {
  const list = cps?.checkpoints || [];
  if (list.length === 0) return `<div class="empty">no checkpoints on disk</div>`;
  const rows = list.map((c) => {
    const what = c.name === "reference" ? "the policy SFT handed over (GRPO's frozen reference)" : c.name === "final" ? "the final policy" : `${c.stage} step ${c.step}`;
    return `<tr data-checkpoint="${escapeHtml(c.name)}"><td><code>${escapeHtml(c.where)}</code>${cps.latest === c.name ? " <b>latest</b>" : ""}</td><td>${escapeHtml(what)}</td><td>${bytes(c.bytes)}</td><td>${c.modifiedAt ? escapeHtml(new Date(c.modifiedAt).toLocaleString()) : "–"}</td><td class="left">${checkpointEval(c, ev, records) || "–"}</td></tr>`;
  });
  return `<div class="scroll-x"><table class="checkpoints"><thead><tr><th>folder</th><th>what</th><th>size</th><th>saved</th><th class="left">evaluation</th></tr></thead><tbody>${rows.join("")}</tbody></table></div>`;
}

/** The config's headline settings, then the whole file folded. */
export function configHtml(config, setup) {
  const c = obj(config);
  const model = obj(c.model);
  const init = obj(model.init);
  const facts = [
    ["suites", (c.suites || []).map((s) => obj(s).env).join(", ")],
    ["model", model.checkpoint ? `from ${model.checkpoint}` : `${init.family || "?"}, hidden ${init.hiddenSize}, ${init.layers} layers`],
    ["parameters", setup?.parameters != null ? fmt(setup.parameters) : ""],
    ["attention", c.attention ? `${obj(c.attention).mode}${obj(c.attention).mode === "full" ? "" : `, ${obj(c.attention).sinks} sinks + window ${obj(c.attention).window}`}` : ""],
    ["SFT", obj(c.sft).enabled === false ? "off" : c.sft ? `${obj(c.sft).epochs} epoch(s), batch ${obj(c.sft).batchSize}, lr ${obj(c.sft).lr}` : ""],
    ["GRPO", obj(c.grpo).enabled === false ? "off" : c.grpo ? `${obj(c.grpo).steps} steps × ${obj(c.grpo).batchTasks} tasks × ${obj(c.grpo).groupSize} rollouts, lr ${obj(c.grpo).lr}, KL ${obj(c.grpo).klCoef}` : ""],
    ["seed", c.seed],
  ].filter(([, v]) => v !== "" && v != null);
  return `<dl class="facts">${facts.map(([k, v]) => `<dt>${escapeHtml(k)}</dt><dd>${escapeHtml(v)}</dd>`).join("")}</dl>
    <details class="config"><summary>config.json</summary><pre>${escapeHtml(JSON.stringify(config, null, 2))}</pre></details>`;
}

/** The whole run page. d: {name, status, config, eval, checkpoints, records, replayOf, compare: [{name, eval}]} */
export function runPageHtml(d) {
  const steps = stepsTable(obj(d.config), d.records, d.checkpoints);
  const setup = d.records.find((m) => m.stage === "setup");
  const state = d.status && typeof d.status === "object" ? d.status.state : "unknown";
  const stepsRows = steps.map((r) => `<tr><td>${r.stage}</td><td>${r.planned ?? "–"}</td><td>${r.taken}</td><td class="left">${escapeHtml(r.note)}</td></tr>`).join("");
  return `<div class="run-head-line"><span class="badge ${escapeHtml(state)}">${escapeHtml(state)}</span> <span id="why-ended">${escapeHtml(whyEnded(d.status, obj(d.config), d.records, d.replayOf))}</span></div>
    ${steps.length ? `<h3>Steps</h3><table class="steps"><thead><tr><th>stage</th><th>planned</th><th>taken</th><th class="left"></th></tr></thead><tbody>${stepsRows}</tbody></table>` : ""}
    <h3>Success per suite</h3><div id="eval-table">${evalTableHtml([{ name: d.name, eval: d.eval }, ...(d.compare || [])])}</div>
    <h3>Checkpoints</h3>${checkpointsHtml(d.checkpoints, d.eval, d.records)}
    <h3>Config</h3>${configHtml(d.config, setup)}`;
}
