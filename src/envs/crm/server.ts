/**
 * The CRM REST API: a real HTTP server (node:http on 127.0.0.1, an ephemeral port by default) over a
 * `CrmStore`, and its OpenAPI 3.1 document (also served at `/openapi.json`). Every endpoint is a GET
 * that reads; the API cannot change the database.
 *
 * This file serves HTTP and describes it; the env turns the document into tools with the OpenAPI tool
 * source. It knows nothing of tasks or rewards.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { CrmStore, Row } from "./store.js";

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

type Query = URLSearchParams;
type Handler = (store: CrmStore, params: string[], query: Query) => Promise<unknown>;

function intParam(query: Query, name: string): number | undefined {
  const v = query.get(name);
  if (v === null || v === "") return undefined;
  if (!/^\d+$/.test(v)) throw new HttpError(400, `query parameter "${name}" must be a positive integer, got "${v}"`);
  return Number(v);
}
function dateParam(query: Query, name: string): string | undefined {
  const v = query.get(name);
  if (v === null || v === "") return undefined;
  if (!/^\d{4}-\d{2}-\d{2}$/.test(v)) throw new HttpError(400, `query parameter "${name}" must be a date YYYY-MM-DD, got "${v}"`);
  return v;
}
function textParam(query: Query, name: string): string | undefined {
  const v = query.get(name);
  return v === null || v.trim() === "" ? undefined : v.trim();
}

/** WHERE clauses built from optional filters. */
class Filters {
  readonly clauses: string[] = [];
  readonly params: unknown[] = [];
  add(clause: string, value: unknown): void {
    if (value === undefined) return;
    this.clauses.push(clause);
    this.params.push(value);
  }
  get where(): string {
    return this.clauses.length ? ` WHERE ${this.clauses.join(" AND ")}` : "";
  }
}

async function one(store: CrmStore, sql: string, params: unknown[], what: string): Promise<Row> {
  const rows = await store.all(sql, params);
  if (rows.length === 0) throw new HttpError(404, `${what} not found`);
  return rows[0]!;
}

