import { afterEach, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { AgentTurn } from "../../../src/core/index.js";
import { checkEnv, formatCheckReport } from "../../../src/gym/check.js";
import { EnvContractError } from "../../../src/gym/env.js";
import { RemoteEnv, RemoteEnvError } from "../../../src/gym/remote/client.js";
import { serveEnv, type EnvServer } from "../../../src/gym/remote/server.js";
import { wrapStandard } from "../../../src/gym/registry.js";
import { registerBundledEnvs } from "../../../src/envs/index.js";
import { WalkEnv } from "../helpers.js";

registerBundledEnvs();

const servers: EnvServer[] = [];
const serve = async (...args: Parameters<typeof serveEnv>) => {
  const s = await serveEnv(...args);
  servers.push(s);
  return s;
};
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

/** The walk env's one client option. */
const WALK_OPTIONS = { clientOptions: { session: { size: { type: "integer", min: 1, max: 1000 } } } } as const;

const walkFactory = (options: Record<string, unknown>) => {
  const size = options.size ?? 7;
  if (!Number.isInteger(size)) throw new RangeError(`options.size must be an integer, got ${JSON.stringify(size)}`);
  return wrapStandard(new WalkEnv(size as number), { maxEpisodeSteps: 8 });
};

async function call(server: EnvServer, method: string, path: string, body?: unknown, raw?: string) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { "content-type": "application/json" },
    body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
  });
  return { status: res.status, body: (await res.json()) as any };
}

/** Opens a raw WebSocket and collects its frames. */
async function rawSocket(url: string) {
  const ws = new WebSocket(url);
  const frames: any[] = [];
  let waiter: (() => void) | undefined;
  ws.on("message", (m) => {
    frames.push(JSON.parse(m.toString()));
    waiter?.();
  });
  const next = async () => {
    while (frames.length === 0) await new Promise<void>((r) => (waiter = r));
    return frames.shift();
  };
  await new Promise((r, j) => (ws.once("open", r), ws.once("error", j)));
  return { ws, next };
}

