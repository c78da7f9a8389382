/**
 * Hostile input against `serveEnv` and `sinkflex envs serve`, on loopback: malformed WebSocket
 * upgrades, session options that try to reach secrets, the network or files, unbounded sizes,
 * out-of-bounds option values, odd request targets, missing API keys. Each kind is sent a counted,
 * bounded number of times (the tally is checked at the end); after each the server must still answer
 * /health, answer the right status, leak no secret or file content, and open no outbound connection
 * (a real listening socket is the trap). This file tests the server's defences only; the protocol's
 * normal use is in protocol.test.ts.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { RemoteEnv } from "../../../src/gym/remote/client.js";
import { isLoopbackHost, serveEnv, type EnvServer } from "../../../src/gym/remote/server.js";
import { wrapStandard } from "../../../src/gym/registry.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { runCli } from "../../run-cli.js";
import { WalkEnv } from "../helpers.js";

registerBundledEnvs();

const BIN = "bin/sinkflex.mjs";
const SECRET = "sk-hostile-test-4f1c9e";
const FILE_MARKER = "root:x:0:0:HOSTILE-FILE-MARKER";

/** Requests sent, by kind: checked against the expected counts in afterAll. */
const sent: Record<string, number> = {};
const count = (kind: string, n = 1) => {
  sent[kind] = (sent[kind] ?? 0) + n;
};

const servers: EnvServer[] = [];
const serve = async (...args: Parameters<typeof serveEnv>) => {
  const s = await serveEnv(...args);
  servers.push(s);
  return s;
};
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

/** A real listening socket that records every connection made to it: any outbound attempt lands here. */
let trap: Server;
let trapPort = 0;
const trapped: string[] = [];
let dir = "";
let secretFile = "";
beforeAll(async () => {
  trap = createServer((socket: Socket) => {
    trapped.push("connection");
    socket.on("data", (d) => trapped.push(d.toString("utf8")));
    socket.on("error", () => undefined);
  });
  await new Promise<void>((r) => trap.listen(0, "127.0.0.1", () => r()));
  trapPort = (trap.address() as { port: number }).port;
  dir = mkdtempSync(join(tmpdir(), "sinkflex-hostile-"));
  secretFile = join(dir, "shadow");
  writeFileSync(secretFile, `${FILE_MARKER}:/root:/bin/bash\n`);
  process.env.SINKFLEX_USER_LLM_API_KEY = SECRET;
});
afterAll(async () => {
  delete process.env.SINKFLEX_USER_LLM_API_KEY;
  await new Promise<void>((r) => trap.close(() => r()));
  rmSync(dir, { recursive: true, force: true });
  expect(sent).toEqual(EXPECTED_COUNTS);
});

/** The counts this file sends; docs/reliability.md quotes them. */
const EXPECTED_COUNTS = {
  "malformed WebSocket upgrade": 64,
  "aborted WebSocket upgrade": 16,
  "option reaching secrets/network/files (HTTP)": 14,
  "option reaching secrets/network/files (WebSocket)": 7,
  "oversized generation option": 15,
  "out-of-type or out-of-bounds option": 16,
  "odd request target": 8,
  "missing or wrong API key": 12,
  "non-loopback start without a key": 4,
};

const walkFactory = (options: Record<string, unknown>) => wrapStandard(new WalkEnv((options.size as number | undefined) ?? 7), { maxEpisodeSteps: 8 });

async function call(server: EnvServer, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}${path}`, { method, headers: { "content-type": "application/json", ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, body: JSON.parse(text) as any };
}

async function healthy(server: EnvServer): Promise<number> {
  const res = await call(server, "GET", "/health");
  expect(res.status).toBe(200);
  return res.body.sessions as number;
}

/** Sends raw bytes on a fresh connection and returns everything the server answers until it closes. */
function raw(port: number, request: string, timeoutMs = 10_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    let answer = "";
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no end of answer within ${timeoutMs} ms; got ${JSON.stringify(answer.slice(0, 200))}`));
    }, timeoutMs);
    socket.on("data", (d) => (answer += d.toString("utf8")));
    socket.on("error", () => undefined);
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(answer);
    });
    socket.write(request);
  });
}

