/**
 * The worker side of data preparation (see prep-pool.ts): runs jobs in a worker thread (the contents
 * of a range of one suite's tasks, a range of one suite's expert episodes, or the SFT examples of a
 * slice of conversations) and posts each result back under its job's id. It rebuilds the policy's text
 * side (tokenizer, chat template, trimmed vocabulary) from a plain description once, and keeps it for
 * later jobs. Before its first job it imports the user modules the pool names (`workerData.modules`,
 * resolved file paths), so that their envs can be made here.
 */
import { parentPort, workerData } from "node:worker_threads";
import { registerBundledEnvs } from "../envs/index.js";
import { ChatTemplate } from "../model/index.js";
import { Tokenizer } from "../model/index.js";
import { tokenCodec, TrimmedVocab, type TrimmedVocabJson } from "../model/index.js";
import type { ToolFormat } from "../model/index.js";
import type { PolicyText } from "./policy.js";
import { conversationToExample, type Conversation } from "./sft-data.js";
import { expertEpisodes, makeChatEnv, taskContentsRange, type SuitePlan } from "./tasks.js";
import { importModules } from "./user-modules.js";

/** A policy's text side as plain data, for another thread to rebuild. */
export interface PolicyTextSpec {
  tokenizerDir: string;
  templateSource: string;
  toolArguments: "raw" | "parsed";
  /** The template's tool format (the checkpoint family's where the template declares none: Phi-3). */
  toolFormat?: ToolFormat;
  vocab: TrimmedVocabJson | null;
  templateVars: Record<string, unknown>;
}

export type PrepJob =
  | { kind: "contents"; envId: string; options: Record<string, unknown>; from: number; to: number }
  | { kind: "episodes"; plan: Pick<SuitePlan, "envId" | "options" | "sftTasks" | "sftEpisodes" | "sftMistakes">; count: number; seed: number; from: number; to: number }
  | { kind: "examples"; text: PolicyTextSpec; conversations: Conversation[] };

/** One SFT example as the worker sends it back (typed arrays, transferred without copying). */
export interface PackedExample {
  tokens: Int32Array;
  lossMask: Uint8Array;
  contextStart: number;
  untrained?: number[];
  drifted: boolean;
}

export type PrepMessage =
  | { id: number; kind: "tick"; n: number }
  | { id: number; kind: "contents"; keys: string[] }
  | { id: number; kind: "episodes"; kept: Conversation[]; failed: number }
  | { id: number; kind: "examples"; examples: PackedExample[] }
  | { id: number; kind: "error"; message: string; stack?: string };

export function policyTextFromSpec(spec: PolicyTextSpec): PolicyText {
  const tokenizer = Tokenizer.fromDir(spec.tokenizerDir);
  const template = new ChatTemplate(spec.templateSource, { bosToken: tokenizer.bosToken, eosToken: tokenizer.eosToken, specialTokens: tokenizer.specialTokens }, spec.toolArguments, spec.toolFormat);
  const vocab = spec.vocab ? TrimmedVocab.fromJSON(spec.vocab) : undefined;
  return { tokenizer, template, codec: tokenCodec(tokenizer, vocab), vocab, templateVars: spec.templateVars };
}

/** Runs one job; `tick` reports finished episodes. */
export async function runPrepJob(job: PrepJob, tick: (n: number) => void, textOf: (spec: PolicyTextSpec) => PolicyText): Promise<PrepMessage> {
  if (job.kind === "contents") {
    const env = await makeChatEnv(job.envId, job.options);
    try {
      return { id: 0, kind: "contents", keys: await taskContentsRange(env, job.from, job.to) };
    } finally {
      await env.close();
    }
  }
  if (job.kind === "episodes") {
    let pending = 0;
    const { kept, failed } = await expertEpisodes(job.plan, job.count, job.seed, () => {
      if (++pending === 25) {
        tick(pending);
        pending = 0;
      }
    }, { from: job.from, to: job.to });
    if (pending > 0) tick(pending);
    return { id: 0, kind: "episodes", kept: kept.map((e) => ({ messages: e.messages, tools: e.tools })), failed };
  }
  const text = textOf(job.text);
  const examples = job.conversations.map((c): PackedExample => {
    const e = conversationToExample(text, c);
    return { tokens: Int32Array.from(e.tokens), lossMask: e.lossMask, contextStart: e.contextStart ?? 1, ...(e.untrained ? { untrained: e.untrained } : {}), drifted: e.drifted };
  });
  return { id: 0, kind: "examples", examples };
}

// In a worker thread: serve jobs until the pool terminates it.
if (parentPort) {
  const port = parentPort;
  registerBundledEnvs();
  // The user modules' envs, registered before any job runs; a module that fails fails every job, with its error.
  const modules: string[] = (workerData as { modules?: string[] } | null)?.modules ?? [];
  const ready = importModules(modules, process.cwd());
  ready.catch(() => undefined);
  let cached: { key: string; text: PolicyText } | undefined;
  const textOf = (spec: PolicyTextSpec) => {
    const key = JSON.stringify(spec);
    if (cached?.key !== key) cached = { key, text: policyTextFromSpec(spec) };
    return cached.text;
  };
  port.on("message", async ({ id, job }: { id: number; job: PrepJob }) => {
    try {
      await ready;
      const result = await runPrepJob(job, (n) => port.postMessage({ id, kind: "tick", n }), textOf);
      const transfer = result.kind === "examples" ? result.examples.flatMap((e) => [e.tokens.buffer, e.lossMask.buffer]) : [];
      port.postMessage({ ...result, id }, transfer as ArrayBuffer[]);
    } catch (err) {
      port.postMessage({ id, kind: "error", message: (err as Error).message ?? String(err), stack: (err as Error).stack });
    }
  });
}
