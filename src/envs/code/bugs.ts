/**
 * Bug templates for the SWE-style tasks: eight small functions, each written in Python and in
 * JavaScript in a buggy form, with the one search/replace edit that fixes it, a reference
 * implementation (the correct behaviour, in TypeScript, which computes every test's expected value)
 * and the buggy behaviour (to choose test cases that expose the bug). Functions are named in
 * snake_case; the JavaScript versions use the camelCase form of the same name.
 *
 * This file holds templates only; repositories are assembled in swe-tasks.ts.
 */
import type { Rng } from "../../core/index.js";

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type Lang = "python" | "javascript";

export interface LangSource {
  /** The buggy function's source; NAME stands for the function name. */
  buggy: string;
  /** The fix: `search` occurs exactly once in `buggy`; replacing it with `replace` fixes the bug. */
  search: string;
  replace: string;
}

export interface BugTemplate {
  id: string;
  /** The module (file) name the function lives in. */
  module: string;
  /** Possible snake_case names for the function. */
  names: string[];
  /** What the function should do, in one sentence (for issue texts). */
  contract: string;
  correct(...args: Json[]): Json;
  buggy(...args: Json[]): Json;
  /** A random argument list. */
  sample(r: Rng): Json[];
  /** Argument lists that usually expose the bug (edge cases). */
  edges: Json[][];
  python: LangSource;
  javascript: LangSource;
}

export const camel = (snake: string): string => snake.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
const ints = (r: Rng, n: number, lo: number, hi: number) => Array.from({ length: n }, () => r.range(lo, hi));