describe("remote protocol over HTTP", () => {
  it("runs a session: create, reset, step, state, delete", async () => {
    const server = await serve(walkFactory, { envId: "test/walk-v0", ...WALK_OPTIONS });
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await call(server, "GET", "/health")).body).toMatchObject({ status: "healthy", sessions: 0 });
    const spec = await call(server, "GET", "/spec");
    expect(spec.body.actionSpace).toEqual({ kind: "discrete", n: 3 });

    const created = await call(server, "POST", "/sessions", { options: { size: 50 } });
    expect(created.status).toBe(201);
    const id = created.body.sessionId;
    expect(created.body.env).toBe("RecordEpisodeStatistics<OrderEnforcing<TimeLimit<WalkEnv>>>");
    const local = new WalkEnv(50);
    const [localObs] = await local.reset({ seed: 4 });
    const reset = await call(server, "POST", `/sessions/${id}/reset`, { seed: 4 });
    expect(reset.body).toEqual({ observation: localObs, info: { seed: 4 }, done: false });
    const step = await call(server, "POST", `/sessions/${id}/step`, { action: 2 });
    const [o, r, te, tr] = await local.step(2);
    expect(step.body).toMatchObject({ observation: o, reward: r, terminated: te, truncated: tr, done: te || tr });
    const state = await call(server, "GET", `/sessions/${id}/state`);
    expect(state.body).toMatchObject({ sessionId: id, envId: "test/walk-v0", episodeId: 1, stepCount: 1, done: false, render: o });
    expect((await call(server, "DELETE", `/sessions/${id}`)).body).toEqual({ closed: true, sessionId: id });
    expect((await call(server, "POST", `/sessions/${id}/step`, { action: 1 })).status).toBe(404);
    expect(server.sessionCount()).toBe(0);
  });

  it("serves one default session on the OpenEnv-style routes /reset, /step, /state", async () => {
    const server = await serve(walkFactory);
    expect((await call(server, "POST", "/step", { action: 1 })).body.error.message).toMatch(/no default session yet; POST \/reset first/);
    const local = walkFactory({});
    const [obs] = await local.reset({ seed: 2 });
    expect((await call(server, "POST", "/reset", { seed: 2 })).body).toEqual({ observation: obs, info: { seed: 2 }, done: false });
    const [o, r] = await local.step(0);
    expect((await call(server, "POST", "/step", { action: 0 })).body).toMatchObject({ observation: o, reward: r });
    expect((await call(server, "GET", "/state")).body).toMatchObject({ episodeId: 1, stepCount: 1 });
    await call(server, "POST", "/reset", {});
    expect(server.sessionCount()).toBe(1);
  });

  it("answers bad requests with clear 4xx JSON errors and keeps serving", async () => {
    const server = await serve(walkFactory);
    const { body: s } = await call(server, "POST", "/sessions", {});
    const at = `/sessions/${s.sessionId}`;
    const cases: [string, string, unknown, string | undefined, number, string, RegExp][] = [
      ["POST", `${at}/reset`, undefined, "{not json", 400, "bad_json", /not valid JSON/],
      ["POST", `${at}/reset`, undefined, "[1,2]", 400, "bad_json", /must be a JSON object, got an array/],
      ["POST", `${at}/reset`, { seed: "x" }, undefined, 400, "bad_request", /"seed" must be an integer/],
      ["POST", `${at}/step`, { action: 1 }, undefined, 409, "contract", /step before reset/],
      ["POST", `${at}/step`, { move: 1 }, undefined, 400, "bad_request", /\{"action": \.\.\.\}/],
      ["POST", "/sessions/nope/step", { action: 1 }, undefined, 404, "not_found", /no session nope; create one with POST \/sessions/],
      ["GET", `${at}/step`, undefined, undefined, 405, "method_not_allowed", /use POST/],
      ["GET", "/nowhere", undefined, undefined, 404, "not_found", /routes: GET \/health/],
      ["POST", "/sessions", { envId: "other/env-v0" }, undefined, 404, "not_found", /serves "custom"/],
      ["POST", "/sessions", { options: 3 }, undefined, 400, "bad_request", /"options" must be a JSON object/],
    ];
    for (const [method, path, body, raw, status, code, message] of cases) {
      const res = await call(server, method, path, body, raw);
      expect(res.status, `${method} ${path}`).toBe(status);
      expect(res.body.error.code).toBe(code);
      expect(res.body.error.message).toMatch(message);
    }
    expect((await call(server, "GET", "/health")).status).toBe(200);
  });

  it("survives oversized and random requests", async () => {
    const server = await serve(walkFactory, { maxBodyBytes: 1024, maxSessions: 4 });
    const big = await call(server, "POST", "/sessions", undefined, JSON.stringify({ options: { pad: "x".repeat(5000) } }));
    expect(big.status).toBe(413);
    expect(big.body.error.code).toBe("payload_too_large");
    const { body: s } = await call(server, "POST", "/sessions", {});
    const paths = ["/sessions", `/sessions/${s.sessionId}/reset`, `/sessions/${s.sessionId}/step`, `/sessions/${s.sessionId}`, "/reset", "/step", "/spec", "/x/y/z"];
    const methods = ["GET", "POST", "DELETE", "PUT"];
    let seed = 1;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) % n);
    const bodies = ["", "{", "null", "[]", '{"action": {"deep": [1, {"x": null}]}}', '{"seed": 1.5}', '{"seed": 3}', '{"options": []}', "\u0000\uffff", '"str"'];
    for (let i = 0; i < 150; i++) {
      const method = methods[rand(methods.length)]!;
      const res = await fetch(`${server.url}${paths[rand(paths.length)]}`, { method, body: method === "GET" ? undefined : bodies[rand(bodies.length)] });
      expect(res.status).toBeLessThan(500);
      const body = (await res.json()) as { error?: { code: string; message: string } };
      if (res.status >= 400) expect(body.error?.message.length).toBeGreaterThan(10);
    }
    expect((await call(server, "GET", "/health")).status).toBe(200);
    expect(server.sessionCount()).toBeLessThanOrEqual(4);
  });

  it("refuses sessions past the limit with 429, over HTTP and WebSocket", async () => {
    const server = await serve(walkFactory, { maxSessions: 2 });
    const a = await call(server, "POST", "/sessions", {});
    const b = await RemoteEnv.connect(server.url, { transport: "ws" });
    const refused = await call(server, "POST", "/sessions", {});
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ code: "session_limit" });
    expect(refused.body.error.message).toMatch(/session limit \(2\); close a session/);
    const wsRefused = await RemoteEnv.connect(server.url, { transport: "ws" }).catch((e) => e);
    expect(wsRefused).toBeInstanceOf(RemoteEnvError);
    expect(wsRefused).toMatchObject({ status: 429, code: "session_limit" });
    await call(server, "DELETE", `/sessions/${a.body.sessionId}`);
    expect((await call(server, "POST", "/sessions", {})).status).toBe(201);
    await b.close();
    await new Promise((r) => setTimeout(r, 50));
    expect(server.sessionCount()).toBe(1);
  });

  it("closes idle sessions after the timeout, over HTTP and WebSocket", async () => {
    const server = await serve(walkFactory, { idleTimeoutMs: 300 });
    const http = await RemoteEnv.connect(server.url);
    const ws = await RemoteEnv.connect(server.url, { transport: "ws" });
    const busy = await RemoteEnv.connect(server.url);
    await http.reset({ seed: 1 });
    await ws.reset({ seed: 1 });
    await busy.reset({ seed: 1 });
    // `busy` keeps making requests: it stays open while the others go idle.
    for (let i = 0; i < 10; i++) {
      await new Promise((r) => setTimeout(r, 60));
      await busy.state();
    }
    expect(server.sessionCount()).toBe(1);
    const err = await http.step(1).catch((e) => e);
    expect(err).toMatchObject({ code: "session_expired", status: 404 });
    expect(err.message).toMatch(/closed after 300 ms without requests/);
    const wsErr = await ws.step(1).catch((e) => e);
    expect(wsErr).toBeInstanceOf(RemoteEnvError);
    expect(wsErr.message).toMatch(/code 4000: session closed after 300 ms idle/);
    await http.close();
    await ws.close();
    await busy.close();
  });

  it("keeps many concurrent sessions isolated (HTTP and WebSocket mixed)", async () => {
    const server = await serve(walkFactory, { maxSessions: 32, ...WALK_OPTIONS });
    const n = 12;
    const remotes = await Promise.all(
      Array.from({ length: n }, (_, i) => RemoteEnv.connect<string, number>(server.url, { transport: i % 2 ? "ws" : "http", options: { size: 9 + i } })),
    );
    const play = async (env: { reset: WalkEnv["reset"]; step: WalkEnv["step"] }, i: number) => {
      const out: unknown[] = [await env.reset({ seed: 100 + i })];
      for (let k = 0; k < 5; k++) {
        const r = await env.step((i + k) % 3);
        out.push(r.slice(0, 4));
        if (r[2] || r[3]) break;
      }
      return out;
    };
    const remoteRuns = await Promise.all(remotes.map((env, i) => play(env, i)));
    const localRuns = await Promise.all(remotes.map((_, i) => play(walkFactory({ size: 9 + i }) as unknown as WalkEnv, i)));
    expect(remoteRuns).toEqual(localRuns);
    expect(server.sessionCount()).toBe(n);
    await Promise.all(remotes.map((r) => r.close()));
  });
});

