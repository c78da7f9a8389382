/**
 * `sinkflex sinks probe <checkpoint>`: measures where a model puts its attention sinks, per layer, on
 * real trajectories (a JSONL file, or the bundled suites' expert trajectories), prints the SinkProfile
 * as a table and writes it as JSON with --out. `--saved` shows the profile a run laid the checkpoint out
 * with (sinkflex_sink_profile.json, attention.mode profile) instead; a probe of such a checkpoint also
 * says what moved since that profile.
 *
 * This file reads inputs and formats output; the measuring is attention/probe.ts.
 */
import type { Command } from "commander";
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { checkProfileFits, formatProfile, parseProfile, probeSinks, profileChanges, SINK_PROFILE_FILE, writeProfile } from "../../attention/index.js";
import { loadEngine } from "../../engine/index.js";
import { registerBundledEnvs } from "../../envs/index.js";
import { runExpertEpisode } from "../../envs/index.js";
import type { AgentTurn, ChatMessage, ChatObservation, ToolSpec } from "../../gym/index.js";
import { make } from "../../gym/index.js";
import { ChatTemplate } from "../../model/index.js";
import { Tokenizer } from "../../model/index.js";
import { tokenCodec, TrimmedVocab, type TokenCodec } from "../../model/index.js";
import { readChatJsonl } from "../../pipeline/index.js";
import { UsageError } from "../usage-error.js";

/** Expert trajectories used when no --data is given: suites whose experts run without outside services. */
export const DEFAULT_PROBE_ENVS = ["sinkflex/arith-v0", "sinkflex/alfworld-gen-v0", "sinkflex/tau-retail-v0"];

interface ProbeCommandOptions {
  data?: string;
  env?: string[];
  episodes: number;
  out?: string;
  delta: number;
  queries: number;
  maxTokens: number;
  threshold: number;
  saved?: boolean;
}

function intOption(name: string, min: number) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new UsageError(`${name} must be an integer >= ${min}, got "${v}"`);
    return n;
  };
}

function fraction(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (!(n > 0 && n <= 1)) throw new UsageError(`${name} must be a number in (0, 1], got "${v}"`);
    return n;
  };
}

interface Renderer {
  codec: TokenCodec;
  template: ChatTemplate;
}

function renderer(dir: string): Renderer {
  let tokenizer: Tokenizer;
  try {
    tokenizer = Tokenizer.fromDir(dir);
  } catch (e) {
    throw new UsageError(`${dir}: chat trajectories need the checkpoint's tokenizer (${(e as Error).message}); or pass --data with {"tokens": [...]} lines`);
  }
  return { codec: tokenCodec(tokenizer, TrimmedVocab.load(dir)), template: ChatTemplate.fromTokenizer(tokenizer) };
}

function renderConversation(r: Renderer, messages: ChatMessage[], tools: ToolSpec[]): number[] {
  return r.codec.encode(r.template.render(messages, { tools }));
}

/** Token sequences from a JSONL file: {"tokens": [...]} lines, or OpenAI chat records. */
function sequencesFromFile(path: string, dir: string, vocabSize: number): number[][] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new UsageError(`--data ${path}: cannot read it (${(e as Error).message})`);
  }
  const lines = text.split("\n").filter((l) => l.trim() !== "");
  if (lines.length === 0) throw new UsageError(`--data ${path} is empty; give one trajectory per line`);
  const first = JSON.parse(lines[0]!) as Record<string, unknown>;
  if (Array.isArray(first.tokens)) {
    return lines.map((l, i) => {
      const tokens = (JSON.parse(l) as { tokens?: unknown }).tokens;
      if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t) && t >= 0 && t < vocabSize)) {
        throw new UsageError(`--data ${path} line ${i + 1}: "tokens" must be an array of token ids in [0, ${vocabSize})`);
      }
      return tokens as number[];
    });
  }
  const r = renderer(dir);
  return readChatJsonl(path).map((c) => renderConversation(r, c.messages, c.tools));
}

/** Expert trajectories of the bundled suites, rendered with the checkpoint's chat template. */
async function expertSequences(dir: string, envIds: string[], episodes: number): Promise<number[][]> {
  registerBundledEnvs();
  const r = renderer(dir);
  const out: number[][] = [];
  for (const envId of envIds) {
    let env;
    try {
      env = await make<ChatObservation, AgentTurn>(envId);
    } catch (e) {
      throw new UsageError(`--env ${envId}: ${(e as Error).message}; run \`sinkflex envs list\` to see the ids`);
    }
    try {
      const n = Math.min(episodes, env.metadata.taskCount ?? episodes);
      for (let taskIndex = 0; taskIndex < n; taskIndex++) {
        const ep = await runExpertEpisode(env, envId, { taskIndex, maxTurns: 100 });
        out.push(renderConversation(r, ep.messages, ep.tools));
      }
    } finally {
      await env.close();
    }
  }
  return out;
}

