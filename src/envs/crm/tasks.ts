/**
 * CRM task types, modeled on CRMArena's, with their exact answers computed from the generated records.
 *
 * Nine types in three difficulty levels:
 *   1  knowledge_qa (a fact in the knowledge base), entity_disambiguation (one of several contacts with
 *      the same name), transfer_count (from a case's history);
 *   2  top_issue (most reported issue for a product in a period), busiest_month (an account's month
 *      with most cases), top_account_revenue (the account that spent most on a product in a period);
 *   3  handle_time (the agent with the shortest average handle time in a period), case_routing (the
 *      best agent for a new case), policy_violation (which policy, if any, a transcript breaks).
 * A task is kept only when its answer is unique (no ties). Deterministic per seed. This file computes
 * answers from the in-memory records; it does not query the database or judge submissions.
 */
import { Rng } from "../../core/index.js";
import { POLICIES, warrantyMonths, type CrmData } from "./generate.js";

export const CRM_TASK_TYPES = {
  knowledge_qa: 1,
  entity_disambiguation: 1,
  transfer_count: 1,
  top_issue: 2,
  busiest_month: 2,
  top_account_revenue: 2,
  handle_time: 3,
  case_routing: 3,
  policy_violation: 3,
} as const;
export type CrmTaskType = keyof typeof CRM_TASK_TYPES;

export interface CrmTask {
  id: string;
  type: CrmTaskType;
  level: number;
  question: string;
  /** The exact answer, as the question asks for it. */
  answer: string;
  /** Parameters of the question (names, ids, dates), for the scripted expert and for evidence. */
  params: Record<string, string | number>;
}

const QUARTERS: [string, string][] = [
  ["2024-01-01", "2024-03-31"],
  ["2024-04-01", "2024-06-30"],
  ["2024-07-01", "2024-09-30"],
  ["2024-10-01", "2024-12-31"],
];
const MONTHS: [string, string][] = [...Array(12).keys()].map((m) => {
  const mm = String(m + 1).padStart(2, "0");
  const last = new Date(Date.UTC(2024, m + 1, 0)).getUTCDate();
  return [`2024-${mm}-01`, `2024-${mm}-${last}`];
});
const HALVES: [string, string][] = [
  ["2024-01-01", "2024-06-30"],
  ["2024-07-01", "2024-12-31"],
];

/** The key with the strictly largest value, or undefined when the top is tied. */
function uniqueMax<K>(scores: Map<K, number>): K | undefined {
  let best: K | undefined;
  let top = -Infinity;
  let tied = false;
  for (const [k, v] of scores) {
    if (v > top) [best, top, tied] = [k, v, false];
    else if (v === top) tied = true;
  }
  return tied ? undefined : best;
}
function bump<K>(m: Map<K, number>, k: K, by = 1): void {
  m.set(k, (m.get(k) ?? 0) + by);
}
const inRange = (ts: string | null, [from, to]: [string, string]) => ts !== null && ts.slice(0, 10) >= from && ts.slice(0, 10) <= to;

type Maker = (d: CrmData, rng: Rng) => Omit<CrmTask, "id" | "type" | "level"> | undefined;