describe("remote protocol over WebSocket frames", () => {
  it("answers frames in order, with errors as frames, and never drops the socket for a bad frame", async () => {
    const server = await serve(walkFactory, WALK_OPTIONS);
    const { ws, next } = await rawSocket(`${server.wsUrl}?options=${encodeURIComponent('{"size": 40}')}`);
    const hello = await next();
    expect(hello.type).toBe("session");
    expect(hello.data.actionSpace).toEqual({ kind: "discrete", n: 3 });
    ws.send("{oops");
    expect(await next()).toMatchObject({ type: "error", error: { code: "bad_json" } });
    ws.send(JSON.stringify({ type: "dance", id: 1 }));
    expect(await next()).toMatchObject({ type: "error", id: 1, error: { code: "bad_request", message: expect.stringMatching(/unknown frame type "dance"/) } });
    ws.send(JSON.stringify({ type: "step", id: 2, data: { action: 1 } }));
    expect(await next()).toMatchObject({ type: "error", id: 2, error: { code: "contract" } });
    ws.send(JSON.stringify({ type: "reset", id: 3, data: { seed: 5 } }));
    ws.send(JSON.stringify({ type: "step", id: 4, data: { action: 2 } }));
    ws.send(JSON.stringify({ type: "state", id: 5 }));
    const [r3, r4, r5] = [await next(), await next(), await next()];
    expect([r3.type, r3.id, r4.type, r4.id, r5.type, r5.id]).toEqual(["reset", 3, "step", 4, "state", 5]);
    expect(r5.data).toMatchObject({ episodeId: 1, stepCount: 1 });
    ws.send(JSON.stringify({ type: "close", id: 6 }));
    expect(await next()).toEqual({ type: "close", id: 6, data: { closed: true } });
    await new Promise((r) => ws.once("close", r));
    expect(server.sessionCount()).toBe(0);
  });

  it("refuses upgrades on other paths and for bad options", async () => {
    const server = await serve(walkFactory, WALK_OPTIONS);
    const bad = await RemoteEnv.connect(server.url, { transport: "ws", options: { size: "x" } }).catch((e) => e);
    expect(bad).toMatchObject({ status: 400, code: "bad_option", message: expect.stringMatching(/session option "size" must be an integer in 1\.\.1000, got "x"/) });
    const badHttp = await call(server, "POST", "/sessions", { options: { size: "x" } });
    expect(badHttp.status).toBe(400);
    expect(badHttp.body.error.message).toMatch(/session option "size" must be an integer in 1\.\.1000/);
    // The factory's own check still answers 400 for what the allow-list lets through.
    const envRefused = await serve((o) => walkFactory({ ...o, size: 1.5 }), WALK_OPTIONS);
    expect((await call(envRefused, "POST", "/sessions", {})).body.error.message).toMatch(/making the env failed: options.size must be an integer/);
    expect(server.sessionCount()).toBe(0);
    const wrongPath = new WebSocket(`ws://127.0.0.1:${server.port}/elsewhere`);
    const status = await new Promise((r) => wrongPath.on("unexpected-response", (_q, res) => r(res.statusCode)));
    expect(status).toBe(404);
  });
});

