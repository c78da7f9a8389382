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
