/**
 * The CRM dataset, generated deterministically from a seed: agents, accounts, contacts, products,
 * orders, issues, support cases with their history and transcripts, and knowledge articles (product
 * facts and the support policies). The same seed always gives the same records, on every platform.
 *
 * This file builds plain records in memory; `store.ts` writes them to SQLite or PostgreSQL and
 * `tasks.ts` computes task answers from them. It knows nothing of HTTP or tools.
 */
import { Rng } from "../../core/index.js";

export interface Agent { id: number; name: string; email: string; team: string; hired_on: string }
export interface Account { id: number; name: string; industry: string; region: string; created_at: string }
export interface Contact { id: number; account_id: number; first_name: string; last_name: string; email: string; phone: string; title: string }
export interface Product { id: number; name: string; category: string; price: number }
export interface Order { id: number; account_id: number; contact_id: number; product_id: number; quantity: number; unit_price: number; ordered_at: string; status: string }
export interface Issue { id: number; name: string; description: string }
export interface Case {
  id: number; account_id: number; contact_id: number; product_id: number; issue_id: number; agent_id: number;
  subject: string; status: string; priority: string; created_at: string; closed_at: string | null; handle_minutes: number | null;
}
export interface CaseEvent { id: number; case_id: number; at: string; event: string; old_value: string | null; new_value: string | null }
export interface CaseMessage { id: number; case_id: number; seq: number; at: string; sender: string; text: string }
export interface Article { id: number; title: string; kind: string; product_id: number | null; issue_id: number | null; body: string }

export interface CrmData {
  seed: number;
  agents: Agent[];
  accounts: Account[];
  contacts: Contact[];
  products: Product[];
  orders: Order[];
  issues: Issue[];
  cases: Case[];
  caseHistory: CaseEvent[];
  caseMessages: CaseMessage[];
  articles: Article[];
  /** For each case whose transcript breaks a policy: the policy article's title. Derived data, not stored. */
  violations: Map<number, string>;
}