const MAKERS: Record<CrmTaskType, Maker> = {
  knowledge_qa(d, rng) {
    const p = rng.pick(d.products);
    return {
      question: `According to the knowledge base, how long is the warranty period of the ${p.name}, in months? Answer with the number only.`,
      answer: String(warrantyMonths(p.id)),
      params: { product: p.name },
    };
  },
  entity_disambiguation(d, rng) {
    const byName = new Map<string, typeof d.contacts>();
    for (const c of d.contacts) byName.set(`${c.first_name} ${c.last_name}`, [...(byName.get(`${c.first_name} ${c.last_name}`) ?? []), c]);
    const ambiguous = [...byName.entries()].filter(([, cs]) => new Set(cs.map((c) => c.account_id)).size === cs.length && cs.length >= 2);
    if (ambiguous.length === 0) return undefined;
    const [name, cs] = rng.pick(ambiguous);
    const c = rng.pick(cs);
    const account = d.accounts[c.account_id - 1]!;
    return {
      question: `There is more than one contact named ${name}. What is the email address of the ${name} who works at ${account.name}? Answer with the email address only.`,
      answer: c.email,
      params: { name, account: account.name },
    };
  },
  transfer_count(d, rng) {
    const c = rng.pick(d.cases);
    const n = d.caseHistory.filter((e) => e.case_id === c.id && e.event === "Transferred").length;
    return {
      question: `How many times was case ${c.id} transferred from one agent to another? Answer with a number.`,
      answer: String(n),
      params: { caseId: c.id },
    };
  },
  top_issue(d, rng) {
    const p = rng.pick(d.products);
    const period = rng.pick([...QUARTERS, ...HALVES]);
    const counts = new Map<number, number>();
    for (const c of d.cases) if (c.product_id === p.id && inRange(c.created_at, period)) bump(counts, c.issue_id);
    const top = uniqueMax(counts);
    if (top === undefined) return undefined;
    return {
      question: `Which issue was reported most often in cases about the ${p.name} created between ${period[0]} and ${period[1]} (inclusive)? Answer with the issue's name.`,
      answer: d.issues[top - 1]!.name,
      params: { product: p.name, from: period[0], to: period[1] },
    };
  },
  busiest_month(d, rng) {
    const a = rng.pick(d.accounts);
    const counts = new Map<string, number>();
    for (const c of d.cases) if (c.account_id === a.id) bump(counts, c.created_at.slice(0, 7));
    const top = uniqueMax(counts);
    if (top === undefined) return undefined;
    return {
      question: `In which month of 2024 did ${a.name} open the most support cases? Answer as YYYY-MM.`,
      answer: top,
      params: { account: a.name },
    };
  },
  top_account_revenue(d, rng) {
    const p = rng.pick(d.products);
    const period = rng.pick([...QUARTERS, ...HALVES]);
    const cents = new Map<number, number>();
    for (const o of d.orders) {
      if (o.product_id === p.id && o.status === "Delivered" && inRange(o.ordered_at, period)) bump(cents, o.account_id, o.quantity * Math.round(o.unit_price * 100));
    }
    const top = uniqueMax(cents);
    if (top === undefined) return undefined;
    return {
      question: `Which account spent the most on the ${p.name} in delivered orders placed between ${period[0]} and ${period[1]} (inclusive)? The amount of an order is quantity times unit price. Answer with the account's name.`,
      answer: d.accounts[top - 1]!.name,
      params: { product: p.name, from: period[0], to: period[1] },
    };
  },
  handle_time(d, rng) {
    const period = rng.pick([...MONTHS, ...QUARTERS, ...HALVES]);
    const sum = new Map<number, number>();
    const n = new Map<number, number>();
    for (const c of d.cases) {
      if (c.status === "Closed" && inRange(c.closed_at, period)) {
        bump(sum, c.agent_id, c.handle_minutes!);
        bump(n, c.agent_id);
      }
    }
    const eligible = [...n.entries()].filter(([, k]) => k >= 3).map(([id]) => id);
    if (eligible.length < 2) return undefined;
    // Shortest average; compare averages exactly (cross-multiplied).
    eligible.sort((x, y) => sum.get(x)! * n.get(y)! - sum.get(y)! * n.get(x)!);
    const [a, b] = eligible;
    if (sum.get(a!)! * n.get(b!)! === sum.get(b!)! * n.get(a!)!) return undefined;
    return {
      question: `Among the agents who closed at least 3 cases between ${period[0]} and ${period[1]} (by closing date, inclusive), who had the shortest average handle time on those cases? Answer with the agent's full name.`,
      answer: d.agents[a! - 1]!.name,
      params: { from: period[0], to: period[1] },
    };
  },
  case_routing(d, rng) {
    const issue = rng.pick(d.issues);
    const contact = rng.pick(d.contacts);
    const account = d.accounts[contact.account_id - 1]!;
    const product = rng.pick(d.products);
    const sum = new Map<number, number>();
    const n = new Map<number, number>();
    for (const c of d.cases) {
      if (c.status === "Closed" && c.issue_id === issue.id) {
        bump(sum, c.agent_id, c.handle_minutes!);
        bump(n, c.agent_id);
      }
    }
    const ranked = [...n.keys()].sort((x, y) => n.get(y)! - n.get(x)! || sum.get(x)! * n.get(y)! - sum.get(y)! * n.get(x)!);
    if (ranked.length < 2) return undefined;
    const [a, b] = ranked;
    if (n.get(a!) === n.get(b!) && sum.get(a!)! * n.get(b!)! === sum.get(b!)! * n.get(a!)!) return undefined;
    return {
      question:
        `A new case was just opened by ${contact.first_name} ${contact.last_name} of ${account.name} about their ${product.name}: "${issue.description}" ` +
        "Route it to the best agent: the one who has closed the most past cases of the same issue category; if several agents tie, the one among them " +
        "with the shortest average handle time on those cases. Answer with the agent's full name.",
      answer: d.agents[a! - 1]!.name,
      params: { issueDescription: issue.description, product: product.name },
    };
  },
  policy_violation(d, rng) {
    const violating = [...d.violations.keys()];
    const caseId = rng.next() < 0.55 && violating.length ? rng.pick(violating) : rng.pick(d.cases).id;
    return {
      question:
        `Read the transcript of case ${caseId}. Did the support agent break one of the support policies in the knowledge base? ` +
        `Answer with the exact title of the policy that was broken, or "None" if no policy was broken.`,
      answer: d.violations.get(caseId) ?? "None",
      params: { caseId },
    };
  },
};

