// What the dashboard plots: the catalog of the figures a run logs in metrics.jsonl (written by the
// pipeline's stages: setup, sft, eval-before, grpo, eval-after), grouped by the question they answer,
// each with its axis titles and units, and the phase markers (SFT's switch to the assistant's tokens,
// SFT -> GRPO, evaluations, resumes). A figure the catalog does not name is still plotted, under
// "Other figures". It builds chart specs; drawing them is charts.js's job.
import { COLORS, DASHES } from "./charts.js";

export function getPath(o, path) {
  return path.split(".").reduce((v, k) => (v == null || typeof v !== "object" ? undefined : v[k]), o);
}

const stageRecords = (records, stage) => records.filter((m) => m.stage === stage && typeof m.step === "number");

/** Where the run's phases fall: SFT's last step, the switch to assistant tokens, evaluations, resumes. */
export function phaseInfo(records) {
  const sft = stageRecords(records, "sft");
  const lastSft = sft.length ? Math.max(...sft.map((m) => m.step)) : 0;
  const firstAssistant = sft.find((m) => m.lossOn === "assistant" && sft.some((o) => o.lossOn === "context" && o.step < m.step));
  const firstExtension = sft.find((m) => m.extension === true);
  const evalBefore = records.find((m) => m.stage === "eval-before");
  const evalAfter = records.find((m) => m.stage === "eval-after");
  // A resumed run starts its clock again: a record whose time is below the one before it begins a resume.
  const resumes = [];
  let prev = -Infinity;
  for (const m of records) {
    if (typeof m.time !== "number") continue;
    if (m.time < prev && m.stage !== "setup") resumes.push({ stage: m.stage, step: m.step });
    prev = m.time;
  }
  return { lastSft, hasSft: sft.length > 0, switchStep: firstAssistant?.step, extensionStep: firstExtension?.step, evalBefore, evalAfter, resumes };
}

/** Markers for an x axis of `kind`: "grpo" (GRPO steps), "sft" (SFT steps) or "run" (SFT steps, then GRPO steps). */
export function markersFor(kind, info) {
  const out = [];
  const sftMarks = (offset) => {
    if (info.switchStep != null) out.push({ x: info.switchStep + offset - 0.5, label: "assistant tokens", kind: "sft-phase", title: "SFT's loss moves from every context token to the assistant's tokens only from this step" });
    if (info.extensionStep != null) out.push({ x: info.extensionStep + offset - 0.5, label: "extension", kind: "sft-phase", title: "SFT's extension steps start here" });
  };
  const grpoMarks = (offset) => {
    if (info.evalBefore) out.push({ x: offset, label: "eval before RL", kind: "eval", color: "#1a7f37" });
    if (info.evalAfter) out.push({ x: offset + (info.evalAfter.step ?? 0), label: "eval after RL", kind: "eval", color: "#1a7f37" });
  };
  if (kind === "sft") sftMarks(0);
  if (kind === "grpo") grpoMarks(0);
  if (kind === "run") {
    sftMarks(0);
    if (info.hasSft) out.push({ x: info.lastSft + 0.5, label: "SFT → GRPO", kind: "handover", color: "#8e44ad" });
  }
  for (const r of info.resumes) {
    const x = kind === "run" ? (r.stage === "grpo" ? info.lastSft + r.step : r.stage === "sft" ? r.step : undefined) : r.stage === kind ? r.step : undefined;
    if (x != null) out.push({ x: x - 0.5, label: "resumed", kind: "resume", color: "#b42318", title: `the run was resumed before ${r.stage} step ${r.step}` });
  }
  return out;
}

/** The suites a run's GRPO records name (reward per suite). */
export function suitesOf(records) {
  const s = new Set();
  for (const m of records) if (m.reward && typeof m.reward === "object") for (const k of Object.keys(m.reward)) s.add(k);
  for (const m of records) if ((m.stage === "eval-before" || m.stage === "eval-after") && m.success && typeof m.success === "object") for (const k of Object.keys(m.success)) s.add(k);
  return [...s];
}

function points(records, stage, path, xOf = (m) => m.step, scale = 1) {
  const out = [];
  for (const m of stageRecords(records, stage)) {
    const v = getPath(m, path);
    if (typeof v === "number") out.push([xOf(m), v * scale]);
  }
  return out;
}

