/**
 * MINT checks. Answers: numbers within the task's tolerance (relative, absolute below 1), read from
 * a plain number, a fraction (3/4, \frac{3}{4}), a \boxed{...} or, failing those, the last number of
 * the text; booleans from true/false/yes/no; lists element by element; options by their letter
 * (a-d, "C", "(c)", "C) 12"); text by SQuAD-style normalization (case, punctuation, articles,
 * spaces). Code: the program that the benchmark's tests make of a submission (run elsewhere).
 */
import type { MintAnswerTask, MintCodeTask, Reference } from "./mint-tasks.js";

export function parseNumber(text: string): number | undefined {
  let s = text.trim().replace(/^\$+|\$+$/g, "").trim();
  const boxed = /\\boxed\{([^}]*)\}/.exec(s);
  if (boxed) s = boxed[1]!.trim();
  s = s.replace(/(\d),(?=\d{3}\b)/g, "$1");
  if (/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(s)) return Number(s);
  const frac = /^(-?)\\d?frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}$/.exec(s) ?? /^(-?)\(?(-?[\d.]+)\)?\s*\/\s*\(?(-?[\d.]+)\)?$/.exec(s);
  if (frac) {
    const v = Number(frac[2]) / Number(frac[3]);
    return Number.isFinite(v) ? (frac[1] === "-" ? -v : v) : undefined;
  }
  const all = s.match(/-?\d+(?:\.\d+)?(?:e[-+]?\d+)?/gi);
  return all ? Number(all[all.length - 1]) : undefined;
}

export function numbersMatch(given: number, expected: number, tolerance: number): boolean {
  return Math.abs(given - expected) <= tolerance * Math.max(1, Math.abs(expected));
}

function parseBool(text: string): boolean | undefined {
  const s = text.trim().toLowerCase().replace(/[.!]$/, "");
  if (["true", "yes", "1", "correct"].includes(s)) return true;
  if (["false", "no", "0", "incorrect"].includes(s)) return false;
  return undefined;
}

function parseList(text: string): number[] | undefined {
  const inner = /\[([^\]]*)\]/.exec(text)?.[1] ?? /\(([^)]*)\)/.exec(text)?.[1] ?? text;
  const parts = inner.split(",").map((x) => x.trim()).filter((x) => x !== "");
  const nums = parts.map((p) => parseNumber(p));
  return nums.every((n): n is number => n !== undefined) ? nums : undefined;
}

function parseOption(text: string): string | undefined {
  const m = /^\s*\(?([a-dA-D])\b/.exec(text) ?? /\b(?:answer|option)\s*(?:is\s*)?:?\s*\(?([a-dA-D])\b/i.exec(text);
  return m?.[1]!.toLowerCase();
}

/** SQuAD-style normalization: lower case, no punctuation, no articles, single spaces. */
export function normalizeText(text: string): string {
  return text
    .normalize("NFKC")
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s]/gu, " ")
    .replace(/\b(a|an|the)\b/g, " ")
    .replace(/\s+/g, " ")
    .trim();
}

/** Whether `given` answers the task; `read` is what was understood of it (for evidence). */
export function checkAnswer(task: MintAnswerTask, given: string): { correct: boolean; read: Reference | null } {
  const ref = task.reference;
  switch (task.answerType) {
    case "integer":
    case "float": {
      const n = parseNumber(given);
      return { correct: n !== undefined && numbersMatch(n, Number(ref), task.tolerance), read: n ?? null };
    }
    case "bool": {
      const b = parseBool(given);
      return { correct: b !== undefined && b === ref, read: b ?? null };
    }
    case "list": {
      const l = parseList(given);
      const expected = ref as number[];
      return { correct: !!l && l.length === expected.length && l.every((x, i) => numbersMatch(x, Number(expected[i]), task.tolerance)), read: l ?? null };
    }
    case "option": {
      const o = parseOption(given);
      return { correct: o !== undefined && o === String(ref).trim().toLowerCase(), read: o ?? null };
    }
    default: {
      const t = normalizeText(given);
      return { correct: t !== "" && t === normalizeText(String(ref)), read: t };
    }
  }
}

/** The Python program that checks a code submission: setup, the code (with the stub when it lacks the function), the tests. */
export function checkProgram(task: MintCodeTask, code: string): string {
  const defines = task.entryPoint && new RegExp(`^\\s*def\\s+${task.entryPoint}\\s*\\(`, "m").test(code);
  const body = !defines && task.stub ? `${task.stub}${task.stub.endsWith("\n") ? "" : "\n"}${code}` : code;
  return `${task.setup ? `${task.setup}\n` : ""}${body}\n\n${task.test}`;
}
