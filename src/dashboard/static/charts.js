// Line charts drawn as SVG, with exponential smoothing and several series (for comparing runs).
// No external libraries: the dashboard works offline.

const COLORS = ["#2f6fde", "#d9622b", "#1a7f37", "#8e44ad", "#b42318", "#0e7c86", "#7a5c00", "#444"];

export function smooth(values, alpha) {
  if (!alpha) return values.slice();
  const out = [];
  let acc = null;
  let weight = 0;
  for (const v of values) {
    if (v == null || !Number.isFinite(v)) { out.push(acc == null ? null : acc / weight); continue; }
    acc = (acc ?? 0) * alpha + (1 - alpha) * v;
    weight = weight * alpha + (1 - alpha);
    out.push(acc / weight);
  }
  return out;
}

function niceTicks(lo, hi, n) {
  if (lo === hi) { lo -= 1; hi += 1; }
  const step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
  const err = (hi - lo) / n / step;
  const s = step * (err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1);
  const ticks = [];
  for (let t = Math.ceil(lo / s) * s; t <= hi + 1e-12; t += s) ticks.push(+t.toPrecision(12));
  return ticks;
}

function fmt(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(1);
  return +v.toPrecision(3) + "";
}

/** series: [{label, points: [[x, y], ...]}] */
export function lineChart(title, series, alpha) {
  const div = document.createElement("div");
  div.className = "chart";
  div.dataset.title = title;
  const W = 360, H = 180, L = 44, R = 8, T = 8, B = 22;
  const all = series.flatMap((s) => s.points.filter((p) => Number.isFinite(p[1])));
  let svg;
  if (all.length === 0) {
    svg = `<div class="empty">no data yet</div>`;
  } else {
    const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
    let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    let body = "";
    for (const t of niceTicks(y0, y1, 4)) body += `<line x1="${L}" x2="${W - R}" y1="${sy(t)}" y2="${sy(t)}" stroke="#eee"/><text x="${L - 4}" y="${sy(t) + 4}" font-size="10" text-anchor="end" fill="#6b7385">${fmt(t)}</text>`;
    for (const t of niceTicks(x0, x1, 5)) body += `<text x="${sx(t)}" y="${H - 6}" font-size="10" text-anchor="middle" fill="#6b7385">${fmt(t)}</text>`;
    series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      const raw = s.points.filter((p) => Number.isFinite(p[1]));
      const sm = smooth(raw.map((p) => p[1]), alpha);
      if (alpha > 0 && raw.length > 1) body += `<polyline fill="none" stroke="${color}" stroke-opacity="0.25" stroke-width="1" points="${raw.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" ")}"/>`;
      body += `<polyline class="series" fill="none" stroke="${color}" stroke-width="1.8" points="${raw.map((p, j) => `${sx(p[0])},${sy(sm[j])}`).join(" ")}"/>`;
      if (raw.length === 1) body += `<circle cx="${sx(raw[0][0])}" cy="${sy(raw[0][1])}" r="3" fill="${color}"/>`;
    });
    svg = `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" role="img" aria-label="${title}">${body}</svg>`;
  }
  const legend = series.map((s, i) => `<span><i style="background:${COLORS[i % COLORS.length]}"></i>${escapeHtml(s.label)}</span>`).join("");
  div.innerHTML = `<h3>${escapeHtml(title)}</h3>${svg}<div class="legend">${legend}</div>`;
  return div;
}

export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
