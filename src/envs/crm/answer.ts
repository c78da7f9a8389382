/**
 * Exact-match scoring of CRM answers after normalization: case, surrounding whitespace and quotes, a
 * trailing period and inner runs of spaces are ignored, and two numbers match by value ("3" == "3.0").
 * Nothing else is forgiven: a different name, month or email is wrong.
 */
export function normalizeAnswer(text: string): string {
  let s = text.normalize("NFKC").trim();
  s = s.replace(/^["'`“”‘’]+|["'`“”‘’]+$/g, "").trim();
  s = s.replace(/\.$/, "").trim();
  s = s.replace(/\s+/g, " ").toLowerCase();
  return s;
}

export function answersMatch(expected: string, given: string): boolean {
  const a = normalizeAnswer(expected);
  const b = normalizeAnswer(given);
  if (a === b) return true;
  const num = /^-?\d+(\.\d+)?$/;
  return num.test(a) && num.test(b) && Number(a) === Number(b);
}