/** Opens a WebSocket session with `options` and returns its first frame, or the refusal's status. */
function wsOpen(url: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.on("unexpected-response", (_req, res) => {
      let text = "";
      res.on("data", (c: Buffer) => (text += c.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
    });
    ws.on("message", (m) => {
      resolve({ status: 101, text: m.toString() });
      ws.close();
    });
    ws.on("error", (err) => {
      if (!String(err.message).includes("Unexpected server response")) reject(err);
    });
  });
}

const noLeak = (text: string) => {
  expect(text).not.toContain(SECRET);
  expect(text).not.toContain("HOSTILE-FILE-MARKER");
  expect(text).not.toContain("root:x");
};

describe("hostile WebSocket upgrades", () => {
  it("a refused upgrade (no or bad Sec-WebSocket-Key, bad version) takes no session slot", async () => {
    const server = await serve(walkFactory, { maxSessions: 4 });
    const head = (extra: string) => `GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n${extra}\r\n`;
    const variants = [
      head("Sec-WebSocket-Version: 13\r\n"), // no key
      head("Sec-WebSocket-Key: short\r\nSec-WebSocket-Version: 13\r\n"),
      head("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 99\r\n"),
      head("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"), // no version
    ];
    for (let i = 0; i < 64; i++) {
      count("malformed WebSocket upgrade");
      const answer = await raw(server.port, variants[i % variants.length]!);
      expect(answer).toMatch(/^HTTP\/1\.1 400 /);
      expect(answer).toMatch(/Sec-WebSocket-(Key|Version)/);
    }
    expect(await healthy(server)).toBe(0);
    expect(server.sessionCount()).toBe(0);
    expect((await call(server, "POST", "/sessions", {})).status).toBe(201);
    expect((await wsOpen(server.wsUrl)).status).toBe(101);
  });

  it("an upgrade that ws itself refuses, or that the client drops mid-handshake, releases its slot", async () => {
    const server = await serve(walkFactory, { maxSessions: 2 });
    const good = "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    for (let i = 0; i < 8; i++) {
      count("aborted WebSocket upgrade");
      // A malformed subprotocol header: passes the server's own checks, refused by ws.
      const answer = await raw(server.port, `${good}Sec-WebSocket-Protocol: ,,\r\n\r\n`);
      expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    }
    for (let i = 0; i < 8; i++) {
      count("aborted WebSocket upgrade");
      // Sends the whole upgrade, then hangs up at once.
      await new Promise<void>((resolve) => {
        const socket = connect(server.port, "127.0.0.1", () => {
          socket.end(`${good}\r\n`);
          socket.destroy();
          resolve();
        });
        socket.on("error", () => undefined);
      });
    }
    await new Promise((r) => setTimeout(r, 300));
    expect(await healthy(server)).toBe(0);
    expect((await call(server, "POST", "/sessions", {})).status).toBe(201);
    expect((await call(server, "POST", "/sessions", {})).status).toBe(201);
  });
});