export interface CrmTaskOptions {
  count: number;
  seed: number;
  levels?: number[];
  types?: CrmTaskType[];
}

/** `count` tasks, cycling over the selected types, each with a unique answer; deterministic per seed. */
export function generateCrmTasks(data: CrmData, options: CrmTaskOptions): CrmTask[] {
  const all = Object.keys(CRM_TASK_TYPES) as CrmTaskType[];
  for (const t of options.types ?? []) if (!all.includes(t)) throw new Error(`unknown CRM task type "${t}"; known: ${all.join(", ")}`);
  for (const l of options.levels ?? []) if (![1, 2, 3].includes(l)) throw new Error(`CRM difficulty level ${l} does not exist; use 1, 2 or 3`);
  const types = all.filter((t) => (!options.types?.length || options.types.includes(t)) && (!options.levels?.length || options.levels.includes(CRM_TASK_TYPES[t])));
  if (types.length === 0) throw new Error("no CRM task type matches the given levels and types");
  const rng = new Rng(options.seed * 104729 + 3);
  // Draw distinct tasks per type (some types have few distinct questions), then interleave the types.
  const target = Math.min(options.count, 2 * Math.ceil(options.count / types.length));
  const pools = types.map((type) => {
    const pool: Omit<CrmTask, "id" | "type" | "level">[] = [];
    const seen = new Set<string>();
    const typeRng = rng.fork(all.indexOf(type));
    for (let attempt = 0; attempt < 300 && pool.length < target; attempt++) {
      const made = MAKERS[type](data, typeRng);
      if (!made || seen.has(made.question)) continue;
      seen.add(made.question);
      pool.push(made);
    }
    return { type, pool };
  });
  const tasks: CrmTask[] = [];
  for (let round = 0; tasks.length < options.count; round++) {
    const before = tasks.length;
    for (const { type, pool } of pools) {
      if (round < pool.length && tasks.length < options.count) tasks.push({ id: `crm/${options.seed}/${tasks.length}`, type, level: CRM_TASK_TYPES[type], ...pool[round]! });
    }
    if (tasks.length === before) throw new RangeError(`could only generate ${tasks.length} of ${options.count} distinct CRM tasks of types ${types.join(", ")}; ask for fewer`);
  }
  return tasks;
}

export { POLICIES };
