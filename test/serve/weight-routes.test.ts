/**
 * `sinkflex serve --allow-reload`: vLLM's weight-update routes on a real server over a real checkpoint
 * (full weights from a folder, a PEFT LoRA adapter), what they refuse, and the replica pool
 * (src/rollout/remote-sampler.ts) driving them: least-loaded sampling over two servers, a server that
 * goes away mid-run, and a server that does not allow reloads.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openServer } from "../../src/cli/commands/serve.js";
import { loadEngine } from "../../src/engine/embedded.js";
import { createLoraAdapter } from "../../src/model/index.js";
import { qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import { ReplicaPool } from "../../src/rollout/remote-sampler.js";
import { stockCodec, tinyEngine } from "../rollout/helpers.js";

const codec = stockCodec();
const scratch = mkdtempSync(join(tmpdir(), "weight-routes-"));
const base = join(scratch, "base");
const other = join(scratch, "other");
const adapter = join(scratch, "adapter");
const ids = [3, 17, 5, 40, 9, 12, 30, 7];

type Served = Awaited<ReturnType<typeof openServer>>;
const opened: Served[] = [];
const serve = async (opts: { allowReload?: boolean } = {}) => {
  const s = await openServer(base, { modelName: "tiny", maxTokens: 32, maxContextTokens: 1024, ...opts });
  opened.push(s);
  return s;
};

async function save(dir: string, seed: number): Promise<void> {
  const e = tinyEngine(codec, seed, 1024);
  e.tokenizerDir = qwen3TokenizerDir();
  await e.save(dir);
  e.dispose();
  codec.vocab!.save(dir);
}

/** The teacher-forced log-probs of `ids` under a folder (a checkpoint, or `base` with an adapter folder on it). */
async function expected(dir: string, adapterDir?: string): Promise<Float32Array> {
  const e = loadEngine(dir);
  try {
    if (adapterDir) await e.load(adapterDir);
    return (await e.logprobs([ids]))[0]!;
  } finally {
    e.dispose();
  }
}

async function post(url: string, body?: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
}

async function scored(url: string, model: string): Promise<number[]> {
  const r = await post(`${url}/completions`, { model, prompt: ids, max_tokens: 0, echo: true, logprobs: 0 });
  expect(r.status).toBe(200);
  return (JSON.parse(r.text) as { choices: { logprobs: { token_logprobs: number[] } }[] }).choices[0]!.logprobs.token_logprobs.slice(1);
}

beforeAll(async () => {
  await save(base, 5);
  await save(other, 6);
  const e = loadEngine(base);
  const a = createLoraAdapter(e.config, { rank: 2, alpha: 4, targets: ["q", "v"], dropout: 0 }, 1);
  for (let i = 0; i < a.data.length; i++) a.data[i] = Math.sin(i) * 0.3;
  e.enableLora(a);
  await e.save(adapter);
  e.dispose();
});

afterAll(async () => {
  for (const s of opened) await s.close();
  rmSync(scratch, { recursive: true, force: true });
});

describe("sinkflex serve's weight-update routes", () => {
  it("are refused, saying how to allow them, unless the server was started with --allow-reload", async () => {
    const s = await serve();
    const root = s.url.replace(/\/v1$/, "");
    const r = await post(`${root}/update_weights`, { update_info: { path: other } });
    expect(r.status).toBe(404);
    expect(r.text).toContain("--allow-reload");
    expect((await post(`${s.url}/load_lora_adapter`, { lora_name: "a", lora_path: adapter })).status).toBe(404);
  });

  it("load a checkpoint folder between decoding steps and commit its weight_version (vLLM's disk backend routes)", async () => {
    const s = await serve({ allowReload: true });
    const root = s.url.replace(/\/v1$/, "");
    expect(await fetch(`${root}/weight_info`).then((r) => r.json())).toEqual({ weight_version: null });
    // Out of order, or a folder that is not a checkpoint: a 4xx saying what to do.
    expect(await post(`${root}/update_weights`, { update_info: { path: other } })).toMatchObject({ status: 400, text: expect.stringContaining("start_weight_update must be called") });
    expect((await post(`${root}/init_weight_transfer_engine`, {})).status).toBe(400);
    expect((await post(`${root}/init_weight_transfer_engine`, { init_info: {} })).status).toBe(200);
    expect((await post(`${root}/start_weight_update`)).status).toBe(200);
    expect((await post(`${root}/start_weight_update`)).status).toBe(409);
    expect(await post(`${root}/update_weights`, { update_info: { path: "relative/dir" } })).toMatchObject({ status: 400, text: expect.stringContaining("absolute") });
    expect(await post(`${root}/update_weights`, { update_info: { path: scratch } })).toMatchObject({ status: 400, text: expect.stringContaining("no .safetensors") });
    // The served weights change to the folder's.
    const before = await scored(s.url, "tiny");
    (await expected(base)).forEach((x, i) => expect(before[i]).toBeCloseTo(x, 5));
    expect((await post(`${root}/update_weights`, { update_info: { path: other } })).status).toBe(200);
    expect((await post(`${root}/update_weights`, { update_info: { path: other } })).status).toBe(400);
    expect((await post(`${root}/finish_weight_update`, { weight_version: "7" })).status).toBe(200);
    expect((await post(`${root}/reset_prefix_cache`)).status).toBe(200);
    expect(await fetch(`${root}/weight_info`).then((r) => r.json())).toEqual({ weight_version: "7" });
    const after = await scored(s.url, "tiny");
    (await expected(other)).forEach((x, i) => expect(after[i]).toBeCloseTo(x, 5));
    expect((await post(`${root}/finish_weight_update`, { weight_version: "8" })).status).toBe(400);
  });

  it("load a LoRA adapter under its name, which requests then ask for (vLLM's runtime LoRA routes)", async () => {
    const s = await serve({ allowReload: true });
    expect(await post(`${s.url}/load_lora_adapter`, { lora_name: "a1", lora_path: other })).toMatchObject({ status: 400, text: expect.stringContaining("not a PEFT LoRA adapter folder") });
    expect(await post(`${s.url}/load_lora_adapter`, { lora_name: "a1", lora_path: adapter })).toEqual({ status: 200, text: "Success: LoRA adapter 'a1' added successfully." });
    expect((await post(`${s.url}/load_lora_adapter`, { lora_name: "a1", lora_path: adapter })).status).toBe(400);
    const models = (await fetch(`${s.url}/models`).then((r) => r.json())) as { data: { id: string; parent?: string }[] };
    expect(models.data.map((m) => [m.id, m.parent])).toEqual([["tiny", undefined], ["a1", "tiny"]]);
    const served = await scored(s.url, "a1");
    (await expected(base, adapter)).forEach((x, i) => expect(served[i]).toBeCloseTo(x, 5));
    // The base alone is not served while the adapter is merged into the weights.
    expect(await post(`${s.url}/completions`, { model: "tiny", prompt: ids, max_tokens: 1 })).toMatchObject({ status: 400, text: expect.stringContaining('ask for \\"a1\\"') });
    // A new adapter replaces it; the replaced name unloads, the served one does not.
    expect((await post(`${s.url}/load_lora_adapter`, { lora_name: "a2", lora_path: adapter })).status).toBe(200);
    expect((await post(`${s.url}/unload_lora_adapter`, { lora_name: "a2" })).status).toBe(400);
    expect((await post(`${s.url}/unload_lora_adapter`, { lora_name: "a1" })).status).toBe(200);
    expect((await post(`${s.url}/unload_lora_adapter`, { lora_name: "a1" })).status).toBe(404);
  });
});