describe("RemoteEnv", () => {
  for (const transport of ["http", "ws"] as const) {
    it(`passes checkEnv over ${transport} (a registered tool env and a plain one)`, async () => {
      const arith = await serve("sinkflex/arith-v0");
      const env = await RemoteEnv.connect<unknown, AgentTurn>(arith.url, { transport, options: { maxEpisodeSteps: 4 } });
      expect(env.toString()).toBe(`RemoteEnv<RecordEpisodeStatistics<OrderEnforcing<TimeLimit<ArithEnv<sinkflex/arith-v0>>>> @ ${arith.url}>`);
      expect(env.actionSpace.kind).toBe("tool-call");
      const report = await checkEnv(env, {
        episodes: 2,
        maxSteps: 6,
        actions: (ctx) => (ctx.step >= 2 ? { content: "42", toolCalls: [] } : env.actionSpace.sample(ctx.rng)),
      });
      expect(report.passed, formatCheckReport(report)).toBe(true);
      expect(report.checks.every((c) => c.status === "passed"), formatCheckReport(report)).toBe(true);
      await expect(env.reset()).rejects.toThrow(EnvContractError);

      const walk = await serve(walkFactory);
      const walkEnv = await RemoteEnv.connect(walk.url, { transport });
      const walkReport = await checkEnv(walkEnv, { episodes: 2 });
      expect(walkReport.passed, formatCheckReport(walkReport)).toBe(true);
      expect(arith.sessionCount() + walk.sessionCount()).toBe(0);
    });
  }

  it("says clearly when no server is there", async () => {
    const server = await serveEnv(walkFactory);
    const url = server.url;
    await server.close();
    await server.close();
    await expect(RemoteEnv.connect(url)).rejects.toThrow(/cannot reach .*envs serve/);
    await expect(RemoteEnv.connect(url, { transport: "ws" })).rejects.toThrow(/cannot reach|closed/);
  });
});