export const BUG_TEMPLATES: BugTemplate[] = [
  {
    id: "off_by_one_range",
    module: "ranges",
    names: ["sum_range", "sum_between", "total_in_range"],
    contract: "returns the sum of the integers from lo to hi, both included",
    correct: (lo, hi) => {
      let t = 0;
      for (let i = lo as number; i <= (hi as number); i++) t += i;
      return t;
    },
    buggy: (lo, hi) => {
      let t = 0;
      for (let i = lo as number; i < (hi as number); i++) t += i;
      return t;
    },
    sample: (r) => {
      const lo = r.range(-5, 20);
      return [lo, lo + r.range(0, 15)];
    },
    edges: [[3, 3], [1, 10], [0, 0]],
    python: {
      buggy: 'def NAME(lo, hi):\n    """Return the sum of the integers from lo to hi, both included."""\n    total = 0\n    for i in range(lo, hi):\n        total += i\n    return total\n',
      search: "in range(lo, hi):",
      replace: "in range(lo, hi + 1):",
    },
    javascript: {
      buggy: "/** The sum of the integers from lo to hi, both included. */\nexport function NAME(lo, hi) {\n  let total = 0;\n  for (let i = lo; i < hi; i++) {\n    total += i;\n  }\n  return total;\n}\n",
      search: "i < hi;",
      replace: "i <= hi;",
    },
  },
  {
    id: "wrong_comparison",
    module: "extremes",
    names: ["largest", "find_max", "max_value"],
    contract: "returns the largest number of a non-empty list",
    correct: (items) => Math.max(...(items as number[])),
    buggy: (items) => (items as number[]).reduce((best, x) => (x < best ? x : best)),
    sample: (r) => [ints(r, r.range(1, 7), -50, 99)],
    edges: [[[7]], [[1, 2, 3]], [[-4, -9, -1]]],
    python: {
      buggy: 'def NAME(items):\n    """Return the largest number in a non-empty list."""\n    best = items[0]\n    for x in items[1:]:\n        if x < best:\n            best = x\n    return best\n',
      search: "if x < best:",
      replace: "if x > best:",
    },
    javascript: {
      buggy: "/** The largest number in a non-empty list. */\nexport function NAME(items) {\n  let best = items[0];\n  for (const x of items.slice(1)) {\n    if (x < best) {\n      best = x;\n    }\n  }\n  return best;\n}\n",
      search: "if (x < best)",
      replace: "if (x > best)",
    },
  },
  {
    id: "missing_empty_case",
    module: "averages",
    names: ["mean", "average", "mean_value"],
    contract: "returns the arithmetic mean of a list of numbers, and 0 for an empty list",
    correct: (items) => ((items as number[]).length === 0 ? 0 : (items as number[]).reduce((a, b) => a + b, 0) / (items as number[]).length),
    buggy: (items) => (items as number[]).reduce((a, b) => a + b, 0) / (items as number[]).length,
    sample: (r) => [ints(r, r.range(1, 6), 0, 40)],
    edges: [[[]], [[5]], [[2, 4]]],
    python: {
      buggy: 'def NAME(items):\n    """Return the arithmetic mean of a list of numbers; 0 for an empty list."""\n    total = sum(items)\n    return total / len(items)\n',
      search: "    total = sum(items)\n",
      replace: "    if not items:\n        return 0\n    total = sum(items)\n",
    },
    javascript: {
      buggy: "/** The arithmetic mean of a list of numbers; 0 for an empty list. */\nexport function NAME(items) {\n  const total = items.reduce((a, b) => a + b, 0);\n  return total / items.length;\n}\n",
      search: "  const total = items",
      replace: "  if (items.length === 0) {\n    return 0;\n  }\n  const total = items",
    },
  },
  {
    id: "incomplete_condition",
    module: "dates",
    names: ["is_leap_year", "leap_year", "is_leap"],
    contract: "tells whether a year is a leap year in the Gregorian calendar (every 4 years, except centuries not divisible by 400)",
    correct: (y) => ((y as number) % 4 === 0 && (y as number) % 100 !== 0) || (y as number) % 400 === 0,
    buggy: (y) => (y as number) % 4 === 0 && (y as number) % 100 !== 0,
    sample: (r) => [r.pick([1600, 1700, 1800, 1900, 2000, 2100, 2400]) + r.pick([0, 0, 4, 1, 2])],
    edges: [[2000], [1900], [2024], [2023], [1600]],
    python: {
      buggy: 'def NAME(year):\n    """Return True when the year is a Gregorian leap year."""\n    return year % 4 == 0 and year % 100 != 0\n',
      search: "return year % 4 == 0 and year % 100 != 0",
      replace: "return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
    },
    javascript: {
      buggy: "/** True when the year is a Gregorian leap year. */\nexport function NAME(year) {\n  return year % 4 === 0 && year % 100 !== 0;\n}\n",
      search: "return year % 4 === 0 && year % 100 !== 0;",
      replace: "return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);",
    },
  },
  {
    id: "case_sensitivity",
    module: "text",
    names: ["count_vowels", "vowel_count", "number_of_vowels"],
    contract: "counts the vowels (a, e, i, o, u, in either case) of a text",
    correct: (t) => [...(t as string).toLowerCase()].filter((c) => "aeiou".includes(c)).length,
    buggy: (t) => [...(t as string)].filter((c) => "aeiou".includes(c)).length,
    sample: (r) => [r.pick(["Hello World", "banana", "AEIOU", "Sky", "Programming In Python", "Umbrella", "queue", "OpenAI Gym"])],
    edges: [["Apple"], ["xyz"], ["EAT"]],
    python: {
      buggy: 'def NAME(text):\n    """Return how many vowels (a, e, i, o, u, either case) the text has."""\n    return sum(1 for ch in text if ch in "aeiou")\n',
      search: "for ch in text if",
      replace: "for ch in text.lower() if",
    },
    javascript: {
      buggy: '/** How many vowels (a, e, i, o, u, either case) the text has. */\nexport function NAME(text) {\n  return [...text].filter((ch) => "aeiou".includes(ch)).length;\n}\n',
      search: "[...text]",
      replace: "[...text.toLowerCase()]",
    },
  },
  {
    id: "swapped_bounds",
    module: "bounds",
    names: ["clamp", "bound", "limit_to"],
    contract: "returns x limited to the range [lo, hi]",
    correct: (x, lo, hi) => Math.max(lo as number, Math.min(x as number, hi as number)),
    buggy: (x, lo, hi) => Math.min(lo as number, Math.max(x as number, hi as number)),
    sample: (r) => {
      const lo = r.range(-10, 10);
      return [r.range(-30, 30), lo, lo + r.range(1, 20)];
    },
    edges: [[5, 0, 10], [-3, 0, 10], [42, 0, 10]],
    python: {
      buggy: 'def NAME(x, lo, hi):\n    """Return x limited to the range [lo, hi]."""\n    return min(lo, max(x, hi))\n',
      search: "return min(lo, max(x, hi))",
      replace: "return max(lo, min(x, hi))",
    },
    javascript: {
      buggy: "/** x limited to the range [lo, hi]. */\nexport function NAME(x, lo, hi) {\n  return Math.min(lo, Math.max(x, hi));\n}\n",
      search: "return Math.min(lo, Math.max(x, hi));",
      replace: "return Math.max(lo, Math.min(x, hi));",
    },
  },
  {
    id: "dropped_remainder",
    module: "lists",
    names: ["chunk", "chunks", "split_every"],
    contract: "splits a list into consecutive pieces of `size` items, the last piece possibly shorter",
    correct: (items, size) => {
      const out: Json[] = [];
      for (let i = 0; i < (items as Json[]).length; i += size as number) out.push((items as Json[]).slice(i, i + (size as number)));
      return out;
    },
    buggy: (items, size) => {
      const out: Json[] = [];
      for (let i = 0; i + (size as number) <= (items as Json[]).length; i += size as number) out.push((items as Json[]).slice(i, i + (size as number)));
      return out;
    },
    sample: (r) => [ints(r, r.range(0, 9), 0, 9), r.range(1, 4)],
    edges: [[[1, 2, 3, 4, 5], 2], [[1, 2, 3, 4], 2], [[], 3]],
    python: {
      buggy: 'def NAME(items, size):\n    """Split a list into consecutive pieces of `size` items; the last piece may be shorter."""\n    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]\n',
      search: "range(0, len(items) - size + 1, size)",
      replace: "range(0, len(items), size)",
    },
    javascript: {
      buggy: "/** Splits a list into consecutive pieces of `size` items; the last piece may be shorter. */\nexport function NAME(items, size) {\n  const out = [];\n  for (let i = 0; i + size <= items.length; i += size) {\n    out.push(items.slice(i, i + size));\n  }\n  return out;\n}\n",
      search: "i + size <= items.length;",
      replace: "i < items.length;",
    },
  },
  {
    id: "wrong_formula",
    module: "temperature",
    names: ["to_fahrenheit", "celsius_to_fahrenheit", "c_to_f"],
    contract: "converts degrees Celsius to degrees Fahrenheit (F = C * 9 / 5 + 32)",
    correct: (c) => ((c as number) * 9) / 5 + 32,
    buggy: (c) => ((c as number) * 5) / 9 + 32,
    sample: (r) => [r.range(-40, 120)],
    edges: [[100], [0], [-40], [37]],
    python: {
      buggy: 'def NAME(celsius):\n    """Return the temperature in degrees Fahrenheit."""\n    return celsius * 5 / 9 + 32\n',
      search: "celsius * 5 / 9 + 32",
      replace: "celsius * 9 / 5 + 32",
    },
    javascript: {
      buggy: "/** The temperature in degrees Fahrenheit. */\nexport function NAME(celsius) {\n  return (celsius * 5) / 9 + 32;\n}\n",
      search: "(celsius * 5) / 9 + 32",
      replace: "(celsius * 9) / 5 + 32",
    },
  },
];

/** The correct source of a template's function (the buggy one with its fix applied). */
export function fixedSource(t: BugTemplate, lang: Lang): string {
  const s = t[lang];
  return s.buggy.replace(s.search, s.replace);
}
