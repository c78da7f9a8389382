// Line charts drawn as SVG: axis titles with units, readable ticks (integer steps on x; 3 significant
// digits, never the same label twice), phase markers (vertical lines with a label), a hover readout,
// exponential smoothing, and several series told apart by colour and dash.
// No external libraries: the dashboard works offline. It knows nothing of runs or metrics (metrics.js).

export const COLORS = ["#2f6fde", "#d9622b", "#1a7f37", "#8e44ad", "#b42318", "#0e7c86", "#7a5c00", "#444"];
export const DASHES = ["", "6 3", "2 3", "8 3 2 3", "1 2"];

export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

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

/** Round tick positions covering [lo, hi], about n of them; with `integer`, whole numbers only. */
export function niceTicks(lo, hi, n, integer = false) {
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const err = raw / mag;
  let s = mag * (err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1);
  if (integer) s = Math.max(1, Math.round(s));
  const ticks = [];
  for (let t = Math.ceil(lo / s - 1e-9) * s; t <= hi + s * 1e-9; t += s) ticks.push(+t.toPrecision(12));
  return ticks;
}

/** A number in at most 3 significant digits, with k/M/G for large ones and an exponent for tiny ones. */
export function fmt(v, digits = 3) {
  if (!Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e9) return +(v / 1e9).toPrecision(digits) + "G";
  if (a >= 1e6) return +(v / 1e6).toPrecision(digits) + "M";
  if (a >= 1e4) return +(v / 1e3).toPrecision(digits) + "k";
  if (a < 1e-3) return v.toExponential(Math.max(0, digits - 1)).replace(/\.?0+e/, "e");
  return String(+v.toPrecision(digits));
}

/** Tick labels: 3 significant digits, more where two ticks would read the same; duplicates dropped. */
export function tickLabels(ticks) {
  for (let d = 3; d <= 6; d++) {
    const labels = ticks.map((t) => fmt(t, d));
    if (new Set(labels).size === labels.length) return ticks.map((t, i) => [t, labels[i]]);
  }
  const seen = new Set();
  return ticks.map((t) => [t, fmt(t, 6)]).filter(([, l]) => (seen.has(l) ? false : seen.add(l)));
}

/** The y range to draw: the data's, padded so a flat or one-point series sits mid-chart. */
function yRange(ys) {
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  const span = y1 - y0;
  const scale = Math.max(Math.abs(y0), Math.abs(y1));
  if (span <= scale * 1e-6 || span === 0) {
    const pad = scale ? scale * 0.05 : 0.5;
    return [y0 - pad, y1 + pad];
  }
  return [y0 - span * 0.05, y1 + span * 0.05];
}

/**
 * spec: {title, x: {title, integer}, y: {title}, series: [{label, points: [[x, y]], color, dash}],
 * markers: [{x, label}], alpha, note}. Returns a `.chart` element (with a hover readout).
 */