describe("the replica pool over sinkflex serve", () => {
  it("samples token ids and log-probs from the least-loaded replicas, moves a session off a replica that went away, and syncs the survivors", async () => {
    const a = await serve({ allowReload: true });
    const b = await serve({ allowReload: true });
    const logged: string[] = [];
    const pool = new ReplicaPool({ urls: [a.url, b.url], model: "tiny", sync: "reload", log: (m) => logged.push(m) });
    const sessions = await Promise.all(Array.from({ length: 6 }, () => pool.session(ids)));
    const first = await pool.sampleBatch(sessions, sessions.map(() => ({ maxTokens: 4, seed: 1 })));
    expect(first.every((r) => r.tokens.length === 4 && r.logprobs.length === 4 && r.logprobs.every((x) => x < 0))).toBe(true);
    expect(pool.stats().map((s) => s.requests)).toEqual([3, 3]);
    // One replica goes away: its sessions' next samples go to the other, and it leaves the pool.
    await a.close();
    const again = await pool.sampleBatch(sessions, sessions.map(() => ({ maxTokens: 2 })));
    expect(again.every((r) => r.tokens.length === 2)).toBe(true);
    expect(pool.live).toEqual([b.url]);
    expect(logged[0]).toContain(`policy server ${a.url} left the pool: cannot reach the policy server`);
    // The survivor takes the new weights; the pool's version changes once it has confirmed them.
    const report = await pool.syncWeights(other, 3);
    expect(report).toMatchObject({ version: 3, replicas: 1, dropped: [] });
    expect(pool.policyVersion).toBe(3);
    const served = await scored(b.url, "tiny");
    (await expected(other)).forEach((x, i) => expect(served[i]).toBeCloseTo(x, 5));
  });

  it("keeps a `sinkflex serve --allow-reload` process in step", async () => {
    const child = spawn(process.execPath, ["bin/sinkflex.mjs", "serve", base, "--port", "0", "--model-name", "tiny", "--allow-reload"], { stdio: ["ignore", "pipe", "pipe"] });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = "";
        child.stdout.on("data", (d: Buffer) => {
          out += d.toString();
          const m = /at (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(out);
          if (m) resolve(m[1]!);
        });
        child.stderr.on("data", (d: Buffer) => (out += d.toString()));
        child.on("exit", (code) => reject(new Error(`serve exited with ${code}: ${out}`)));
      });
      const pool = new ReplicaPool({ urls: [url], model: "tiny", sync: "reload" });
      expect(await pool.syncWeights(other, 2)).toMatchObject({ version: 2, replicas: 1, dropped: [] });
      const served = await scored(url, "tiny");
      (await expected(other)).forEach((x, i) => expect(served[i]).toBeCloseTo(x, 5));
      const [r] = await pool.sampleBatch([await pool.session(ids)], [{ maxTokens: 3 }]);
      expect(r!.tokens).toHaveLength(3);
    } finally {
      child.kill("SIGTERM");
    }
  });

  it("fails a sync on servers that do not allow reloads, saying how to start them", async () => {
    const s = await serve();
    const pool = new ReplicaPool({ urls: [s.url], model: "tiny", sync: "reload" });
    await expect(pool.syncWeights(other, 1)).rejects.toThrow(/no policy server took the weights of version 1 .*answered 404.*VLLM_SERVER_DEV_MODE=1.*sinkflex serve with --allow-reload/);
    expect(pool.policyVersion).toBe(0);
    expect(() => new ReplicaPool({ urls: [s.url.replace(/\/v1$/, "")], model: "tiny", sync: "reload" })).toThrow(/must be http\(s\) and end in \/v1/);
    await expect(new ReplicaPool({ urls: [s.url], model: "tiny", sync: "reload" }).syncWeights("relative", 1)).rejects.toThrow(/absolute path/);
  });
});
