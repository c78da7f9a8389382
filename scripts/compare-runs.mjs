#!/usr/bin/env node
// Compares two run folders' metrics.jsonl and eval.json field by field, leaving out wall-clock fields
// (time, seconds, ms, *Ms, phaseMs, tokensPerSec): two runs of one config on the same machine must
// match exactly. Prints each difference (file, record, field path, both values) and exits 1 if any.
// Usage: node scripts/compare-runs.mjs <run folder A> <run folder B>
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

const TIMING = /^(time|seconds|ms|.*Ms|tokensPerSec|tokens\/s)$/;

function strip(value) {
  if (Array.isArray(value)) return value.map(strip);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).filter(([k]) => !TIMING.test(k)).map(([k, v]) => [k, strip(v)]));
  }
  return value;
}

function diff(a, b, path, out) {
  if (Object.is(a, b)) return;
  if (a && b && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b)) {
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) diff(a[k], b[k], `${path}.${k}`, out);
    return;
  }
  out.push(`${path}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
}

function read(dir, file) {
  const path = join(dir, file);
  if (!existsSync(path)) throw new Error(`${path} does not exist: is ${dir} a finished run folder?`);
  return readFileSync(path, "utf8");
}

const [dirA, dirB] = process.argv.slice(2);
if (!dirA || !dirB) {
  console.error("usage: node scripts/compare-runs.mjs <run folder A> <run folder B>");
  process.exit(2);
}
const lines = (text) => text.split("\n").filter((l) => l.trim()).map((l) => strip(JSON.parse(l)));
const metricsA = lines(read(dirA, "metrics.jsonl"));
const metricsB = lines(read(dirB, "metrics.jsonl"));
const differences = [];
if (metricsA.length !== metricsB.length) differences.push(`metrics.jsonl: ${metricsA.length} records != ${metricsB.length}`);
for (let i = 0; i < Math.min(metricsA.length, metricsB.length); i++) diff(metricsA[i], metricsB[i], `metrics.jsonl[${i}] (${metricsA[i].stage} ${metricsA[i].step})`, differences);
diff(strip(JSON.parse(read(dirA, "eval.json"))), strip(JSON.parse(read(dirB, "eval.json"))), "eval.json", differences);
const stages = {};
for (const r of metricsA) stages[r.stage] = (stages[r.stage] ?? 0) + 1;
console.log(`metrics.jsonl: ${metricsA.length} records (${Object.entries(stages).map(([s, n]) => `${s} ${n}`).join(", ")}) vs ${metricsB.length}`);
if (differences.length) {
  console.log(`${differences.length} difference(s):\n${differences.slice(0, 50).join("\n")}`);
  process.exit(1);
}
console.log("identical (metrics.jsonl and eval.json, wall-clock fields left out)");
