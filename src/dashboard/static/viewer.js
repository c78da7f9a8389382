// The trajectory viewer: one task's group of rollouts side by side, each turn by turn (messages, tool
// calls, observations), then its tokens: trained tokens (loss mask 1) underlined and coloured by the
// sampled token's probability; context tokens grey.
import { escapeHtml } from "./charts.js";

function messageHtml(m) {
  if (m.role === "assistant") {
    const calls = (Array.isArray(m.toolCalls) ? m.toolCalls : []).map((c) => `<div class="call">→ ${escapeHtml(c.name)}(${escapeHtml(c.arguments)})</div>`).join("");
    return `<div class="msg assistant"><b>assistant</b> ${escapeHtml(m.content || "")}${calls}</div>`;
  }
  if (m.role === "tool") return `<div class="msg tool${m.isError ? " error" : ""}"><b>${escapeHtml(m.name)}</b> ${escapeHtml(m.content)}</div>`;
  return `<div class="msg ${escapeHtml(m.role)}"><b>${escapeHtml(m.role)}</b> ${escapeHtml(m.content)}</div>`;
}

function tokensHtml(r) {
  if (!Array.isArray(r.tokens)) return "";
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
  return `<div class="tokens" data-trained="${trainedCount}"><div class="empty">${r.tokens.length} tokens, ${trainedCount} trained (underlined; colour = sampled probability, red low → green high)</div>${html}</div>`;
}

export function renderGroup(container, records) {
  if (records.length === 0) {
    container.innerHTML = `<div class="empty">no trajectories for this selection</div>`;
    return;
  }
  const sorted = records.slice().sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
  container.innerHTML = `<div class="group">${sorted
    .map((r) => {
      const adv = r.advantage == null ? "" : ` · advantage <b>${Number(r.advantage).toFixed(3)}</b>`;
      // A suite with a reward rubric: each component's score, and whether the verifier says solved.
      const parts = r.rewardComponents && typeof r.rewardComponents === "object"
        ? ` = ${Object.entries(r.rewardComponents)
            .map(([name, c]) => `${escapeHtml(name)} ${c == null || c.score == null ? "error" : Number(c.score).toFixed(2)}`)
            .join(" · ")}${r.success ? " · <b>solved</b>" : ""}`
        : "";
      const evidence = r.evidence ? `<div class="evidence">${escapeHtml(JSON.stringify(r.evidence, null, 1))}</div>` : "";
      return `<div class="rollout" data-reward="${escapeHtml(r.reward)}">
        <header><b>rollout ${escapeHtml(r.index ?? 0)}</b><span class="reward">reward <b>${Number(r.reward).toFixed(2)}</b>${parts}${adv}</span><span>${escapeHtml(r.endReason || "")}</span><span>v${escapeHtml(r.policyVersion ?? "?")}</span></header>
        ${evidence}
        ${(Array.isArray(r.messages) ? r.messages : []).filter((m) => m && typeof m === "object").map(messageHtml).join("")}
        ${tokensHtml(r)}
      </div>`;
    })
    .join("")}</div>`;
}