export async function probeCommand(checkpoint: string, o: ProbeCommandOptions): Promise<string> {
  let engine;
  try {
    engine = loadEngine(checkpoint);
  } catch (e) {
    throw new UsageError(`${checkpoint}: cannot load the checkpoint (${(e as Error).message}); give a folder with config.json and safetensors`);
  }
  try {
    let decode: (id: number) => string = (id) => `#${id}`;
    try {
      const r = renderer(checkpoint);
      decode = (id) => `${JSON.stringify(r.codec.decode([id]))} #${id}`;
    } catch {
      // no tokenizer: ids only
    }
    const where = `${checkpoint}/${SINK_PROFILE_FILE}`;
    const saved = engine.sinkProfile ? checkProfileFits(parseProfile(engine.sinkProfile, where), engine.config, where) : null;
    if (o.saved) {
      if (!saved) throw new UsageError(`${checkpoint} has no ${SINK_PROFILE_FILE} (only runs with attention.mode profile save one); probe it without --saved`);
      if (o.out) writeProfile(o.out, saved);
      return `saved profile (${where}):\n${formatProfile(saved, decode)}${o.out ? `\nwrote ${o.out}` : ""}`;
    }
    const V = engine.config.vocabSize;
    const raw = o.data
      ? sequencesFromFile(o.data, checkpoint, V)
      : await expertSequences(checkpoint, o.env && o.env.length ? o.env : DEFAULT_PROBE_ENVS, o.episodes);
    const seqs = raw.map((s) => s.slice(0, o.maxTokens)).filter((s) => s.length > o.delta);
    if (seqs.length === 0) {
      throw new UsageError(`no trajectory is longer than --delta ${o.delta} tokens; give longer trajectories or a smaller --delta`);
    }
    for (const s of seqs) {
      const bad = s.find((t) => t >= V);
      if (bad !== undefined) throw new UsageError(`token id ${bad} is outside the model's vocabulary [0, ${V}); the data was tokenized for another model`);
    }
    const profile = probeSinks(engine.model, seqs, {
      delta: o.delta, queries: o.queries, threshold: o.threshold, model: basename(checkpoint),
    });
    if (o.out) writeProfile(o.out, profile);
    const moved = saved ? profileChanges(saved, profile) : [];
    const since = saved ? `\nagainst the profile saved with the checkpoint (${SINK_PROFILE_FILE}): ${moved.length ? moved.join("; ") : "no sink moved"}` : "";
    return `${formatProfile(profile, decode)}${since}${o.out ? `\nwrote ${o.out}` : ""}`;
  } finally {
    engine.dispose();
  }
}

export function registerSinksCommands(program: Command): void {
  const sinks = program.command("sinks").description("Attention sinks: measure a model's sinks per layer (the SinkProfile).");
  sinks
    .command("probe")
    .description("Measure attention mass per key on trajectories and report each layer's sinks (positions and token ids, with their mass).")
    .argument("<checkpoint>", "checkpoint folder (config.json, safetensors; tokenizer files to render chat trajectories)")
    .option("--data <file>", "JSONL trajectories: {\"tokens\": [ids]} lines, or OpenAI chat records (messages, tools) rendered with the checkpoint's chat template (default: the bundled suites' expert trajectories)")
    .option("--env <id...>", `env ids whose expert trajectories are probed when --data is absent (default: ${DEFAULT_PROBE_ENVS.join(" ")})`)
    .option("--episodes <n>", "expert episodes per env when --data is absent", intOption("--episodes", 1), 4)
    .option("--out <file>", "write the SinkProfile JSON here")
    .option("--delta <n>", "only queries at least this many tokens after a key count toward it", intOption("--delta", 0), 64)
    .option("--queries <n>", "query rows sampled per trajectory (per layer and head)", intOption("--queries", 1), 256)
    .option("--threshold <a>", "a head depends on a key when its mean attention mass is at least this", fraction("--threshold"), 0.3)
    .option("--max-tokens <n>", "cut each trajectory to its first n tokens", intOption("--max-tokens", 1), 4096)
    .option("--saved", "show the profile saved with the checkpoint (sinkflex_sink_profile.json, written by attention.mode profile) instead of probing")
    .action(async (checkpoint: string, o: ProbeCommandOptions) => {
      console.log(await probeCommand(checkpoint, o));
    });
}