const FIRST = ["Ana", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hugo", "Irene", "Jonas", "Keiko", "Liam", "Maya", "Nikhil", "Olga", "Pedro", "Quinn", "Rosa", "Samir", "Tara", "Umar", "Vera", "Wei", "Ximena", "Yusuf", "Zoe"];
const LAST = ["Silva", "Smith", "Chen", "Novak", "Garcia", "Okafor", "Kim", "Muller", "Rossi", "Tanaka", "Haddad", "Jensen", "Patel", "Moreau", "Kowalski", "Ivanova"];
const AGENT_NAMES = ["Alice Brandt", "Bruno Costa", "Chloe Dubois", "Dmitri Orlov", "Esther Lang", "Felix Adeyemi", "Gina Marino", "Hassan Aziz", "Isla McKay", "Jorge Ruiz"];
const TEAMS = ["Tier 1", "Tier 2", "Billing"];
const CO_A = ["Apex", "Blue", "Cedar", "Delta", "Ember", "Fjord", "Granite", "Harbor", "Iris", "Juniper", "Keystone", "Lumen", "Maple", "Nimbus", "Orbit", "Pioneer", "Quartz", "Ridge", "Summit", "Tidal", "Unity", "Vertex", "Willow", "Zenith"];
const CO_B = ["Logistics", "Health", "Foods", "Energy", "Retail", "Labs", "Finance", "Media", "Motors", "Textiles"];
const INDUSTRIES: Record<string, string> = { Logistics: "Transportation", Health: "Healthcare", Foods: "Food & Beverage", Energy: "Energy", Retail: "Retail", Labs: "Technology", Finance: "Financial Services", Media: "Media", Motors: "Manufacturing", Textiles: "Manufacturing" };
const REGIONS = ["North America", "Europe", "Asia Pacific", "Latin America", "Middle East"];
const PRODUCTS: [string, string, number, number][] = [
  // name, category, price, warranty months
  ["Nimbus Router X2", "Hardware", 249, 24],
  ["Nimbus Router Mini", "Hardware", 129, 12],
  ["Sentinel Firewall 500", "Hardware", 899, 36],
  ["DataVault NAS 4", "Hardware", 649, 24],
  ["PulseCam Indoor", "Hardware", 89, 12],
  ["CloudSync Pro", "Software", 199, 6],
  ["CloudSync Team", "Software", 499, 6],
  ["LedgerLite", "Software", 299, 12],
  ["ShieldAV Business", "Software", 159, 12],
  ["Install Plus", "Service", 150, 3],
  ["Care 24/7", "Service", 399, 12],
  ["Migration Assist", "Service", 750, 3],
];
const ISSUES: [string, string][] = [
  ["Login failure", "The customer cannot sign in or is locked out."],
  ["Billing discrepancy", "An invoice or charge does not match what the customer expected."],
  ["Shipping delay", "An order has not arrived when promised."],
  ["Defective unit", "A device arrived broken or stopped working."],
  ["Installation help", "The customer needs help installing or setting up the product."],
  ["Performance slowdown", "The product works but is slow."],
  ["Data sync error", "Data does not synchronize between devices or users."],
  ["Refund request", "The customer asks for money back."],
  ["Warranty claim", "The customer asks for a repair or replacement under warranty."],
  ["Connectivity drop", "The connection drops intermittently."],
];
/** Which issues fit which product category (cases only get fitting issues). */
const CATEGORY_ISSUES: Record<string, number[]> = {
  Hardware: [3, 4, 5, 8, 9, 2, 7, 1],
  Software: [1, 2, 6, 7, 5, 8],
  Service: [2, 3, 5, 8],
};

export interface Policy { title: string; rule: string; violation: (rng: Rng) => string; compliant: (rng: Rng) => string }

export const POLICIES: Policy[] = [
  {
    title: "Refund window policy",
    rule: "Agents may approve a refund only within 30 days of purchase. After 30 days, offer a repair or store credit instead.",
    violation: (rng) => `Your purchase was ${rng.range(45, 120)} days ago, but I will approve a full refund for you anyway.`,
    compliant: (rng) => `Your purchase was ${rng.range(3, 28)} days ago, so it is within the refund window; I have approved the refund.`,
  },
  {
    title: "Discount limit policy",
    rule: "Agents may offer goodwill discounts of at most 15%. Larger discounts need a manager's approval, which agents must not promise.",
    violation: (rng) => `To make up for this, I can give you a ${rng.pick([20, 25, 30, 40])}% discount on your next order.`,
    compliant: (rng) => `To make up for this, I can give you a ${rng.pick([5, 10, 15])}% discount on your next order.`,
  },
  {
    title: "Customer privacy policy",
    rule: "Agents must never disclose another customer's name, email address or phone number.",
    violation: (rng) => `Another customer had the same problem; you can ask them directly at ${rng.pick(["jordan.baker", "li.wang", "sam.porter"])}@${rng.pick(["mailbox", "inbox", "post"])}.example.`,
    compliant: () => "Other customers have reported this too, and our engineers are working on a fix.",
  },
  {
    title: "Identity verification policy",
    rule: "Agents must verify the caller's identity (a code sent to the email on file) before changing account details.",
    violation: () => "No need to verify anything, I have already changed the email address on your account as you asked.",
    compliant: () => "I have sent a verification code to the email on file; once you read it back to me I will change the address.",
  },
];

const pad = (n: number) => String(n).padStart(2, "0");
const DAY_MS = 86_400_000;
const YEAR_START = Date.UTC(2024, 0, 1);

/** `YYYY-MM-DD HH:MM:SS` (UTC) for a time in ms. */
export function stamp(ms: number): string {
  const d = new Date(ms);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
}

export function generateCrmData(seed: number): CrmData {
  const rng = new Rng(seed * 7919 + 17);
  const agents: Agent[] = AGENT_NAMES.map((name, i) => ({
    id: i + 1,
    name,
    email: `${name.toLowerCase().replace(/ /g, ".")}@support.example`,
    team: TEAMS[i % TEAMS.length]!,
    hired_on: stamp(Date.UTC(2018 + rng.int(6), rng.int(12), 1 + rng.int(28))).slice(0, 10),
  }));
  // Each agent is strong at a few issues; cases of those issues go to them more often, and they close them faster.
  const strengths = agents.map(() => new Set(rng.shuffle([...Array(ISSUES.length).keys()].map((i) => i + 1)).slice(0, 3)));
  const speed = agents.map(() => 0.6 + rng.next() * 0.9);

  const names = rng.shuffle(CO_A.flatMap((a) => CO_B.map((b) => `${a} ${b}`))).slice(0, 30).sort();
  const accounts: Account[] = names.map((name, i) => ({
    id: i + 1,
    name,
    industry: INDUSTRIES[name.split(" ")[1]!]!,
    region: rng.pick(REGIONS),
    created_at: stamp(Date.UTC(2019 + rng.int(5), rng.int(12), 1 + rng.int(28), 9)).slice(0, 10),
  }));

  const contacts: Contact[] = [];
  // A few full names are shared by contacts of different accounts (for disambiguation tasks).
  const shared = [0, 1, 2, 3].map(() => [rng.pick(FIRST), rng.pick(LAST)] as const);
  for (const account of accounts) {
    const n = 2 + rng.int(3);
    for (let k = 0; k < n; k++) {
      const [first, last] = rng.next() < 0.22 ? rng.pick(shared) : [rng.pick(FIRST), rng.pick(LAST)];
      const id = contacts.length + 1;
      const domain = account.name.toLowerCase().replace(/ /g, "");
      contacts.push({
        id,
        account_id: account.id,
        first_name: first,
        last_name: last,
        email: `${first.toLowerCase()}.${last.toLowerCase()}${id}@${domain}.example`,
        phone: `+1-555-${String(1000 + rng.int(9000))}`,
        title: rng.pick(["IT Manager", "Office Manager", "CTO", "Buyer", "Operations Lead", "Analyst"]),
      });
    }
  }
  const contactsOf = (accountId: number) => contacts.filter((c) => c.account_id === accountId);

  const products: Product[] = PRODUCTS.map(([name, category, price], i) => ({ id: i + 1, name, category, price }));
  const issues: Issue[] = ISSUES.map(([name, description], i) => ({ id: i + 1, name, description }));

  const orders: Order[] = [];
  for (let i = 0; i < 420; i++) {
    const account = rng.pick(accounts);
    const product = rng.pick(products);
    const t = YEAR_START + rng.int(365) * DAY_MS + (8 + rng.int(10)) * 3_600_000 + rng.int(60) * 60_000;
    const discount = rng.next() < 0.3 ? rng.pick([0.9, 0.85, 0.95]) : 1;
    orders.push({
      id: i + 1,
      account_id: account.id,
      contact_id: rng.pick(contactsOf(account.id)).id,
      product_id: product.id,
      quantity: 1 + rng.int(12),
      unit_price: Math.round(product.price * discount * 100) / 100,
      ordered_at: stamp(t),
      status: rng.next() < 0.07 ? "Cancelled" : "Delivered",
    });
  }
  orders.sort((a, b) => (a.ordered_at < b.ordered_at ? -1 : a.ordered_at > b.ordered_at ? 1 : a.id - b.id));
  orders.forEach((o, i) => (o.id = i + 1));

  const cases: Case[] = [];
  const caseHistory: CaseEvent[] = [];
  const caseMessages: CaseMessage[] = [];
  const violations = new Map<number, string>();
  // Accounts differ in how often they open cases, so monthly counts have clear peaks.
  const weights = accounts.map(() => 1 + rng.int(6));
  const totalWeight = weights.reduce((a, b) => a + b, 0);
  const pickAccount = () => {
    let r = rng.int(totalWeight);
    for (let i = 0; i < accounts.length; i++) if ((r -= weights[i]!) < 0) return accounts[i]!;
    return accounts[accounts.length - 1]!;
  };
  const caseTimes = [...Array(480)].map(() => YEAR_START + rng.int(360) * DAY_MS + (7 + rng.int(11)) * 3_600_000 + rng.int(60) * 60_000).sort((a, b) => a - b);
  for (const created of caseTimes) {
    const id = cases.length + 1;
    const account = pickAccount();
    const contact = rng.pick(contactsOf(account.id));
    const product = rng.pick(products);
    const issueId = rng.pick(CATEGORY_ISSUES[product.category]!);
    const skilled = agents.filter((_, i) => strengths[i]!.has(issueId));
    const agent = rng.next() < 0.75 && skilled.length ? rng.pick(skilled) : rng.pick(agents);
    const closed = created < YEAR_START + 340 * DAY_MS ? rng.next() < 0.9 : rng.next() < 0.4;
    const base = strengths[agent.id - 1]!.has(issueId) ? 90 : 200;
    const handle = closed ? Math.round(base * speed[agent.id - 1]! * (0.5 + rng.next()) + rng.int(30)) : null;
    const issue = issues[issueId - 1]!;
    const c: Case = {
      id,
      account_id: account.id,
      contact_id: contact.id,
      product_id: product.id,
      issue_id: issueId,
      agent_id: agent.id,
      subject: `${issue.name}: ${product.name}`,
      status: closed ? "Closed" : rng.pick(["New", "Open", "Open", "Escalated"]),
      priority: rng.pick(["Low", "Medium", "Medium", "High"]),
      created_at: stamp(created),
      closed_at: closed ? stamp(created + handle! * 60_000) : null,
      handle_minutes: handle,
    };
    cases.push(c);

    // History: created, assigned (maybe first to other agents: transfers), status changes, closed.
    const event = (minutes: number, ev: string, oldV: string | null, newV: string | null) =>
      caseHistory.push({ id: caseHistory.length + 1, case_id: id, at: stamp(created + minutes * 60_000), event: ev, old_value: oldV, new_value: newV });
    event(0, "Created", null, "New");
    const transfers = rng.next() < 0.3 ? 1 + rng.int(2) : 0;
    const chain = [...[...Array(transfers)].map(() => rng.pick(agents.filter((a) => a.id !== agent.id))), agent];
    event(1, "Assigned", null, chain[0]!.name);
    for (let k = 1; k < chain.length; k++) event(1 + k, "Transferred", chain[k - 1]!.name, chain[k]!.name);
    if (c.status !== "New") event(3 + chain.length, "Status changed", "New", c.status === "Closed" ? "Open" : c.status);
    if (closed) event(handle!, "Status changed", "Open", "Closed");

    // Transcript: the customer's report, the agent's answers; sometimes a policy line (compliant or not).
    const say = (minutes: number, sender: string, text: string) =>
      caseMessages.push({ id: caseMessages.length + 1, case_id: id, seq: caseMessages.filter((m) => m.case_id === id).length + 1, at: stamp(created + minutes * 60_000), sender, text });
    say(0, "customer", `Hello, this is ${contact.first_name} ${contact.last_name} from ${account.name}. I'm writing about a ${issue.name.toLowerCase()} with our ${product.name}.`);
    say(5, "agent", `Hi ${contact.first_name}, I'm ${agent.name.split(" ")[0]} from support. Sorry about the trouble with the ${product.name}; let me look into it.`);
    const r = rng.next();
    if (r < 0.12) {
      const policy = rng.pick(POLICIES);
      say(12, "agent", policy.violation(rng));
      violations.set(id, policy.title);
    } else if (r < 0.3) {
      say(12, "agent", rng.pick(POLICIES).compliant(rng));
    }
    say(15, "customer", rng.pick(["Thank you.", "Okay, thanks for the quick help.", "Great, please keep me posted."]));
    if (closed) say(Math.max(16, handle!), "agent", "I'm closing this case now. Have a good day!");
  }

  const articles: Article[] = [];
  for (const p of POLICIES) articles.push({ id: articles.length + 1, title: p.title, kind: "policy", product_id: null, issue_id: null, body: p.rule });
  for (const [i, [name, category, , warranty]] of PRODUCTS.entries()) {
    articles.push({
      id: articles.length + 1,
      title: `${name}: product facts`,
      kind: "product",
      product_id: i + 1,
      issue_id: null,
      body: `${name} is a ${category.toLowerCase()} product. Its warranty period is ${warranty} months from delivery. Support is available by phone and chat.`,
    });
  }
  for (const issue of issues) {
    articles.push({
      id: articles.length + 1,
      title: `Troubleshooting: ${issue.name}`,
      kind: "troubleshooting",
      product_id: null,
      issue_id: issue.id,
      body: `${issue.description} Ask for the order number and the product, reproduce the problem, and follow the product's runbook.`,
    });
  }

  return { seed, agents, accounts, contacts, products, orders, issues, cases, caseHistory, caseMessages, articles, violations };
}

/** The warranty months the product facts article states (for knowledge questions). */
export function warrantyMonths(productId: number): number {
  return PRODUCTS[productId - 1]![3];
}
