/**
 * llama.cpp (through node-llama-cpp) as a decoding peer of the engine benchmark: greedy decoding of a GGUF
 * (bench/peers/gguf_qwen2.py writes one from a checkpoint) at a batch of sequences, prompt and new tokens
 * given as token ids, on the CPU with the benchmark's thread count. Prints one JSON line: tokens_per_s
 * (new tokens, prefill included in the time) and cpu_seconds (this process's CPU time over the same run), or {"error": ...} when node-llama-cpp is missing or fails, so
 * the benchmark prints "peer unavailable" and goes on. Not a dependency of sinkflex and never run at its
 * run time; it never builds or downloads llama.cpp (build: "never": only a prebuilt binary node-llama-cpp
 * ships in its platform package runs).
 *
 * Usage: node llama_cpp.mjs '{"gguf": PATH, "batch": B, "prompt": P, "new_tokens": N, "threads": T, "vocab": V}'
 * node-llama-cpp is resolved from the project's node_modules, else from $SINKFLEX_BENCH_NODE_LLAMA_CPP (a
 * folder where `npm install node-llama-cpp` ran).
 */
import { createRequire } from "node:module";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";

async function importNodeLlamaCpp() {
  try {
    return await import("node-llama-cpp");
  } catch (err) {
    const dir = process.env.SINKFLEX_BENCH_NODE_LLAMA_CPP;
    if (!dir) throw new Error(`node-llama-cpp is not installed (${err.message.split("\n")[0]}); npm install node-llama-cpp in a folder and set SINKFLEX_BENCH_NODE_LLAMA_CPP to it`);
    const resolved = createRequire(join(dir, "package.json")).resolve("node-llama-cpp");
    return await import(pathToFileURL(resolved).href);
  }
}

/** The same prompts as the other contenders': a linear congruential stream of ids per sequence. */
function randomTokens(n, V, seed) {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s % V;
  });
}

async function main() {
  const cmd = JSON.parse(process.argv[2] ?? "{}");
  for (const k of ["gguf", "batch", "prompt", "new_tokens", "threads", "vocab"]) {
    if (cmd[k] === undefined) throw new Error(`missing "${k}" in the command (usage: see the file's header)`);
  }
  const { getLlama } = await importNodeLlamaCpp();
  const llama = await getLlama({ gpu: false, build: "never", logLevel: "error", maxThreads: cmd.threads });
  const model = await llama.loadModel({ modelPath: cmd.gguf });
  const perSeq = cmd.prompt + cmd.new_tokens + 8;
  const context = await model.createContext({ sequences: cmd.batch, contextSize: perSeq, batchSize: Math.min(2048, cmd.batch * cmd.prompt), threads: cmd.threads });
  const prompts = Array.from({ length: cmd.batch }, (_, b) => randomTokens(cmd.prompt, cmd.vocab, 500 + b));
  const sequences = prompts.map(() => context.getSequence());
  const decode = async (seq, prompt, n) => {
    const out = [];
    for await (const tok of seq.evaluate(prompt, { temperature: 0 })) {
      out.push(tok);
      if (out.length >= n) break;
    }
    return out.length;
  };
  // warm-up (8 prompt tokens, 2 new, as the other contenders'), then the measured run on fresh caches
  await Promise.all(sequences.map((s, b) => decode(s, prompts[b].slice(0, 8), 2)));
  for (const s of sequences) await s.clearHistory();
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const produced = (await Promise.all(sequences.map((s, b) => decode(s, prompts[b], cmd.new_tokens)))).reduce((a, n) => a + n, 0);
  const seconds = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  const cpu_seconds = (c.user + c.system) / 1e6;
  console.log(JSON.stringify({ seconds, tokens_per_s: produced / seconds, produced, cpu_seconds, build: llama.buildType, cpuMathCores: llama.cpuMathCores }));
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((err) => {
  console.log(JSON.stringify({ error: String(err?.message ?? err).split("\n")[0] }));
});
