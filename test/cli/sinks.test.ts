// `sinkflex sinks probe`: the real binary on a checkpoint with the real Qwen3 tokenizer (trimmed to the
// ids its corpus uses) over the arith suite's expert trajectories (the default data path), and the
// in-process command on {"tokens": [...]} data with a model whose sink is known.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createRandomModel } from "../../src/engine/embedded.js";
import { registerBundledEnvs } from "../../src/envs/index.js";
import { runExpertEpisode } from "../../src/envs/suite.js";
import type { AgentTurn, ChatObservation } from "../../src/core/index.js";
import { make } from "../../src/gym/registry.js";
import { referenceKernels } from "../../src/kernels/index.js";
import { ChatTemplate } from "../../src/model/chat-template.js";
import { loadQwen3Tokenizer, qwen3TokenizerDir } from "../../src/model/tokenizer.js";
import { TrimmedVocab } from "../../src/model/vocab.js";
import type { SinkProfile } from "../../src/attention/index.js";
import { sinkModel, tinyConfig, withX, X } from "../attention/helpers.js";
import { runCli } from "../run-cli.js";


describe("sinkflex sinks probe", () => {
  it("probes the suites' expert trajectories rendered with the checkpoint's chat template (real binary)", async () => {
    const tokenizer = loadQwen3Tokenizer();
    const template = ChatTemplate.fromTokenizer(tokenizer);
    registerBundledEnvs();
    const env = await make<ChatObservation, AgentTurn>("sinkflex/arith-v0");
    const corpus: number[][] = [];
    for (let taskIndex = 0; taskIndex < 2; taskIndex++) {
      const ep = await runExpertEpisode(env, "sinkflex/arith-v0", { taskIndex });
      corpus.push(tokenizer.encode(template.render(ep.messages, { tools: ep.tools })));
    }
    await env.close();
    const vocab = TrimmedVocab.build(tokenizer, corpus);
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-sinks-"));
    const engine = createRandomModel(tinyConfig({ vocabSize: vocab.size }), 3, { kernels: referenceKernels, tokenizerDir: qwen3TokenizerDir() });
    engine.saveSync(dir);
    vocab.save(dir);
    const res = spawnSync(process.execPath, [
      "bin/sinkflex.mjs", "sinks", "probe", dir, "--env", "sinkflex/arith-v0", "--episodes", "2", "--delta", "8",
      "--queries", "16", "--out", join(dir, "profile.json"),
    ], { encoding: "utf8", timeout: 60_000 });
    expect(res.status, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/^layer\s+sink positions/);
    expect(res.stdout).toContain(`wrote ${join(dir, "profile.json")}`);
    const p = JSON.parse(readFileSync(join(dir, "profile.json"), "utf8")) as SinkProfile;
    expect(p.sequences).toBe(2);
    expect(p.tokens).toBe(corpus[0]!.length + corpus[1]!.length);
    expect(p.layers).toHaveLength(2);
    // the natural prefix is the chat template's start, in the model's (trimmed) ids
    expect(p.prefix[0]).toBe(vocab.toSmall([corpus[0]![0]!], tokenizer)[0]);
  });

  it("reads {\"tokens\": [...]} data and reports the known sink; user errors say what to do", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sinkflex-sinks-"));
    sinkModel().saveSync(join(dir, "ck"));
    const data = join(dir, "data.jsonl");
    writeFileSync(data, [1, 2, 3].map((i) => JSON.stringify({ tokens: withX(i, 40, 3) })).join("\n"));
    const ok = await runCli(["sinks", "probe", join(dir, "ck"), "--data", data, "--delta", "8"]);
    expect(ok.code, ok.output).toBe(0);
    expect(ok.output).toMatch(new RegExp(`^0\\s+3 \\(#${X}, `, "m"));
    const missing = await runCli(["sinks", "probe", join(dir, "ck"), "--data", join(dir, "nope.jsonl")]);
    expect(missing.code).toBe(2);
    expect(missing.output).toMatch(/--data .*nope\.jsonl: cannot read it/);
    const short = await runCli(["sinks", "probe", join(dir, "ck"), "--data", data]);
    expect(short.code).toBe(2);
    expect(short.output).toMatch(/no trajectory is longer than --delta 64 tokens/);
  });
});