const ROUTES: [RegExp, Handler][] = [
  [
    /^\/accounts$/,
    async (s, _p, q) => {
      const f = new Filters();
      f.add("lower(name) LIKE ?", textParam(q, "name") && `%${textParam(q, "name")!.toLowerCase()}%`);
      f.add("lower(industry) = ?", textParam(q, "industry")?.toLowerCase());
      f.add("lower(region) = ?", textParam(q, "region")?.toLowerCase());
      return { accounts: await s.all(`SELECT * FROM accounts${f.where} ORDER BY id`, f.params) };
    },
  ],
  [
    /^\/accounts\/(\d+)$/,
    async (s, [id]) => {
      const account = await one(s, "SELECT * FROM accounts WHERE id = ?", [Number(id)], `account ${id}`);
      const contacts = await s.all("SELECT * FROM contacts WHERE account_id = ? ORDER BY id", [Number(id)]);
      return { ...account, contacts };
    },
  ],
  [
    /^\/contacts$/,
    async (s, _p, q) => {
      const f = new Filters();
      const name = textParam(q, "name")?.toLowerCase();
      f.add("lower(c.first_name || ' ' || c.last_name) LIKE ?", name && `%${name}%`);
      f.add("c.account_id = ?", intParam(q, "account_id"));
      f.add("lower(c.email) = ?", textParam(q, "email")?.toLowerCase());
      const sql = `SELECT c.*, a.name AS account_name FROM contacts c JOIN accounts a ON a.id = c.account_id${f.where} ORDER BY c.id`;
      return { contacts: await s.all(sql, f.params) };
    },
  ],
  [
    /^\/products$/,
    async (s, _p, q) => {
      const f = new Filters();
      f.add("lower(name) LIKE ?", textParam(q, "name") && `%${textParam(q, "name")!.toLowerCase()}%`);
      f.add("lower(category) = ?", textParam(q, "category")?.toLowerCase());
      return { products: await s.all(`SELECT * FROM products${f.where} ORDER BY id`, f.params) };
    },
  ],
  [
    /^\/orders$/,
    async (s, _p, q) => {
      const f = new Filters();
      f.add("account_id = ?", intParam(q, "account_id"));
      f.add("product_id = ?", intParam(q, "product_id"));
      f.add("lower(status) = ?", textParam(q, "status")?.toLowerCase());
      f.add("substr(ordered_at, 1, 10) >= ?", dateParam(q, "from"));
      f.add("substr(ordered_at, 1, 10) <= ?", dateParam(q, "to"));
      const limit = Math.min(intParam(q, "limit") ?? 100, 500);
      const total = await s.all(`SELECT COUNT(*) AS n FROM orders${f.where}`, f.params);
      return { total: Number(total[0]!.n), orders: await s.all(`SELECT * FROM orders${f.where} ORDER BY id LIMIT ${limit}`, f.params) };
    },
  ],
  [
    /^\/cases$/,
    async (s, _p, q) => {
      const f = new Filters();
      for (const key of ["account_id", "contact_id", "product_id", "issue_id", "agent_id"]) f.add(`${key} = ?`, intParam(q, key));
      f.add("lower(status) = ?", textParam(q, "status")?.toLowerCase());
      f.add("substr(created_at, 1, 10) >= ?", dateParam(q, "created_from"));
      f.add("substr(created_at, 1, 10) <= ?", dateParam(q, "created_to"));
      f.add("substr(closed_at, 1, 10) >= ?", dateParam(q, "closed_from"));
      f.add("substr(closed_at, 1, 10) <= ?", dateParam(q, "closed_to"));
      const limit = Math.min(intParam(q, "limit") ?? 50, 500);
      const offset = intParam(q, "offset") ?? 0;
      const total = await s.all(`SELECT COUNT(*) AS n FROM cases${f.where}`, f.params);
      const cases = await s.all(`SELECT * FROM cases${f.where} ORDER BY id LIMIT ${limit} OFFSET ${offset}`, f.params);
      return { total: Number(total[0]!.n), offset, cases };
    },
  ],
  [
    /^\/cases\/(\d+)$/,
    async (s, [id]) => {
      const c = await one(s, "SELECT * FROM cases WHERE id = ?", [Number(id)], `case ${id}`);
      const history = await s.all("SELECT at, event, old_value, new_value FROM case_history WHERE case_id = ? ORDER BY id", [Number(id)]);
      return { ...c, history };
    },
  ],
  [
    /^\/cases\/(\d+)\/transcript$/,
    async (s, [id]) => {
      await one(s, "SELECT id FROM cases WHERE id = ?", [Number(id)], `case ${id}`);
      return { case_id: Number(id), messages: await s.all("SELECT seq, at, sender, text FROM case_messages WHERE case_id = ? ORDER BY seq", [Number(id)]) };
    },
  ],
  [/^\/agents$/, async (s) => ({ agents: await s.all("SELECT * FROM agents ORDER BY id") })],
  [
    /^\/agents\/(\d+)$/,
    async (s, [id]) => {
      const agent = await one(s, "SELECT * FROM agents WHERE id = ?", [Number(id)], `agent ${id}`);
      const open = await s.all("SELECT COUNT(*) AS n FROM cases WHERE agent_id = ? AND status <> 'Closed'", [Number(id)]);
      return { ...agent, open_cases: Number(open[0]!.n) };
    },
  ],
  [/^\/issues$/, async (s) => ({ issues: await s.all("SELECT * FROM issues ORDER BY id") })],
  [
    /^\/knowledge$/,
    async (s, _p, q) => {
      const f = new Filters();
      const text = textParam(q, "query")?.toLowerCase();
      if (text) {
        f.clauses.push("(lower(title) LIKE ? OR lower(body) LIKE ?)");
        f.params.push(`%${text}%`, `%${text}%`);
      }
      f.add("lower(kind) = ?", textParam(q, "kind")?.toLowerCase());
      f.add("product_id = ?", intParam(q, "product_id"));
      return { articles: await s.all(`SELECT * FROM knowledge_articles${f.where} ORDER BY id`, f.params) };
    },
  ],
  [/^\/knowledge\/(\d+)$/, async (s, [id]) => one(s, "SELECT * FROM knowledge_articles WHERE id = ?", [Number(id)], `article ${id}`)],
];

const str = (description: string) => ({ type: "string", description });
const int = (description: string) => ({ type: "integer", minimum: 0, description });
const date = (description: string) => ({ type: "string", pattern: "^\\d{4}-\\d{2}-\\d{2}$", description });
function param(name: string, where: "query" | "path", schema: Record<string, unknown>) {
  return { name, in: where, required: where === "path", description: schema.description, schema: { ...schema, description: undefined } };
}
function op(operationId: string, summary: string, parameters: ReturnType<typeof param>[] = []) {
  return {
    get: {
      operationId,
      summary,
      description: summary,
      parameters,
      responses: {
        "200": { description: "OK", content: { "application/json": { schema: { type: "object" } } } },
        "400": { description: "A parameter is malformed", content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } },
        "404": { description: "Not found", content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } },
      },
    },
  };
}

