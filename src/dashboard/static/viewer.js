// The trajectory browser for one step's trajectories file: the groups (one task's rollouts each) in a
// table that filters by suite and outcome and sorts by reward, spread, advantage or order; buttons that
// jump to the next solved or failed episode; and the chosen group's rollouts side by side (scrolling
// inside their own panel), each turn by turn (messages, tool calls, observations), then its tokens:
// trained tokens (loss mask 1) underlined and coloured by the sampled token's probability, context
// tokens grey. Given a second step's records (another run's, or another step of the same run), the
// chosen group is shown beside the same task (same suite and task index) of that step. It renders
// records it is given; fetching them is app.js's job.
import { escapeHtml } from "./charts.js";

/** Solved: the verifier's verdict where the suite has a reward rubric, else a reward of 1 or more. */
export function solved(r) {
  return typeof r.success === "boolean" ? r.success : Number(r.reward) >= 1;
}

/** One summary per (suite, group): rewards, their spread, the largest |advantage|, solved and failed counts. */
export function groupSummaries(records) {
  const by = new Map();
  for (const r of records) {
    const k = `${r.suite}#${r.group}`;
    if (!by.has(k)) by.set(k, { suite: r.suite, group: r.group, taskIndex: r.taskIndex, rollouts: [] });
    by.get(k).rollouts.push(r);
  }
  return [...by.values()].map((g) => {
    const rewards = g.rollouts.map((r) => Number(r.reward)).filter(Number.isFinite);
    const advs = g.rollouts.map((r) => Math.abs(Number(r.advantage))).filter(Number.isFinite);
    const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : 0;
    return {
      ...g,
      mean,
      max: rewards.length ? Math.max(...rewards) : 0,
      spread: rewards.length ? Math.max(...rewards) - Math.min(...rewards) : 0,
      advantage: advs.length ? Math.max(...advs) : 0,
      solved: g.rollouts.filter(solved).length,
      failed: g.rollouts.filter((r) => !solved(r)).length,
      hasTokens: g.rollouts.some((r) => Array.isArray(r.tokens)),
    };
  });
}

const SORTS = {
  spread: ["reward spread (most signal first)", (a, b) => b.spread - a.spread || b.mean - a.mean],
  "reward-desc": ["mean reward, highest first", (a, b) => b.mean - a.mean],
  "reward-asc": ["mean reward, lowest first", (a, b) => a.mean - b.mean],
  advantage: ["largest |advantage| first", (a, b) => b.advantage - a.advantage],
  order: ["suite and group", (a, b) => (a.suite < b.suite ? -1 : a.suite > b.suite ? 1 : a.group - b.group)],
};
const OUTCOMES = { both: "tasks in both steps (side by side)", all: "every group", solved: "with a solved episode", failed: "with a failed episode", mixed: "mixed (some solved, some not)", zero: "every reward 0" };

function messageHtml(m) {
  if (m.role === "assistant") {
    const calls = (Array.isArray(m.toolCalls) ? m.toolCalls : []).map((c) => `<div class="call">→ ${escapeHtml(c.name)}(${escapeHtml(c.arguments)})</div>`).join("");
    return `<div class="msg assistant"><b>assistant</b> ${escapeHtml(m.content || "")}${calls}</div>`;
  }
  if (m.role === "tool") return `<div class="msg tool${m.isError ? " error" : ""}"><b>${escapeHtml(m.name)}</b> ${escapeHtml(m.content)}</div>`;
  if (m.role === "system") {
    const text = String(m.content ?? "");
    const first = text.split("\n")[0].slice(0, 90);
    return `<details class="msg system"><summary><b>system</b> ${escapeHtml(first)}${text.length > first.length ? " … <i>(open for all " + text.length + " characters)</i>" : ""}</summary><div class="full">${escapeHtml(text)}</div></details>`;
  }
  return `<div class="msg ${escapeHtml(m.role)}"><b>${escapeHtml(m.role)}</b> ${escapeHtml(m.content)}</div>`;
}

