/**
 * The house's shape, from the code: modules meet only through their faces (each module's index.ts),
 * imports follow the layering below, and no import circle exists among the files of src/. A change that
 * reaches into another module's internal file, or turns an arrow around, fails here with the file and
 * the import to change.
 *
 *   cli, serve, gateway, dashboard, pipeline -> anything below
 *   recipes -> rl, rollout, gym, kernels;  rl -> rollout, engine, reward, gym;  reward -> gym
 *   rollout -> gym, engine, model;  attention -> engine, model, kernels;  engine -> model, kernels
 *   model -> kernels;  envs -> tools, sandbox, gym;  tools -> gym;  sandbox, kernels -> (nothing)
 *   every module -> core;  core -> nothing
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), "../../src");

/** Which modules each module may import (besides core, which every module may). */
const ALLOWED: Record<string, string[]> = {
  core: [],
  gym: [],
  tools: ["gym"],
  sandbox: [],
  envs: ["tools", "sandbox", "gym"],
  kernels: [],
  model: ["kernels"],
  engine: ["model", "kernels"],
  attention: ["engine", "model", "kernels"],
  rollout: ["gym", "engine", "model"],
  reward: ["gym"],
  rl: ["rollout", "engine", "reward", "gym", "model"],
  recipes: ["rl", "rollout", "gym", "kernels", "model"],
  pipeline: ["*"],
  serve: ["*"],
  gateway: ["*"],
  dashboard: ["*"],
  cli: ["*"],
};

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? sourceFiles(p) : /\.(ts|mts)$/.test(n) && !n.endsWith(".d.ts") ? [p] : [];
  });
}

function resolveImport(from: string, spec: string): string | undefined {
  if (!spec.startsWith(".")) return undefined;
  const base = resolve(dirname(from), spec).replace(/\.(js|mjs|ts)$/, "");
  return [`${base}.ts`, `${base}.mts`, join(base, "index.ts")].find((c) => existsSync(c));
}

const moduleOf = (file: string) => {
  const parts = relative(SRC, file).split("/");
  return parts.length === 1 ? "" : parts[0]!;
};

const files = sourceFiles(SRC);
const edges = new Map<string, string[]>();
for (const f of files) {
  const text = readFileSync(f, "utf8");
  const targets: string[] = [];
  for (const m of text.matchAll(/(?:import|export)\s[^;]*?from\s+["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g)) {
    const t = resolveImport(f, (m[1] ?? m[2])!);
    if (t) targets.push(t);
  }
  edges.set(f, targets);
}

describe("the house", () => {
  it("every module has an index.ts, and modules import each other only through it", () => {
    const modules = [...new Set(files.map(moduleOf).filter(Boolean))];
    expect(modules.filter((m) => !existsSync(join(SRC, m, "index.ts")))).toEqual([]);
    const internal: string[] = [];
    for (const [f, targets] of edges) {
      for (const t of targets) {
        const a = moduleOf(f), b = moduleOf(t);
        if (b && a !== b && t !== join(SRC, b, "index.ts")) internal.push(`${relative(SRC, f)} -> ${relative(SRC, t)} (import ../${b}/index.js instead)`);
      }
    }
    expect(internal).toEqual([]);
  });

  it("imports follow the layering", () => {
    const wrong: string[] = [];
    for (const [f, targets] of edges) {
      const a = moduleOf(f);
      if (!a) continue;
      for (const t of targets) {
        const b = moduleOf(t);
        if (!b || a === b || b === "core") continue;
        const allowed = ALLOWED[a];
        if (!allowed) wrong.push(`${a}: a module the layering does not name (add it to ALLOWED with what it may import)`);
        else if (!allowed.includes("*") && !allowed.includes(b)) wrong.push(`${relative(SRC, f)} -> ${relative(SRC, t)}: ${a} may not import ${b}`);
      }
    }
    expect([...new Set(wrong)]).toEqual([]);
  });

  it("has no import circle among the files of src/", () => {
    let index = 0;
    const stack: string[] = [], onStack = new Set<string>(), idx = new Map<string, number>(), low = new Map<string, number>();
    const circles: string[][] = [];
    const strong = (v: string) => {
      idx.set(v, index); low.set(v, index); index++; stack.push(v); onStack.add(v);
      for (const w of edges.get(v) ?? []) {
        if (!idx.has(w)) { strong(w); low.set(v, Math.min(low.get(v)!, low.get(w)!)); }
        else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
      }
      if (low.get(v) === idx.get(v)) {
        const c: string[] = [];
        let w: string;
        do { w = stack.pop()!; onStack.delete(w); c.push(relative(SRC, w)); } while (w !== v);
        if (c.length > 1) circles.push(c);
      }
    };
    for (const f of files) if (!idx.has(f)) strong(f);
    expect(circles).toEqual([]);
  });
});