// Series builders over ctx = {runs: [{name, records, info}], suites, compare}: colours tell runs apart
// when comparing (and dashes tell the suites or parts), else colours tell the suites or parts apart.
function perSuite(ctx, stage, pathOf, opts = {}) {
  const out = [];
  ctx.runs.forEach((r, ri) => ctx.suites.forEach((s, si) => {
    const pts = points(r.records, stage, pathOf(s), undefined, opts.scale);
    if (!pts.length && ctx.compare) return;
    out.push({ label: ctx.compare ? `${r.name} · ${s}` : s, points: pts, color: COLORS[(ctx.compare ? ri : si) % COLORS.length], dash: ctx.compare ? DASHES[si % DASHES.length] : "" });
  }));
  return out;
}

function parts(ctx, list, opts = {}) {
  const out = [];
  ctx.runs.forEach((r, ri) => list.forEach((p, k) => {
    const pts = p.points ? p.points(r) : points(r.records, p.stage, p.path, opts.xOf ? (m) => opts.xOf(r, m) : undefined, p.scale);
    if (!pts.length && list.length > 1) return;
    out.push({ label: ctx.compare ? (list.length > 1 ? `${r.name} · ${p.label}` : r.name) : p.label, points: pts, color: COLORS[(ctx.compare ? ri : k) % COLORS.length], dash: ctx.compare ? DASHES[k % DASHES.length] : "" });
  }));
  return out;
}

const runX = (r, m) => (m.stage === "grpo" ? r.info.lastSft + m.step : m.step);

/** Evaluation success per suite at the GRPO step it was measured (before RL at 0). */
function evalPoints(r, suite) {
  const out = [];
  for (const m of r.records) {
    if (m.stage !== "eval-before" && m.stage !== "eval-after") continue;
    const v = getPath(m, `success.${suite}`);
    if (typeof v === "number") out.push([m.stage === "eval-before" ? 0 : m.step, v]);
  }
  return out;
}

const GRPO_X = { title: "GRPO step", integer: true };
const SFT_X = { title: "SFT step", integer: true };
const RUN_X = { title: "step (SFT, then GRPO)", integer: true };

/**
 * The catalog: {id, group, title, key (in the default set), x, y, markers ("grpo" | "sft" | "run"),
 * covers (the "stage:path" prefixes it plots), series(ctx)}.
 */
