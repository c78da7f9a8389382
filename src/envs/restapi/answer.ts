/**
 * Scoring restapi answers: a numeric expected answer matches a submitted number within a tolerance
 * (0.01 absolute, or 0.01% of the expected value when that is larger), read from the first number in
 * the submission ("12.5 °C" and "1,234.50 EUR" are read as 12.5 and 1234.5); a text answer matches
 * after normalization (case, surrounding spaces and quotes, a trailing period, repeated spaces).
 */
export function normalizeText(text: string): string {
  return text
    .normalize("NFKC")
    .trim()
    .replace(/^["'`“”‘’]+|["'`“”‘’]+$/g, "")
    .trim()
    .replace(/\.$/, "")
    .replace(/\s+/g, " ")
    .toLowerCase();
}

/** The first number written in `text` (thousands separators allowed), or undefined. */
export function firstNumber(text: string): number | undefined {
  const m = /-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+/.exec(text);
  return m ? Number(m[0].replace(/,/g, "")) : undefined;
}

export function numericTolerance(expected: number): number {
  return Math.max(0.01, Math.abs(expected) * 1e-4);
}

export function answerMatches(expected: string | number, given: string | number): boolean {
  if (typeof expected === "number") {
    const n = typeof given === "number" ? given : firstNumber(given);
    return n !== undefined && Math.abs(n - expected) <= numericTolerance(expected);
  }
  return normalizeText(String(given)) === normalizeText(expected);
}

/** One gold-chain argument against the agent's, compared as answers are. */
function argumentMatches(expected: string | number, given: unknown): boolean {
  return (typeof given === "string" || typeof given === "number") && answerMatches(expected, given);
}

/**
 * Partial progress for a reward rubric: each gold call of the chain scores by the agent's closest call
 * to the same tool, (1 + its matching arguments) / (1 + the gold arguments), so 1 for an exact call;
 * a correct answer adds 1; the sum is over the chain's length plus one. A correct answer after the whole
 * chain scores 1; the right call with a wrong answer scores 1/2 at level 1.
 */
export function chainProgress(chain: readonly { tool: string; args: Record<string, string | number> }[], calls: readonly { name: string; arguments: string }[], answered: boolean): number {
  const parsed = calls.map((c) => {
    try {
      const args: unknown = JSON.parse(c.arguments);
      return { name: c.name, args: args && typeof args === "object" ? (args as Record<string, unknown>) : {} };
    } catch {
      return { name: c.name, args: {} as Record<string, unknown> };
    }
  });
  let made = 0;
  for (const gold of chain) {
    const expected = Object.entries(gold.args);
    let best = 0;
    for (const c of parsed) {
      if (c.name !== gold.tool) continue;
      const matching = expected.filter(([k, v]) => argumentMatches(v, c.args[k])).length;
      best = Math.max(best, (1 + matching) / (1 + expected.length));
    }
    made += best;
  }
  return (made + (answered ? 1 : 0)) / (chain.length + 1);
}
