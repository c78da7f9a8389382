/**
 * Execution accuracy: does a query's result equal the gold query's result?
 *
 * Results are compared as multisets of rows (row order ignored) unless the gold query orders its
 * result at the top level, in which case the row sequences must be equal. Columns are compared in
 * order. Numbers are compared by value (1 == 1.0, and floats equal to 12 significant digits, so that
 * the order of a floating-point sum does not matter); text is compared exactly. This file runs no query.
 */
import type { QueryResult, SqlValue } from "./backend.js";

function cellKey(v: SqlValue): string {
  if (v === null) return "null";
  if (typeof v === "number") {
    if (!Number.isFinite(v)) return `n:${v}`;
    if (Number.isInteger(v)) return `n:${v}`;
    const r = Number(v.toPrecision(12));
    return `n:${Number.isInteger(r) ? r : r.toString()}`;
  }
  return `s:${v}`;
}

function rowKey(row: SqlValue[]): string {
  return JSON.stringify(row.map(cellKey));
}

export interface ResultComparison {
  equal: boolean;
  ordered: boolean;
  /** Why they differ, in words (absent when equal). */
  difference?: string;
}

export function compareResults(gold: QueryResult, given: QueryResult, ordered: boolean): ResultComparison {
  const goldWidth = gold.columns.length;
  const givenWidth = given.columns.length;
  if (goldWidth !== givenWidth) {
    return { equal: false, ordered, difference: `the result has ${givenWidth} column(s), the expected result has ${goldWidth}` };
  }
  if (gold.rows.length !== given.rows.length) {
    return { equal: false, ordered, difference: `the result has ${given.rows.length} row(s), the expected result has ${gold.rows.length}` };
  }
  const a = gold.rows.map(rowKey);
  const b = given.rows.map(rowKey);
  if (ordered) {
    const i = a.findIndex((k, j) => k !== b[j]);
    return i === -1 ? { equal: true, ordered } : { equal: false, ordered, difference: `row ${i + 1} differs: expected ${a[i]}, got ${b[i]}` };
  }
  const counts = new Map<string, number>();
  for (const k of a) counts.set(k, (counts.get(k) ?? 0) + 1);
  for (const k of b) {
    const n = counts.get(k) ?? 0;
    if (n === 0) return { equal: false, ordered, difference: `the result has a row the expected result lacks (or has fewer times): ${k}` };
    counts.set(k, n - 1);
  }
  return { equal: true, ordered };
}