export const CATALOG = [
  { id: "reward-mean", group: "Is it learning?", key: true, title: "mean reward (all suites)", x: GRPO_X, y: { title: "reward (mean per episode)" }, markers: "grpo", covers: ["grpo:rewardMean"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "rewardMean", label: "all suites" }]) },
  { id: "reward-suite", group: "Is it learning?", key: true, title: "reward per suite", x: GRPO_X, y: { title: "reward (mean per episode)" }, markers: "grpo", covers: ["grpo:reward."],
    series: (ctx) => perSuite(ctx, "grpo", (s) => `reward.${s}`) },
  { id: "success-suite", group: "Is it learning?", key: true, title: "success per suite (training episodes; evaluation as dots)", x: GRPO_X, y: { title: "success rate (%)" }, markers: "grpo", covers: ["grpo:success.", "eval-before:success.", "eval-after:success."],
    series: (ctx) => {
      const out = perSuite(ctx, "grpo", (s) => `success.${s}`, { scale: 100 });
      ctx.runs.forEach((r, ri) => ctx.suites.forEach((s, si) => {
        const pts = evalPoints(r, s).map(([x, y]) => [x, y * 100]);
        if (pts.length) out.push({ label: `${ctx.compare ? `${r.name} · ` : ""}${s} (evaluation)`, points: pts, color: COLORS[(ctx.compare ? ri : si) % COLORS.length], dash: "1 4", dots: true });
      }));
      return out;
    } },
  { id: "sft-loss", group: "Is it learning?", key: true, title: "SFT loss (every context token, then the assistant's tokens)", x: SFT_X, y: { title: "loss (nats per token)" }, markers: "sft", covers: ["sft:loss", "sft:lossOn"],
    series: (ctx) => parts(ctx, [
      { label: "context tokens", points: (r) => points(r.records.filter((m) => m.lossOn !== "assistant"), "sft", "loss") },
      { label: "assistant tokens", points: (r) => points(r.records.filter((m) => m.lossOn === "assistant"), "sft", "loss") },
    ]) },
  { id: "sft-loss-source", group: "Is it learning?", title: "SFT loss per source", x: SFT_X, y: { title: "loss (nats per token)" }, markers: "sft", covers: ["sft:source"],
    series: (ctx) => {
      const sources = [...new Set(ctx.runs.flatMap((r) => stageRecords(r.records, "sft").map((m) => m.source).filter((s) => typeof s === "string")))];
      return parts(ctx, sources.map((src) => ({ label: src, points: (r) => points(r.records.filter((m) => m.source === src), "sft", "loss") })));
    } },
  { id: "grpo-loss", group: "Is it learning?", title: "GRPO loss", x: GRPO_X, y: { title: "loss (policy objective)" }, markers: "grpo", covers: ["grpo:loss"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "loss", label: "GRPO loss" }]) },

  { id: "kl", group: "Is it stable?", key: true, title: "KL to the reference", x: GRPO_X, y: { title: "KL (nats per token)" }, markers: "grpo", covers: ["grpo:kl"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "kl", label: "KL" }]) },
  { id: "entropy", group: "Is it stable?", key: true, title: "entropy (estimate)", x: GRPO_X, y: { title: "entropy (nats per token)" }, markers: "grpo", covers: ["grpo:entropy"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "entropy", label: "entropy" }]) },
  { id: "clip", group: "Is it stable?", key: true, title: "clip fraction", x: GRPO_X, y: { title: "tokens clipped (%)" }, markers: "grpo", covers: ["grpo:clipFraction"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "clipFraction", label: "clipped", scale: 100 }]) },
  { id: "grad-norm", group: "Is it stable?", key: true, title: "gradient norm (before clipping)", x: RUN_X, y: { title: "gradient L2 norm" }, markers: "run", covers: ["grpo:gradNorm", "sft:gradNorm"],
    series: (ctx) => parts(ctx, [{ stage: "sft", path: "gradNorm", label: "SFT" }, { stage: "grpo", path: "gradNorm", label: "GRPO" }], { xOf: runX }) },
  { id: "ratio", group: "Is it stable?", title: "importance ratio (mean π / π_old)", x: GRPO_X, y: { title: "ratio" }, markers: "grpo", covers: ["grpo:ratioMean"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "ratioMean", label: "ratio" }]) },
  { id: "lr", group: "Is it stable?", title: "learning rate", x: RUN_X, y: { title: "learning rate" }, markers: "run", covers: ["grpo:lr", "sft:lr"],
    series: (ctx) => parts(ctx, [{ stage: "sft", path: "lr", label: "SFT" }, { stage: "grpo", path: "lr", label: "GRPO" }], { xOf: runX }) },
  { id: "degenerate", group: "Is it stable?", title: "degenerate groups (every reward equal: no signal)", x: GRPO_X, y: { title: "groups per step" }, markers: "grpo", covers: ["grpo:degenerateGroups"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "degenerateGroups", label: "degenerate groups" }]) },
  { id: "staleness", group: "Is it stable?", title: "staleness", x: GRPO_X, y: { title: "policy versions behind" }, markers: "grpo", covers: ["grpo:staleness"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "staleness", label: "staleness" }]) },
  { id: "reward-errors", group: "Is it stable?", title: "reward errors", x: GRPO_X, y: { title: "episodes per step" }, markers: "grpo", covers: ["grpo:rewardErrors"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "rewardErrors", label: "reward failed" }]) },
  { id: "turns", group: "Is it stable?", title: "model turns per episode", x: GRPO_X, y: { title: "turns (mean per episode)" }, markers: "grpo", covers: ["grpo:episodes."],
    series: (ctx) => perSuite(ctx, "grpo", (s) => `episodes.${s}.turns`) },
  { id: "truncated", group: "Is it stable?", title: "episodes cut off by a limit", x: GRPO_X, y: { title: "episodes truncated (%)" }, markers: "grpo", covers: [],
    series: (ctx) => perSuite(ctx, "grpo", (s) => `episodes.${s}.truncated`, { scale: 100 }) },

  { id: "step-time", group: "Where does time go?", key: true, title: "GRPO step time: rollout and update", x: GRPO_X, y: { title: "seconds per step" }, markers: "grpo", covers: ["grpo:phaseMs."],
    series: (ctx) => parts(ctx, [
      { stage: "grpo", path: "phaseMs.rollout", label: "rollout", scale: 1e-3 },
      { stage: "grpo", path: "phaseMs.train", label: "update", scale: 1e-3 },
      { label: "step", points: (r) => stageRecords(r.records, "grpo").filter((m) => m.phaseMs).map((m) => [m.step, ((m.phaseMs.rollout || 0) + (m.phaseMs.train || 0)) / 1000]) },
    ]) },
  { id: "tokens-per-sec", group: "Where does time go?", key: true, title: "model tokens per second", x: GRPO_X, y: { title: "tokens / s" }, markers: "grpo", covers: ["grpo:tokensPerSec"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "tokensPerSec", label: "tokens/s" }]) },
  { id: "tokens-step", group: "Where does time go?", title: "model tokens per GRPO step", x: GRPO_X, y: { title: "tokens per step" }, markers: "grpo", covers: ["grpo:tokens."],
    series: (ctx) => parts(ctx, [
      { stage: "grpo", path: "tokens.prefill", label: "prefill" },
      { stage: "grpo", path: "tokens.sampled", label: "sampled" },
      { stage: "grpo", path: "tokens.trained", label: "update" },
    ]) },
  { id: "sft-tokens", group: "Where does time go?", title: "SFT tokens per step", x: SFT_X, y: { title: "tokens per step" }, markers: "sft", covers: ["sft:tokens", "sft:computedTokens"],
    series: (ctx) => parts(ctx, [{ stage: "sft", path: "tokens", label: "in the loss" }, { stage: "sft", path: "computedTokens", label: "computed" }]) },
  { id: "trajectories", group: "Where does time go?", title: "episodes per GRPO step", x: GRPO_X, y: { title: "episodes" }, markers: "grpo", covers: ["grpo:trajectories"],
    series: (ctx) => parts(ctx, [{ stage: "grpo", path: "trajectories", label: "episodes" }]) },
];

