/**
 * The restapi HTTP server: node:http on 127.0.0.1 (port 0 = an ephemeral port), answering the
 * endpoints of api.ts from one world and serving their OpenAPI 3.1 document at `/openapi.json`.
 *
 * Fault injection: the server counts the API requests of the current episode and, per request, may
 * answer with a fault instead of the data — `5xx` (HTTP 503 with a JSON error), `slow` (the answer is
 * held back for `slowMs`, longer than the client's timeout) or `malformed` (HTTP 200, JSON content
 * type, a truncated body). Which requests fail is decided by `setFaults`: a plan of request numbers
 * and/or a rate drawn from a seeded generator, so an episode's faults repeat with its seed. The
 * document itself is never faulted. This file knows nothing of tools, tasks or rewards.
 */
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Rng } from "../../core/index.js";
import { handleRequest, HttpError, restApiDocument } from "./api.js";
import type { RestWorld } from "./world.js";

export const FAULT_KINDS = ["5xx", "slow", "malformed"] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface FaultSchedule {
  /** Fail these API requests of the episode (1 = the first request). */
  plan?: { request: number; kind: FaultKind }[];
  /** Probability that any other request fails (0 by default), with a kind drawn from `kinds`. */
  rate?: number;
  kinds?: FaultKind[];
  /** Draws for `rate`: seed it per episode so faults repeat. */
  rng?: Rng;
}

export interface RestApiServer {
  url: string;
  document: Record<string, unknown>;
  /** API requests answered (or faulted) since the last `setFaults`. */
  readonly requests: number;
  /** The faults injected since the last `setFaults`: request number and kind. */
  readonly injected: { request: number; kind: FaultKind; path: string }[];
  /** Starts a new episode's fault schedule (and request count). */
  setFaults(schedule: FaultSchedule): void;
  close(): Promise<void>;
}

export interface RestApiServerOptions {
  port?: number;
  /** How long a `slow` fault holds the answer back, in ms (default 5,000). */
  slowMs?: number;
}

export async function startRestApiServer(world: RestWorld, options: RestApiServerOptions = {}): Promise<RestApiServer> {
  const slowMs = options.slowMs ?? 5_000;
  let schedule: FaultSchedule = {};
  let requests = 0;
  let injected: { request: number; kind: FaultKind; path: string }[] = [];
  const held = new Set<NodeJS.Timeout>();
  let document: Record<string, unknown> = {};

  const send = (res: ServerResponse, status: number, body: unknown) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text) });
    res.end(text);
  };

  const pickFault = (n: number): FaultKind | undefined => {
    const planned = schedule.plan?.find((f) => f.request === n);
    if (planned) return planned.kind;
    if (schedule.rate && schedule.rng) {
      const draw = schedule.rng.next();
      const kinds = schedule.kinds?.length ? schedule.kinds : [...FAULT_KINDS];
      const kind = kinds[schedule.rng.int(kinds.length)]!;
      if (draw < schedule.rate) return kind;
    }
    return undefined;
  };

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    if (req.method !== "GET") return send(res, 405, { error: `${req.method} is not allowed: every endpoint is a GET` });
    if (url.pathname === "/openapi.json") return send(res, 200, document);
    const n = ++requests;
    const fault = pickFault(n);
    if (fault) injected.push({ request: n, kind: fault, path: url.pathname });
    let body: unknown;
    let status = 200;
    try {
      body = handleRequest(world, url.pathname, url.searchParams);
    } catch (err) {
      status = err instanceof HttpError ? err.status : 500;
      body = { error: err instanceof HttpError ? err.message : `internal error: ${(err as Error).message}` };
    }
    if (fault === "5xx") return send(res, 503, { error: "the service is temporarily unavailable; try again in a moment" });
    if (fault === "malformed") {
      const text = JSON.stringify(body);
      const cut = text.slice(0, Math.max(1, Math.floor(text.length / 2)));
      res.writeHead(200, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(cut) });
      return res.end(cut);
    }
    if (fault === "slow") {
      const timer = setTimeout(() => {
        held.delete(timer);
        if (!res.destroyed) send(res, status, body);
      }, slowMs);
      held.add(timer);
      res.on("close", () => {
        clearTimeout(timer);
        held.delete(timer);
      });
      return;
    }
    send(res, status, body);
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  document = restApiDocument(url);
  return {
    url,
    document,
    get requests() {
      return requests;
    },
    get injected() {
      return injected;
    },
    setFaults(next) {
      schedule = next;
      requests = 0;
      injected = [];
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const t of held) clearTimeout(t);
        held.clear();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
