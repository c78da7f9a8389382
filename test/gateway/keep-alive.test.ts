/**
 * A kept-alive connection survives the gateway's process being busy: an agent (a real Node process,
 * its own event loop) sends its next request on the connection it kept while the trainer's event loop
 * is blocked for longer than Node's default keep-alive timeout (5 s), as a weight update or a long
 * decoding step on a loaded machine blocks it. The gateway must answer that request, not reset the
 * connection (which the `openai` client reports as "Connection error.").
 */
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EmbeddedEngine } from "../../src/engine/index.js";
import { GatewayServer } from "../../src/gateway/index.js";
import { template, tinyEngine } from "../rollout/helpers.js";
import { codec } from "./helpers.js";

const KEY = "keep-alive-test-key";
let engine: EmbeddedEngine;
let gw: GatewayServer;

beforeAll(async () => {
  engine = tinyEngine(codec, 3);
  gw = new GatewayServer({ sampler: engine, codec, template, modelName: "tiny", apiKey: KEY, maxContextTokens: 512 });
  await gw.listen(0, "127.0.0.1");
});

afterAll(async () => {
  await gw?.close();
  engine?.dispose();
});

/** The agent: one request, "1" on stdout, then after 1.5 s a second request on the same kept connection. */
const AGENT = `
const url = process.argv[1], headers = { authorization: "Bearer ${KEY}" };
await (await fetch(url, { headers })).text();
console.log("1");
await new Promise((r) => setTimeout(r, 1500));
try {
  const r = await fetch(url, { headers });
  console.log("2 " + r.status);
} catch (e) {
  console.log("2 failed: " + e.message + " " + (e.cause?.code ?? e.cause?.message));
}
`;

describe("gateway connections", () => {
  it("answers a request sent on a kept-alive connection while its event loop was blocked past 5 s", async () => {
    const { baseURL } = gw.open();
    const child = spawn(process.execPath, ["--input-type=module", "-e", AGENT, `${baseURL}/models`], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      // The trainer busy in a synchronous step, longer than Node's default keep-alive timeout.
      if (out === "1\n") Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 6500);
    });
    await new Promise((resolve) => child.on("close", resolve));
    expect(out).toBe("1\n2 200\n");
  }, 60_000);
});