describe("session options cannot reach secrets, the network or files", () => {
  it("refuses an LLM user endpoint, a PostgreSQL URL and file paths with 400, over HTTP and WebSocket, without connecting out", async () => {
    const tau = await serve("sinkflex/tau-retail-v0");
    const sql = await serve("sinkflex/spider-sql-v0");
    const trapUrl = `http://127.0.0.1:${trapPort}/v1`;
    const cases: [EnvServer, Record<string, unknown>, string][] = [
      [tau, { user: "llm", userLlm: { baseUrl: trapUrl, model: "m" } }, "user"],
      [tau, { userLlm: { baseUrl: trapUrl, model: "m" } }, "userLlm"],
      [tau, { tasksFile: secretFile }, "tasksFile"],
      [tau, { dbDir: dir }, "dbDir"],
      [sql, { pgUrl: `postgres://u:p@127.0.0.1:${trapPort}/db` }, "pgUrl"],
      [sql, { questionsFile: secretFile }, "questionsFile"],
      [sql, { dbDir: dir }, "dbDir"],
    ];
    for (const [server, options, name] of cases) {
      count("option reaching secrets/network/files (HTTP)");
      const res = await call(server, "POST", "/sessions", { options });
      expect(res.status, JSON.stringify(options)).toBe(400);
      expect(res.body.error.code).toBe("bad_option");
      expect(res.body.error.message).toContain(`"${name}"`);
      expect(res.body.error.message).toMatch(/options a client may set: .*taskSeed \(an integer in 0\.\.2147483647\)/);
      noLeak(res.text);
      count("option reaching secrets/network/files (WebSocket)");
      const ws = await wsOpen(`${server.wsUrl}?options=${encodeURIComponent(JSON.stringify(options))}`);
      expect(ws.status).toBe(400);
      expect(JSON.parse(ws.text).error.message).toContain(`"${name}"`);
      noLeak(ws.text);
    }
    // The same keys as reset options, on a session that was allowed, and a step after.
    for (const [server, options, name] of cases) {
      count("option reaching secrets/network/files (HTTP)");
      const { body: s } = await call(server, "POST", "/sessions", {});
      const res = await call(server, "POST", `/sessions/${s.sessionId}/reset`, { seed: 1, options });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toContain(`reset option "${name}" is not one a client may set`);
      noLeak(res.text);
      await call(server, "POST", `/sessions/${s.sessionId}/reset`, { seed: 1 });
      await call(server, "POST", `/sessions/${s.sessionId}/step`, { action: { content: "hello", toolCalls: [] } });
      await call(server, "DELETE", `/sessions/${s.sessionId}`);
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(trapped).toEqual([]);
    await healthy(tau);
    await healthy(sql);
  });

  it("fixed server options stay closed to clients, and a file that fails to parse is not quoted", async () => {
    const server = await serve(
      (options) => {
        // A factory that reads the operator's file: its parse error must not reach the client with the file's text.
        if (options.questionsFile) JSON.parse(readFileSync(options.questionsFile as string, "utf8"));
        return walkFactory(options);
      },
      { envOptions: { questionsFile: secretFile }, clientOptions: { session: { size: { type: "integer", min: 1, max: 100 } } } },
    );
    const res = await call(server, "POST", "/sessions", { options: { size: 9 } });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toMatch(/is not valid JSON \(its content is withheld\)/);
    noLeak(res.text);
    const fixed = await call(server, "POST", "/sessions", { options: { questionsFile: "/etc/hostname" } });
    expect(fixed.status).toBe(400);
    expect(fixed.body.error.message).toMatch(/session option "questionsFile" is fixed by the server/);
  });
});

describe("sizes have declared bounds", () => {
  it("refuses a generated task set beyond its bound at once, and the server keeps answering", async () => {
    const sql = await serve("sinkflex/spider-sql-v0");
    const started = Date.now();
    // 1e9 itself goes to a separate process below (it froze the server for minutes): here, values that fail fast either way.
    for (const value of [501, 1000, "9", -1, 0, 2.5]) {
      for (const transport of ["http", "ws"] as const) {
        count("oversized generation option");
        const options = { taskSource: "generated", count: value };
        const res =
          transport === "http"
            ? await call(sql, "POST", "/sessions", { options })
            : await wsOpen(`${sql.wsUrl}?options=${encodeURIComponent(JSON.stringify(options))}`).then((r) => ({ status: r.status, text: r.text, body: JSON.parse(r.text) }));
        expect(res.status).toBe(400);
        expect(res.body.error.message).toMatch(/session option "count" must be an integer in 1\.\.500/);
      }
      await healthy(sql);
    }
    // Within bounds but more than the generator can make at that level: the client's request, so a 400 too.
    count("oversized generation option");
    const unsatisfiable = await call(sql, "POST", "/sessions", { options: { taskSource: "generated", count: 500, levels: [1] } });
    expect(unsatisfiable.status).toBe(400);
    expect(unsatisfiable.body.error.message).toMatch(/could only generate \d+ of 500 tasks at levels 1/);
    expect(unsatisfiable.text).not.toMatch(/shared\/data|spider/i);
    await healthy(sql);
    // Measured well under a second for all of them on a busy 2-core machine; 20 s leaves room.
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(sql.sessionCount()).toBe(0);
  });

  it("envs serve stops on SIGTERM after a hostile generation request", async () => {
    const child = spawn(process.execPath, [BIN, "envs", "serve", "sinkflex/spider-sql-v0", "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
    try {
      let stdout = "";
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout.on("data", (d: Buffer) => {
          stdout += d.toString();
          const m = stdout.match(/at (http:\/\/127\.0\.0\.1:\d+)/);
          if (m) resolve(m[1]!);
        });
        child.once("exit", (code) => reject(new Error(`serve exited early with ${code}: ${stdout}`)));
      });
      for (const value of [1e9, 1e308]) {
        count("oversized generation option");
        const refused = await fetch(`${url}/sessions`, { method: "POST", body: JSON.stringify({ options: { taskSource: "generated", count: value } }), signal: AbortSignal.timeout(20_000) });
        expect(refused.status).toBe(400);
        expect((await fetch(`${url}/health`, { signal: AbortSignal.timeout(5_000) })).status).toBe(200);
      }
      const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
      const t = Date.now();
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
      expect(Date.now() - t).toBeLessThan(10_000);
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
  }, 60_000);
});

describe("option types and bounds", () => {
  it("answers 400 naming the option and what is allowed, never 500", async () => {
    const sql = await serve("sinkflex/spider-sql-v0");
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ queryTimeoutMs: "x" }, /"queryTimeoutMs" must be an integer in 100\.\.30000, got "x"/],
      [{ maxRows: -1 }, /"maxRows" must be an integer in 1\.\.1000, got -1/],
      [{ levels: "abc" }, /"levels" must be a list of 1 to 5 items, each one of 1, 2, 3, 4, 5, got "abc"/],
      [{ levels: [1, 9] }, /"levels" must be a list/],
      [{ levels: [] }, /"levels" must be a list/],
      [{ taskSource: "everything" }, /"taskSource" must be one of "spider", "generated"/],
      [{ bogus: 1 }, /session option "bogus" is not one a client may set; the session options a client may set: maxEpisodeSteps/],
      [{ maxEpisodeSteps: 1e7 }, /"maxEpisodeSteps" must be an integer in 1\.\.10000/],
    ];
    for (const [options, message] of cases) {
      count("out-of-type or out-of-bounds option");
      const res = await call(sql, "POST", "/sessions", { options });
      expect(res.status, JSON.stringify(options)).toBe(400);
      expect(res.body.error).toMatchObject({ code: "bad_option", message: expect.stringMatching(message) });
    }
    const { body: s } = await call(sql, "POST", "/sessions", {});
    for (const [options, message] of [
      [{ taskIndex: -1 }, /reset option "taskIndex" must be an integer in 0\.\.10000000/],
      [{ taskIndex: "0" }, /reset option "taskIndex" must be an integer/],
      [{ taskIndex: 1e12 }, /reset option "taskIndex" must be an integer/],
      [{ taskIndex: 5000 }, /options\.taskIndex must be an integer in \[0, \d+\]/],
      [{ count: 3 }, /reset option "count" is not one a client may set; the reset options a client may set: taskIndex/],
      [{ levels: "abc" }, /reset option "levels" is not one a client may set/],
      [{ queryTimeoutMs: "x" }, /reset option "queryTimeoutMs" is not one/],
      [{ pgUrl: "postgres://x" }, /reset option "pgUrl" is not one/],
    ] as [Record<string, unknown>, RegExp][]) {
      count("out-of-type or out-of-bounds option");
      const res = await call(sql, "POST", `/sessions/${s.sessionId}/reset`, { options });
      expect(res.status, JSON.stringify(options)).toBe(400);
      expect(res.body.error.message).toMatch(message);
    }
    // In bounds, it works.
    expect((await call(sql, "POST", "/sessions", { options: { maxRows: 10, queryTimeoutMs: 1000, levels: [1, 2] } })).status).toBe(201);
    await healthy(sql);
  });

  it("odd request targets get 4xx, never 500", async () => {
    const server = await serve(walkFactory);
    const targets = ["//", "//x/y", "///sessions", "/%", "*", "http://127.0.0.1/health", "/..//..", "/sessions//reset"];
    for (const target of targets) {
      count("odd request target");
      const answer = await raw(server.port, `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1]);
      expect(status, `${target}: ${answer.slice(0, 300)}`).toBeGreaterThanOrEqual(400);
      expect(status, `${target}: ${answer.slice(0, 300)}`).toBeLessThan(500);
    }
    await healthy(server);
  });
});

describe("authentication", () => {
  it("with an API key, requests and upgrades without it get 401; RemoteEnv with it works", async () => {
    const server = await serve(walkFactory, { apiKey: "k3y" });
    for (const headers of [{}, { authorization: "Bearer wrong" }, { authorization: "k3y" }, { authorization: "Bearer K3Y" }] as Record<string, string>[]) {
      for (const [method, path] of [["GET", "/health"], ["POST", "/sessions"]] as const) {
        count("missing or wrong API key");
        const res = await call(server, method, path, method === "POST" ? {} : undefined, headers);
        expect(res.status).toBe(401);
        expect(res.body.error).toMatchObject({ code: "unauthorized", message: expect.stringMatching(/Authorization: Bearer <key>/) });
      }
      count("missing or wrong API key");
      expect((await wsOpen(server.wsUrl, headers)).status).toBe(401);
    }
    expect(server.sessionCount()).toBe(0);
    for (const transport of ["http", "ws"] as const) {
      const env = await RemoteEnv.connect(server.url, { transport, apiKey: "k3y" });
      await env.reset({ seed: 1 });
      await env.step(1);
      await env.close();
    }
    expect((await call(server, "GET", "/health", undefined, { authorization: "Bearer k3y" })).status).toBe(200);
  });

  it("refuses to serve beyond loopback without a key unless insecure", async () => {
    expect(["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"].every(isLoopbackHost)).toBe(true);
    expect(["0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "example.com", "::ffff:10.0.0.1"].some(isLoopbackHost)).toBe(false);
    for (const host of ["0.0.0.0", "::"]) {
      count("non-loopback start without a key");
      await expect(serveEnv(walkFactory, { host, port: 0 })).rejects.toThrow(/refusing to serve on .* without an API key; .*--insecure/);
    }
    const saved = process.env.SINKFLEX_API_KEY;
    delete process.env.SINKFLEX_API_KEY;
    try {
      for (const extra of [[], ["--api-key", ""]]) {
        count("non-loopback start without a key");
        const res = await runCli(["envs", "serve", "sinkflex/arith-v0", "--host", "0.0.0.0", "--port", "0", ...extra]);
        expect(res.code, res.output).not.toBe(0);
        expect(res.output).toMatch(/refusing to serve on 0\.0\.0\.0 \(beyond loopback\) without an API key|apiKey must not be empty/);
      }
    } finally {
      if (saved !== undefined) process.env.SINKFLEX_API_KEY = saved;
    }
  }, 60_000);
});