/** The OpenAPI 3.1 document of the API served at `baseUrl`. */
export function crmOpenApiDocument(baseUrl: string): Record<string, unknown> {
  const caseFilters = [
    param("account_id", "query", int("Only cases of this account.")),
    param("contact_id", "query", int("Only cases of this contact.")),
    param("product_id", "query", int("Only cases about this product.")),
    param("issue_id", "query", int("Only cases of this issue (see listIssues).")),
    param("agent_id", "query", int("Only cases owned by this agent.")),
    param("status", "query", { type: "string", enum: ["New", "Open", "Escalated", "Closed"], description: "Only cases in this status." }),
    param("created_from", "query", date("Created on or after this date (YYYY-MM-DD).")),
    param("created_to", "query", date("Created on or before this date (YYYY-MM-DD).")),
    param("closed_from", "query", date("Closed on or after this date.")),
    param("closed_to", "query", date("Closed on or before this date.")),
    param("limit", "query", int("At most this many cases (50 by default, 500 at most).")),
    param("offset", "query", int("Skip this many cases (for paging).")),
  ];
  return {
    openapi: "3.1.0",
    info: { title: "sinkflex CRM API", version: "1.0.0", description: "Read access to a CRM: accounts, contacts, products, orders, support cases, agents and the knowledge base." },
    servers: [{ url: baseUrl }],
    paths: {
      "/accounts": op("listAccounts", "List customer accounts, optionally filtered by name (substring), industry or region.", [
        param("name", "query", str("Part of the account name, case-insensitive.")),
        param("industry", "query", str("Exact industry.")),
        param("region", "query", str("Exact region, e.g. Europe.")),
      ]),
      "/accounts/{account_id}": op("getAccount", "One account with its contacts.", [param("account_id", "path", int("The account id."))]),
      "/contacts": op("searchContacts", "Search contacts by name (substring of 'first last'), account or exact email. Each contact has its account's name.", [
        param("name", "query", str("Part of the full name, case-insensitive.")),
        param("account_id", "query", int("Only contacts of this account.")),
        param("email", "query", str("Exact email address.")),
      ]),
      "/products": op("listProducts", "List products, optionally by name (substring) or category (Hardware, Software, Service).", [
        param("name", "query", str("Part of the product name.")),
        param("category", "query", str("Exact category.")),
      ]),
      "/orders": op("listOrders", "List orders (quantity, unit_price, ordered_at, status), with a total count.", [
        param("account_id", "query", int("Only orders of this account.")),
        param("product_id", "query", int("Only orders of this product.")),
        param("status", "query", { type: "string", enum: ["Delivered", "Cancelled"], description: "Only orders in this status." }),
        param("from", "query", date("Ordered on or after this date.")),
        param("to", "query", date("Ordered on or before this date.")),
        param("limit", "query", int("At most this many orders (100 by default, 500 at most).")),
      ]),
      "/cases": op("listCases", "List support cases with filters, with the total count of matching cases. handle_minutes is the time from creation to closing.", caseFilters),
      "/cases/{case_id}": op("getCase", "One case with its history (created, assigned, transferred between agents, status changes).", [param("case_id", "path", int("The case id."))]),
      "/cases/{case_id}/transcript": op("getCaseTranscript", "The messages exchanged between the customer and the agent in a case.", [param("case_id", "path", int("The case id."))]),
      "/agents": op("listAgents", "List the support agents."),
      "/agents/{agent_id}": op("getAgent", "One agent, with the number of cases they have open.", [param("agent_id", "path", int("The agent id."))]),
      "/issues": op("listIssues", "List the issue categories cases are filed under."),
      "/knowledge": op("searchKnowledge", "Search knowledge articles (policies, product facts, troubleshooting) by text, kind or product.", [
        param("query", "query", str("Text to find in the title or body, case-insensitive.")),
        param("kind", "query", { type: "string", enum: ["policy", "product", "troubleshooting"], description: "Only articles of this kind." }),
        param("product_id", "query", int("Only articles about this product.")),
      ]),
      "/knowledge/{article_id}": op("getArticle", "One knowledge article.", [param("article_id", "path", int("The article id."))]),
    },
    components: { schemas: { Error: { type: "object", properties: { error: { type: "string" } }, required: ["error"] } } },
  };
}

export interface CrmServer {
  url: string;
  document: Record<string, unknown>;
  close(): Promise<void>;
}

/** Starts the API on 127.0.0.1 (port 0: an ephemeral one). */
export async function startCrmServer(store: CrmStore, port = 0): Promise<CrmServer> {
  let document: Record<string, unknown> = {};
  const send = (res: ServerResponse, status: number, body: unknown) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text) });
    res.end(text);
  };
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    try {
      const url = new URL(req.url ?? "/", "http://localhost");
      if (req.method !== "GET") throw new HttpError(405, `${req.method} is not allowed: this API only reads (GET)`);
      if (url.pathname === "/openapi.json") return send(res, 200, document);
      for (const [pattern, handler] of ROUTES) {
        const m = pattern.exec(url.pathname);
        if (m) return send(res, 200, await handler(store, m.slice(1), url.searchParams));
      }
      throw new HttpError(404, `no endpoint ${url.pathname}; see /openapi.json`);
    } catch (err) {
      if (err instanceof HttpError) return send(res, err.status, { error: err.message });
      return send(res, 500, { error: `internal error: ${(err as Error).message}` });
    }
  };
  const server: Server = createServer((req, res) => void handle(req, res));
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
  const { port: actual } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${actual}`;
  document = crmOpenApiDocument(url);
  return {
    url,
    document,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