export const GROUPS = ["Is it learning?", "Is it stable?", "Where does time go?", "Other figures"];

// Figures that are not curves: the run page shows the setup record's; step and time are axes.
const NOT_CURVES = ["setup:", "sft:step", "grpo:step", "eval-before:step", "eval-after:step", "sft:time", "grpo:time", "eval-before:time", "eval-after:time", "sft:extension"];

/** Every numeric "stage:path" the records hold that no catalog chart covers. */
export function uncoveredFigures(records) {
  const covers = CATALOG.flatMap((c) => c.covers).concat(NOT_CURVES);
  const found = new Set();
  const walk = (stage, o, prefix) => {
    for (const [k, v] of Object.entries(o)) {
      const path = prefix + k;
      if (typeof v === "number") found.add(`${stage}:${path}`);
      else if (v && typeof v === "object" && !Array.isArray(v)) walk(stage, v, `${path}.`);
    }
  };
  for (const m of records) if (typeof m.stage === "string") walk(m.stage, m, "");
  return [...found].filter((f) => !covers.some((c) => f === c || (c.endsWith(".") || c.endsWith(":") ? f.startsWith(c) : false))).sort();
}

/** Chart specs for ctx: [{group, key, spec}] (the catalog's, then one per uncovered figure). */
export function chartSpecs(ctx, alpha) {
  const main = ctx.runs[0];
  const out = CATALOG.map((c) => ({
    group: c.group,
    key: !!c.key,
    id: c.id,
    spec: { title: c.title, x: c.x, y: c.y, series: c.series(ctx), markers: markersFor(c.markers, main.info), alpha },
  }));
  const extra = new Set(ctx.runs.flatMap((r) => uncoveredFigures(r.records)));
  for (const f of extra) {
    const [stage, path] = f.split(":");
    const x = stage === "sft" ? SFT_X : GRPO_X;
    out.push({ group: "Other figures", key: false, id: `other-${f}`, spec: { title: `${path} (${stage})`, x, y: { title: path }, series: parts(ctx, [{ stage, path, label: path }]), markers: markersFor(stage === "sft" ? "sft" : "grpo", main.info), alpha } });
  }
  // A chart with no data in any run is left out (a run without SFT shows no SFT charts).
  return out.filter((c) => c.spec.series.some((s) => s.points.length > 0));
}