export function lineChart(spec) {
  const { title, series, markers = [], alpha = 0 } = spec;
  const div = document.createElement("div");
  div.className = "chart";
  div.dataset.title = title;
  const W = 420, H = 230, L = 56, R = 10, T = 18, B = 40;
  const clean = series.map((s) => ({ ...s, points: s.points.filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1])).sort((a, b) => a[0] - b[0]) }));
  const all = clean.flatMap((s) => s.points);
  const xTitle = spec.x?.title ?? "step";
  const yTitle = spec.y?.title ?? "";
  const axisTitles = `<text class="axis-title x" x="${(L + W - R) / 2}" y="${H - 4}" text-anchor="middle">${escapeHtml(xTitle)}</text>` +
    `<text class="axis-title y" transform="translate(12 ${(T + H - B) / 2}) rotate(-90)" text-anchor="middle">${escapeHtml(yTitle)}</text>`;
  let svg;
  if (all.length === 0) {
    svg = `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${escapeHtml(title)}: no data">${axisTitles}<text x="${W / 2}" y="${H / 2}" text-anchor="middle" class="nodata">no data yet</text></svg>`;
  } else {
    const xs = all.map((p) => p[0]).concat(markers.map((m) => m.x).filter(Number.isFinite));
    let x0 = Math.min(...xs), x1 = Math.max(...xs);
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    const [y0, y1] = yRange(all.map((p) => p[1]));
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    let body = `<rect x="${L}" y="${T}" width="${W - L - R}" height="${H - T - B}" fill="none" stroke="#e3e6ec"/>`;
    for (const [t, label] of tickLabels(niceTicks(y0, y1, 4))) {
      if (t < y0 || t > y1) continue;
      body += `<line x1="${L}" x2="${W - R}" y1="${sy(t)}" y2="${sy(t)}" stroke="#eef0f3"/><text class="tick y" x="${L - 4}" y="${sy(t) + 4}" text-anchor="end">${label}</text>`;
    }
    for (const [t, label] of tickLabels(niceTicks(x0, x1, 5, spec.x?.integer !== false))) {
      if (t < x0 || t > x1) continue;
      body += `<line x1="${sx(t)}" x2="${sx(t)}" y1="${H - B}" y2="${H - B + 4}" stroke="#9aa1b0"/><text class="tick x" x="${sx(t)}" y="${H - B + 15}" text-anchor="middle">${label}</text>`;
    }
    // Phase markers: labels alternate between two rows so neighbours do not overlap.
    markers.filter((m) => Number.isFinite(m.x)).forEach((m, i) => {
      const x = sx(m.x);
      body += `<g class="marker" data-kind="${escapeHtml(m.kind || "")}"><line x1="${x}" x2="${x}" y1="${T}" y2="${H - B}" stroke="${m.color || "#7a5c00"}" stroke-dasharray="3 3"/>` +
        `<text x="${x}" y="${i % 2 ? T - 2 : 10}" text-anchor="${x > W - R - 45 ? "end" : x < L + 45 ? "start" : "middle"}" fill="${m.color || "#7a5c00"}">${escapeHtml(m.label)}</text><title>${escapeHtml(m.title || m.label)}</title></g>`;
    });
    clean.forEach((s, i) => {
      const color = s.color || COLORS[i % COLORS.length];
      const dash = s.dash ? ` stroke-dasharray="${s.dash}"` : "";
      const raw = s.points;
      if (raw.length === 0) return;
      const sm = smooth(raw.map((p) => p[1]), raw.length > 2 ? alpha : 0);
      if (alpha > 0 && raw.length > 2) body += `<polyline fill="none" stroke="${color}" stroke-opacity="0.25" stroke-width="1"${dash} points="${raw.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" ")}"/>`;
      body += `<polyline class="series" data-label="${escapeHtml(s.label)}" fill="none" stroke="${color}" stroke-width="1.8"${dash} points="${raw.map((p, j) => `${sx(p[0])},${sy(sm[j])}`).join(" ")}"/>`;
      if (raw.length <= 3) body += raw.map((p) => `<circle cx="${sx(p[0])}" cy="${sy(p[1])}" r="3" fill="${color}"/>`).join("");
    });
    body += `<line class="cursor" x1="0" x2="0" y1="${T}" y2="${H - B}" stroke="#1d2330" stroke-opacity="0.35" visibility="hidden"/>`;
    body += `<rect class="hover" x="${L}" y="${T}" width="${W - L - R}" height="${H - T - B}" fill="transparent"/>`;
    svg = `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${escapeHtml(title)}">${body}${axisTitles}</svg>`;
    div._hover = { sx, x0, x1, L, R, W, series: clean, xTitle, yTitle };
  }
  const legend = clean.map((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    return `<span><svg width="22" height="6"><line x1="0" x2="22" y1="3" y2="3" stroke="${color}" stroke-width="2"${s.dash ? ` stroke-dasharray="${s.dash}"` : ""}/></svg>${escapeHtml(s.label)}</span>`;
  }).join("");
  div.innerHTML = `<h3>${escapeHtml(title)}</h3>${spec.note ? `<div class="chart-note">${escapeHtml(spec.note)}</div>` : ""}<div class="plot">${svg}<div class="readout" hidden></div></div><div class="legend">${legend}</div>`;
  if (div._hover) attachHover(div);
  return div;
}

/** The hover readout: the x nearest the pointer and every series' value there. */
function attachHover(div) {
  const h = div._hover;
  const svg = div.querySelector("svg");
  const cursor = svg.querySelector(".cursor");
  const readout = div.querySelector(".readout");
  const xsAll = [...new Set(h.series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  const hide = () => { readout.hidden = true; cursor.setAttribute("visibility", "hidden"); };
  svg.querySelector(".hover").addEventListener("mousemove", (ev) => {
    const box = svg.getBoundingClientRect();
    const vx = ((ev.clientX - box.left) / box.width) * h.W;
    const x = h.x0 + ((vx - h.L) / (h.W - h.L - h.R)) * (h.x1 - h.x0);
    let best = xsAll[0];
    for (const v of xsAll) if (Math.abs(v - x) < Math.abs(best - x)) best = v;
    cursor.setAttribute("x1", h.sx(best));
    cursor.setAttribute("x2", h.sx(best));
    cursor.setAttribute("visibility", "visible");
    const rows = h.series
      .map((s, i) => {
        const p = s.points.find((q) => q[0] === best);
        return p ? `<div><i style="background:${s.color || COLORS[i % COLORS.length]}"></i>${escapeHtml(s.label)}: <b>${fmt(p[1], 4)}</b></div>` : "";
      })
      .join("");
    readout.innerHTML = `<div>${escapeHtml(h.xTitle)} ${fmt(best, 6)}${h.yTitle ? ` · ${escapeHtml(h.yTitle)}` : ""}</div>${rows}`;
    readout.hidden = false;
    const left = ((h.sx(best) / h.W) * box.width);
    readout.style.left = `${Math.min(left + 8, box.width - 170)}px`;
  });
  svg.querySelector(".hover").addEventListener("mouseleave", hide);
}