function tokensHtml(r, groupHasTokens) {
  if (!Array.isArray(r.tokens)) {
    return `<div class="tokens-missing">tokens not recorded for this rollout: a run saves the tokens of the first group of each suite per step only${groupHasTokens ? "" : " (pick that group to see them)"}</div>`;
  }
  const pieces = Array.isArray(r.pieces) ? r.pieces : r.tokens.map((t) => `[${t}]`);
  let html = "";
  for (let i = 0; i < r.tokens.length; i++) {
    const trained = Array.isArray(r.lossMask) && r.lossMask[i] === 1;
    const lp = Array.isArray(r.logprobs) ? Number(r.logprobs[i]) : 0;
    if (trained) {
      const p = Math.exp(lp);
      html += `<span class="tok trained" style="background:hsl(${Math.round(120 * p)},70%,85%)" title="log p = ${lp.toFixed(3)}">${escapeHtml(pieces[i])}</span>`;
    } else {
      html += `<span class="tok ctx">${escapeHtml(pieces[i])}</span>`;
    }
  }
  const trainedCount = Array.isArray(r.lossMask) ? r.lossMask.filter((x) => x === 1).length : 0;
  return `<div class="tokens" data-trained="${trainedCount}"><div class="hint">${r.tokens.length} tokens, ${trainedCount} trained (underlined; colour = sampled probability, red low → green high); scrolls</div>${html}</div>`;
}

export function renderGroup(container, records) {
  if (records.length === 0) {
    container.innerHTML = `<div class="empty">no trajectories for this selection</div>`;
    return;
  }
  const sorted = records.slice().sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
  const groupHasTokens = sorted.some((r) => Array.isArray(r.tokens));
  container.innerHTML = `<div class="hint">${sorted.length} rollouts of task ${escapeHtml(sorted[0].taskIndex)} (${escapeHtml(sorted[0].suite)})${sorted.length > 3 ? "; the row scrolls sideways" : ""}</div><div class="group">${sorted
    .map((r) => {
      const adv = r.advantage == null ? "" : ` · advantage <b>${Number(r.advantage).toFixed(3)}</b>`;
      // A suite with a reward rubric: each component's score, and whether the verifier says solved.
      const parts = r.rewardComponents && typeof r.rewardComponents === "object"
        ? ` = ${Object.entries(r.rewardComponents)
            .map(([name, c]) => `${escapeHtml(name)} ${c == null || c.score == null ? "error" : Number(c.score).toFixed(2)}`)
            .join(" · ")}${r.success ? " · <b>solved</b>" : ""}`
        : "";
      const ev = r.evidence ? JSON.stringify(r.evidence, null, 1) : "";
      const evidence = ev ? `<details class="evidence"><summary>evidence (${ev.length} characters)</summary><pre>${escapeHtml(ev)}</pre></details>` : "";
      return `<div class="rollout ${solved(r) ? "solved" : "failed"}" data-reward="${escapeHtml(r.reward)}" data-index="${escapeHtml(r.index ?? 0)}">
        <header><b>rollout ${escapeHtml(r.index ?? 0)}</b><span class="reward">reward <b>${Number(r.reward).toFixed(2)}</b>${parts}${adv}</span><span>${escapeHtml(r.endReason || "")}</span><span>v${escapeHtml(r.policyVersion ?? "?")}</span></header>
        ${r.error ? `<div class="msg error">${escapeHtml(r.error)}</div>` : ""}
        ${evidence}
        ${(Array.isArray(r.messages) ? r.messages : []).filter((m) => m && typeof m === "object").map(messageHtml).join("")}
        ${tokensHtml(r, groupHasTokens)}
      </div>`;
    })
    .join("")}</div>`;
}

/** The rollouts of task `taskIndex` of `suite` among `records` (its first group there), or []. */
export function sameTask(records, suite, taskIndex) {
  const first = records.find((r) => r.suite === suite && r.taskIndex === taskIndex);
  return first ? records.filter((r) => r.suite === suite && r.group === first.group) : [];
}

/**
 * Mounts the browser for one trajectories file's records into `container`; with `side`
 * ({label, mainLabel, records}) each chosen group is shown beside the same task of those records.
 */
