// Teacher-forced prompt scoring over the API: `sinkflex serve` answers POST /v1/completions with
// `echo: true, logprobs: 1, max_tokens: 0` (prompt as token ids or text) with each prompt token's log-prob,
// null for the first (the OpenAI / vLLM convention), equal to transformers' log-probs of the same checkpoint
// within 1e-4 (python subprocess; skipped with a printed reason when torch or transformers is missing).
// The model is the Qwen2.5 family fixture's config (biases, RoPE theta) with the embedding sized to a
// trimmed Qwen3 vocabulary, so the served folder has real tokenizer files. Bad echo requests get a 400.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openServer } from "../../src/cli/commands/serve.js";
import { createRandomModel } from "../../src/engine/embedded.js";
import { parseHfConfig } from "../../src/model/config.js";
import { loadQwen3Tokenizer, qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import { tokenCodec, TrimmedVocab } from "../../src/model/vocab.js";
import { FIXTURES } from "../model/fixtures.js";

/** The Python with torch (CI's worker environment names it), else the system's. */
const PYTHON = process.env.SINKFLEX_TORCH_PYTHON ?? "python3";

const tokenizer = loadQwen3Tokenizer();
const TEXT = "The cat sat on the mat. Hello world, the cat sat.";
const codec = tokenCodec(tokenizer, TrimmedVocab.build(tokenizer, [tokenizer.encode(TEXT)]));
let dir: string;
let url: string;
let close: () => Promise<void>;
const run = promisify(execFile);

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sinkflex-score-"));
  const raw = JSON.parse(readFileSync(join(FIXTURES, "family-qwen2.5", "checkpoint", "config.json"), "utf8"));
  const engine = createRandomModel(parseHfConfig({ ...raw, vocab_size: codec.size }), 11, { std: 0.08 });
  engine.tokenizerDir = qwen3TokenizerDir();
  await engine.save(join(dir, "model"));
  engine.dispose();
  codec.vocab!.save(join(dir, "model"));
  ({ url, close } = await openServer(join(dir, "model"), { modelName: "score", maxContextTokens: 256 }));
});

afterAll(async () => {
  await close?.();
  rmSync(dir, { recursive: true, force: true });
});

async function complete(body: Record<string, unknown>): Promise<{ status: number; json: any }> {
  const r = await fetch(`${url}/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "score", ...body }) });
  return { status: r.status, json: await r.json() };
}

describe("POST /v1/completions with echo and max_tokens 0", () => {
  it("returns each prompt token's log-prob (first null), equal to transformers'", async (ctx) => {
    const ids = codec.encode(TEXT);
    const byIds = await complete({ prompt: ids, echo: true, logprobs: 1, max_tokens: 0 });
    expect(byIds.status).toBe(200);
    const choice = byIds.json.choices[0];
    expect(choice.text).toBe(TEXT);
    const lps = choice.logprobs.token_logprobs as (number | null)[];
    expect(lps.length).toBe(ids.length);
    expect(lps[0]).toBeNull();
    expect(lps.slice(1).every((x) => typeof x === "number" && x < 0)).toBe(true);
    expect(choice.logprobs.tokens.join("")).toBe(TEXT);
    expect(byIds.json.usage).toMatchObject({ prompt_tokens: ids.length, completion_tokens: 0 });

    // the same prompt as text: the server's tokenization, the same numbers
    const byText = await complete({ prompt: TEXT, echo: true, logprobs: 1, max_tokens: 0, return_token_ids: true });
    expect(byText.json.choices[0].prompt_token_ids).toEqual(ids);
    expect(byText.json.choices[0].logprobs.token_logprobs).toEqual(lps);

    // async, so the server in this process keeps answering while python runs
    const missing = await run(PYTHON, ["-c", "import torch, transformers"]).then(() => null, (e: { stderr?: string }) => String(e.stderr ?? e));
    if (missing !== null) {
      if (process.env.SINKFLEX_REQUIRE_TORCH === "1") throw new Error(`SINKFLEX_REQUIRE_TORCH=1 but ${PYTHON} cannot import the Python side of this check`);
      console.log(`skipped the transformers comparison: ${PYTHON} cannot import torch and transformers (${missing.trim().split("\n").pop()})`);
      ctx.skip();
    }
    writeFileSync(join(dir, "ids.json"), JSON.stringify(ids));
    const r = await run(PYTHON, ["scripts/make-fixtures.py", "score", join(dir, "model"), join(dir, "ids.json")], { timeout: 120_000 });
    const want = JSON.parse(r.stdout.trim().split("\n").pop()!) as (number | null)[];
    expect(want.length).toBe(lps.length);
    expect(want[0]).toBeNull();
    for (let i = 1; i < want.length; i++) expect(Math.abs(lps[i]! - want[i]!), `token ${i}`).toBeLessThan(1e-4);
  }, 180_000);

  it("refuses echo with generation, streaming or several choices, saying what to send", async () => {
    const gen = await complete({ prompt: "Hello", echo: true, max_tokens: 4 });
    expect(gen.status).toBe(400);
    expect(gen.json.error.message).toMatch(/echo is supported with max_tokens: 0 only/);
    const stream = await complete({ prompt: "Hello", echo: true, max_tokens: 0, stream: true });
    expect(stream.status).toBe(400);
    expect(stream.json.error.message).toMatch(/stream: false/);
    const n = await complete({ prompt: "Hello", echo: true, max_tokens: 0, n: 2 });
    expect(n.status).toBe(400);
    expect(n.json.error.param).toBe("n");
    // without logprobs the prompt comes back with none
    const plain = await complete({ prompt: "Hello", echo: true, max_tokens: 0 });
    expect(plain.status).toBe(200);
    expect(plain.json.choices[0]).toMatchObject({ text: "Hello", logprobs: null });
  });
});
