/**
 * MINT-style tasks from the shared benchmark data: `mint/<source>.jsonl` (gsm8k, math, theoremqa,
 * mmlu, hotpotqa, mbpp, humaneval) and `human-eval/HumanEval.jsonl.gz` (all 164 HumanEval problems,
 * read with node:zlib). Each becomes an answer task (a reference answer of a declared type) or a code
 * task (a Python function checked by the benchmark's tests).
 *
 * The data folder is `$SINKFLEX_DATA_DIR` when set, else `../shared/data` next to the repository
 * root (resolved from this file's location). This file reads and normalizes tasks; checking
 * answers and running code are mint-check.ts and the env.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { benchmarkDataDir } from "../data-dir.js";

export const MINT_SOURCES = ["gsm8k", "math", "theoremqa", "mmlu", "hotpotqa", "mbpp", "humaneval", "human-eval"] as const;
export type MintSource = (typeof MINT_SOURCES)[number];
/** The default sources: every MINT subset, with the full HumanEval (164) in place of MINT's 45-problem subset. */
export const DEFAULT_MINT_SOURCES: MintSource[] = ["gsm8k", "math", "theoremqa", "mmlu", "hotpotqa", "mbpp", "human-eval"];

export type AnswerType = "integer" | "float" | "bool" | "list" | "option" | "text";
export type Reference = string | number | boolean | (string | number)[];

interface Base {
  id: string;
  source: MintSource;
  prompt: string;
}
export interface MintAnswerTask extends Base {
  kind: "answer";
  answerType: AnswerType;
  reference: Reference;
  /** Relative tolerance for numbers (absolute below 1). */
  tolerance: number;
}
export interface MintCodeTask extends Base {
  kind: "code";
  /** The function the tests call. */
  entryPoint: string;
  /** Python run after the submitted code; it raises (non-zero exit) when the code is wrong. */
  test: string;
  /** Code placed before the submitted code (MBPP's test_setup_code). */
  setup: string;
  /** The benchmark's own solution, complete (prompt + canonical body for HumanEval). */
  gold: string;
  /** For HumanEval: the signature and docstring, prepended when a submission does not define the function. */
  stub?: string;
}
export type MintTask = MintAnswerTask | MintCodeTask;

/** The shared benchmark data folder. */
export function dataDir(): string {
  return benchmarkDataDir();
}

function readJsonl(file: string, text: string): Record<string, any>[] {
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l, i) => {
      try {
        return JSON.parse(l) as Record<string, any>;
      } catch (err) {
        throw new Error(`${file}: line ${i + 1} is not JSON (${(err as Error).message})`);
      }
    });
}

function need(file: string): string {
  if (!existsSync(file)) throw new Error(`MINT data file ${file} not found; set SINKFLEX_DATA_DIR to the folder holding mint/ and human-eval/, or pass options.dataDir`);
  return file;
}

const TOLERANCE: Partial<Record<MintSource, number>> = { gsm8k: 1e-6, math: 1e-4, theoremqa: 1e-2 };

function answerTask(source: MintSource, row: Record<string, any>): MintAnswerTask {
  let answerType: AnswerType;
  let reference: Reference = row.reference;
  if (source === "gsm8k") answerType = "integer";
  else if (source === "math") answerType = "float";
  else if (source === "mmlu") answerType = "option";
  else if (source === "hotpotqa") answerType = "text";
  else {
    const t = String(row.answer_type);
    answerType = t === "list of integer" || t === "list of float" ? "list" : t === "integer" || t === "float" || t === "bool" || t === "option" ? t : "text";
  }
  if ((answerType === "integer" || answerType === "float") && typeof reference === "string") reference = Number(reference);
  return { id: `${source}-${row.id}`, source, prompt: String(row.prompt).trim(), kind: "answer", answerType, reference, tolerance: TOLERANCE[source] ?? 1e-6 };
}

/** Loads one source's tasks from `dir` (the data folder). */
export function loadMintSource(source: MintSource, dir = dataDir()): MintTask[] {
  if (source === "human-eval") {
    const file = need(join(dir, "human-eval", "HumanEval.jsonl.gz"));
    return readJsonl(file, gunzipSync(readFileSync(file)).toString("utf8")).map((row) => ({
      id: String(row.task_id),
      source,
      kind: "code",
      prompt: String(row.prompt),
      entryPoint: String(row.entry_point),
      test: `${row.test}\n\ncheck(${row.entry_point})\n`,
      setup: "",
      gold: `${row.prompt}${row.canonical_solution}`,
      stub: String(row.prompt),
    }));
  }
  const file = need(join(dir, "mint", `${source}.jsonl`));
  const rows = readJsonl(file, readFileSync(file, "utf8"));
  if (source === "humaneval") {
    return rows.map((row) => ({
      id: `mint-${row.task_id}`,
      source,
      kind: "code",
      prompt: String(row.prompt),
      entryPoint: String(row.entry_point),
      test: String(row.reference),
      setup: "",
      gold: `${row.prompt}\n${row.canonical_solution}`,
      stub: String(row.prompt),
    }));
  }
  if (source === "mbpp") {
    return rows.map((row) => ({
      id: `mbpp-${row.task_id}`,
      source,
      kind: "code",
      prompt: String(row.prompt).trim(),
      entryPoint: /assert\s+(\w+)\s*\(/.exec(String(row.reference))?.[1] ?? "",
      test: `${row.reference}\n`,
      setup: String(row.test_setup_code ?? ""),
      gold: String(row.code).replace(/\r\n/g, "\n"),
    }));
  }
  return rows.map((row) => answerTask(source, row));
}

export function loadMintTasks(sources: readonly MintSource[] = DEFAULT_MINT_SOURCES, dir = dataDir()): MintTask[] {
  for (const s of sources) if (!MINT_SOURCES.includes(s)) throw new RangeError(`mint: unknown source "${s}"; the sources are ${MINT_SOURCES.join(", ")}`);
  if (sources.length === 0) throw new RangeError("mint: options.sources is empty; give at least one of " + MINT_SOURCES.join(", "));
  return sources.flatMap((s) => loadMintSource(s, dir));
}