export function mountTrajectories(container, records, side = null) {
  const all = groupSummaries(records);
  if (side) for (const g of all) g.inBoth = sameTask(side.records, g.suite, g.taskIndex).length > 0;
  const suites = [...new Set(all.map((g) => g.suite))];
  // Beside another step, the list opens on the tasks both steps have (when there are any).
  const ui = { suite: "", outcome: side && all.some((g) => g.inBoth) ? "both" : "all", sort: "spread", current: null };
  container.innerHTML = `<div class="viewer-controls">
      <label>Suite <select class="t-suite"><option value="">every suite</option>${suites.map((s) => `<option>${escapeHtml(s)}</option>`).join("")}</select></label>
      <label>Groups <select class="t-outcome">${Object.entries(OUTCOMES).filter(([k]) => side || k !== "both").map(([k, v]) => `<option value="${k}">${escapeHtml(v)}</option>`).join("")}</select></label>
      <label>Sort <select class="t-sort">${Object.entries(SORTS).map(([k, [v]]) => `<option value="${k}">${escapeHtml(v)}</option>`).join("")}</select></label>
      <button type="button" class="t-next-solved">next solved episode</button>
      <button type="button" class="t-next-failed">next failed episode</button>
    </div>
    <div class="traj-layout"><div class="group-list"></div><div class="group-view"></div></div>`;
  const $ = (c) => container.querySelector(c);
  $(".t-outcome").value = ui.outcome;
  const visible = () => all
    .filter((g) => !ui.suite || g.suite === ui.suite)
    .filter((g) => ui.outcome === "all" || (ui.outcome === "both" ? g.inBoth : (ui.outcome === "solved" ? g.solved > 0 : ui.outcome === "failed" ? g.failed > 0 : ui.outcome === "mixed" ? g.solved > 0 && g.failed > 0 : g.max === 0)))
    .sort(SORTS[ui.sort][1]);
  const keyOf = (g) => `${g.suite}#${g.group}`;
  const show = (g, focus) => {
    ui.current = g ? keyOf(g) : null;
    for (const row of container.querySelectorAll(".group-list tr[data-key]")) row.classList.toggle("current", row.dataset.key === ui.current);
    if (!side) renderGroup($(".group-view"), g ? g.rollouts : []);
    else {
      $(".group-view").innerHTML = `<div class="side-by-side"><div class="side main"><h3>${escapeHtml(side.mainLabel)}</h3><div class="panel"></div></div><div class="side other"><h3>${escapeHtml(side.label)}</h3><div class="panel"></div></div></div>`;
      renderGroup($(".side.main .panel"), g ? g.rollouts : []);
      const twin = g ? sameTask(side.records, g.suite, g.taskIndex) : [];
      if (twin.length || !g) renderGroup($(".side.other .panel"), twin);
      else $(".side.other .panel").innerHTML = `<div class="empty">task ${escapeHtml(g.taskIndex)} (${escapeHtml(g.suite)}) is not in ${escapeHtml(side.label)}: pick "tasks in both steps" under Groups</div>`;
    }
    if (focus != null) {
      const el = $(`.group-view ${side ? ".side.main " : ""}.rollout[data-index="${focus}"]`);
      if (el) { el.classList.add("focus"); el.scrollIntoView({ block: "nearest", inline: "nearest" }); }
    }
  };
  const list = () => {
    const gs = visible();
    $(".group-list").innerHTML = gs.length
      ? `<table><thead><tr><th>suite</th><th>task</th><th>mean</th><th>max</th><th>spread</th><th>|adv|</th><th>solved</th></tr></thead><tbody>${gs
          .map((g) => `<tr data-key="${escapeHtml(keyOf(g))}" tabindex="0"><td>${escapeHtml(g.suite)}</td><td>${escapeHtml(g.taskIndex)}${g.hasTokens ? "" : ' <span class="no-tok hint" title="a run saves the tokens of the first group of each suite per step only">(no tokens)</span>'}</td><td>${g.mean.toFixed(2)}</td><td>${g.max.toFixed(2)}</td><td>${g.spread.toFixed(2)}</td><td>${g.advantage.toFixed(2)}</td><td>${g.solved}/${g.rollouts.length}</td></tr>`)
          .join("")}</tbody></table>`
      : `<div class="empty">no group matches</div>`;
    for (const row of container.querySelectorAll(".group-list tr[data-key]")) {
      row.addEventListener("click", () => show(gs.find((g) => keyOf(g) === row.dataset.key)));
    }
    show(gs.find((g) => keyOf(g) === ui.current) || gs[0]);
  };
  // The next episode (in the table's order, after the one in view) that is solved / failed.
  const jump = (want) => {
    const gs = visible();
    const start = Math.max(0, gs.findIndex((g) => keyOf(g) === ui.current));
    const focused = Number($(".group-view .rollout.focus")?.dataset.index ?? -1);
    for (let k = 0; k <= gs.length; k++) {
      const g = gs[(start + k) % gs.length];
      if (!g) break;
      const hits = g.rollouts.filter((r) => solved(r) === want).sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
      const next = hits.find((r) => k > 0 || (r.index ?? 0) > focused);
      if (next) return show(g, next.index ?? 0);
    }
    $(".group-view").insertAdjacentHTML("afterbegin", `<div class="note">no ${want ? "solved" : "failed"} episode among these groups</div>`);
  };
  $(".t-suite").addEventListener("change", (e) => { ui.suite = e.target.value; list(); });
  $(".t-outcome").addEventListener("change", (e) => { ui.outcome = e.target.value; list(); });
  $(".t-sort").addEventListener("change", (e) => { ui.sort = e.target.value; list(); });
  $(".t-next-solved").addEventListener("click", () => jump(true));
  $(".t-next-failed").addEventListener("click", () => jump(false));
  list();
}
