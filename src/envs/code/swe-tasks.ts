/**
 * SWE-style tasks: small generated repositories (Python or JavaScript) with one planted bug (a
 * template from bugs.ts), visible tests that fail because of it, hidden tests that decide the reward,
 * and an issue text. Three difficulty levels:
 *   1  one module and its tests; the issue names the function and a failing call;
 *   2  the buggy module among two or three correct ones, all tested; the issue names a failing call;
 *   3  as 2, plus a dispatcher module (`api`: run(op, *args)); the visible tests and the issue only go
 *      through the dispatcher, so the agent has to trace the call to the buggy module.
 * Every expected value comes from the template's reference implementation; visible tests include at
 * least one call that exposes the bug, hidden tests several. Deterministic in (seed, count, levels,
 * languages). This file builds files as text; it runs nothing.
 */
import { Rng } from "../../core/index.js";
import { BUG_TEMPLATES, camel, fixedSource, type BugTemplate, type Json, type Lang } from "./bugs.js";

export type SweLevel = 1 | 2 | 3;

export interface SweTask {
  id: string;
  kind: "swe";
  lang: Lang;
  level: SweLevel;
  bug: string;
  issue: string;
  /** The repository as the agent gets it. */
  files: Record<string, string>;
  /** Hidden test files, added (on a fresh copy with the agent's sources) when scoring. */
  hiddenTests: Record<string, string>;
  /** The edit that fixes the bug (for the scripted expert). */
  fix: { path: string; search: string; replace: string };
  /** The command that runs the visible tests; the hidden ones run with `hiddenTestCommand`. */
  testCommand: string;
  hiddenTestCommand: string;
}

const PACKAGES = ["toolkit", "utilkit", "mathbox", "helpers", "corelib"];

interface Fn {
  template: BugTemplate;
  name: string;
  buggy: boolean;
}

const pyLiteral = (v: Json): string => {
  if (v === null) return "None";
  if (v === true) return "True";
  if (v === false) return "False";
  if (Array.isArray(v)) return `[${v.map(pyLiteral).join(", ")}]`;
  if (typeof v === "object") return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyLiteral(x)}`).join(", ")}}`;
  return JSON.stringify(v);
};
const jsLiteral = (v: Json): string => JSON.stringify(v);

const same = (a: Json, b: Json) => JSON.stringify(a) === JSON.stringify(b);
const exposes = (t: BugTemplate, args: Json[]) => !same(t.correct(...args), t.buggy(...args));

/** `n` argument lists: the edges that expose the bug first (at least `exposing` of them), then random ones. */
function cases(t: BugTemplate, r: Rng, n: number, exposing: number): Json[][] {
  const out: Json[][] = [];
  const edges = r.shuffle(t.edges.filter((a) => exposes(t, a)));
  out.push(...edges.slice(0, exposing));
  for (let tries = 0; out.length < n && tries < 200; tries++) {
    const a = tries < 100 ? t.sample(r) : t.edges[tries % t.edges.length]!;
    if (!out.some((x) => same(x, a))) out.push(a);
  }
  if (out.filter((a) => exposes(t, a)).length < Math.min(exposing, 1)) throw new Error(`bug template ${t.id}: no test case exposes the bug`);
  return out;
}

function callText(lang: Lang, name: string, args: Json[]): string {
  const lit = lang === "python" ? pyLiteral : jsLiteral;
  return `${lang === "python" ? name : camel(name)}(${args.map(lit).join(", ")})`;
}

/** A test file for functions (or for the dispatcher `run`, when `viaApi`). */
function testFile(lang: Lang, pkg: string, fns: { fn: Fn; args: Json[][] }[], viaApi: boolean, dir: string): string {
  if (lang === "python") {
    const imports = viaApi ? [`from ${pkg}.api import run`] : fns.map(({ fn }) => `from ${pkg}.${fn.template.module} import ${fn.name}`);
    const lines = ["import unittest", "", ...imports, "", ""];
    for (const { fn, args } of fns) {
      lines.push(`class Test${camel(`_${fn.name}`)}(unittest.TestCase):`);
      args.forEach((a, i) => {
        const expected = pyLiteral(fn.template.correct(...a));
        const call = viaApi ? `run(${[JSON.stringify(fn.name), ...a.map(pyLiteral)].join(", ")})` : callText("python", fn.name, a);
        lines.push(`    def test_${fn.name}_${i + 1}(self):`, `        self.assertEqual(${call}, ${expected})`, "");
      });
      lines.push("");
    }
    return `${lines.join("\n").replace(/\n+$/, "")}\n`;
  }
  const imports = viaApi ? [`import { run } from "../src/api.js";`] : fns.map(({ fn }) => `import { ${camel(fn.name)} } from "../src/${fn.template.module}.js";`);
  const lines = ['import test from "node:test";', 'import assert from "node:assert/strict";', ...imports, ""];
  for (const { fn, args } of fns) {
    args.forEach((a, i) => {
      const call = viaApi ? `run(${[JSON.stringify(fn.name), ...a.map(jsLiteral)].join(", ")})` : callText("javascript", fn.name, a);
      lines.push(`test(${JSON.stringify(`${dir}: ${fn.name} #${i + 1}`)}, () => {`, `  assert.deepEqual(${call}, ${jsLiteral(fn.template.correct(...a))});`, "});", "");
    });
  }
  return `${lines.join("\n").replace(/\n+$/, "")}\n`;
}

function apiModule(lang: Lang, fns: Fn[]): string {
  if (lang === "python") {
    const imports = fns.map((f) => `from .${f.template.module} import ${f.name}`);
    const table = fns.map((f) => `    ${JSON.stringify(f.name)}: ${f.name},`);
    return [
      '"""One entry point for every operation of the package: run(op, *args)."""',
      ...imports,
      "",
      "OPERATIONS = {",
      ...table,
      "}",
      "",
      "",
      "def run(op, *args):",
      '    """Run the operation named `op` on the arguments."""',
      "    if op not in OPERATIONS:",
      '        raise KeyError(f"unknown operation {op}")',
      "    return OPERATIONS[op](*args)",
      "",
    ].join("\n");
  }
  const imports = fns.map((f) => `import { ${camel(f.name)} } from "./${f.template.module}.js";`);
  const table = fns.map((f) => `  ${f.name}: ${camel(f.name)},`);
  return [
    "// One entry point for every operation of the package: run(op, ...args).",
    ...imports,
    "",
    "const OPERATIONS = {",
    ...table,
    "};",
    "",
    "/** Runs the operation named `op` on the arguments. */",
    "export function run(op, ...args) {",
    "  const f = OPERATIONS[op];",
    "  if (!f) {",
    "    throw new Error(`unknown operation ${op}`);",
    "  }",
    "  return f(...args);",
    "}",
    "",
  ].join("\n");
}

function functionSource(lang: Lang, fn: Fn): string {
  const src = fn.buggy ? fn.template[lang].buggy : fixedSource(fn.template, lang);
  return src.replace(/NAME/g, lang === "python" ? fn.name : camel(fn.name));
}

export const SWE_TEST_COMMANDS: Record<Lang, { visible: string; hidden: string }> = {
  python: { visible: "python3 -m unittest discover -s tests -t . -v", hidden: "python3 -m unittest discover -s hidden_tests -t . -v" },
  javascript: { visible: "node --test --test-reporter=spec tests/", hidden: "node --test --test-reporter=spec hidden_tests/" },
};

export function generateSweTask(index: number, options: { seed: number; level: SweLevel; lang: Lang; bug?: string }): SweTask {
  const r = new Rng(options.seed).fork(index);
  const { level, lang } = options;
  const template = options.bug ? BUG_TEMPLATES.find((t) => t.id === options.bug) : BUG_TEMPLATES[index % BUG_TEMPLATES.length];
  if (!template) throw new RangeError(`no bug template "${options.bug}"; the templates are ${BUG_TEMPLATES.map((t) => t.id).join(", ")}`);
  const pkg = r.pick(PACKAGES);
  const buggy: Fn = { template, name: r.pick(template.names), buggy: true };
  const others = r.shuffle(BUG_TEMPLATES.filter((t) => t !== template)).slice(0, level === 1 ? 0 : r.range(2, 3));
  const fns: Fn[] = r.shuffle([buggy, ...others.map((t) => ({ template: t, name: r.pick(t.names), buggy: false }))]);

  const files: Record<string, string> = {};
  const srcPath = (f: Fn) => (lang === "python" ? `${pkg}/${f.template.module}.py` : `src/${f.template.module}.js`);
  if (lang === "python") {
    files[`${pkg}/__init__.py`] = `"""${pkg}: small helpers."""\n`;
    files["tests/__init__.py"] = "";
  } else {
    files["package.json"] = `${JSON.stringify({ name: pkg, version: "1.0.0", type: "module", scripts: { test: "node --test tests/" } }, null, 2)}\n`;
  }
  for (const f of fns) files[srcPath(f)] = functionSource(lang, f);
  if (level === 3) files[lang === "python" ? `${pkg}/api.py` : "src/api.js"] = apiModule(lang, fns);

  const visibleCases = fns.map((fn) => ({ fn, args: fn.buggy ? cases(fn.template, r, 3, 1) : cases(fn.template, r, 2, 0) }));
  const testName = (module: string) => (lang === "python" ? `tests/test_${module}.py` : `tests/${module}.test.js`);
  if (level === 3) files[testName("api")] = testFile(lang, pkg, visibleCases, true, "tests");
  else for (const vc of visibleCases) files[testName(vc.fn.template.module)] = testFile(lang, pkg, [vc], false, "tests");

  const hiddenCases = fns.map((fn) => ({ fn, args: cases(fn.template, r, fn.buggy ? 8 : 4, fn.buggy ? 3 : 0) }));
  const hiddenTests: Record<string, string> = {};
  const hiddenName = (lang === "python" ? "hidden_tests/test_hidden.py" : "hidden_tests/hidden.test.js");
  if (lang === "python") hiddenTests["hidden_tests/__init__.py"] = "";
  hiddenTests[hiddenName] = testFile(lang, pkg, hiddenCases, false, "hidden");
  if (level === 3) hiddenTests[lang === "python" ? "hidden_tests/test_hidden_api.py" : "hidden_tests/api.test.js"] = testFile(lang, pkg, hiddenCases, true, "hidden");

  const failing = visibleCases.find((c) => c.fn.buggy)!.args.find((a) => exposes(template, a))!;
  const expected = (lang === "python" ? pyLiteral : jsLiteral)(template.correct(...failing));
  const shown = level === 3 ? `run(${[JSON.stringify(buggy.name), ...failing.map(lang === "python" ? pyLiteral : jsLiteral)].join(", ")})` : callText(lang, buggy.name, failing);
  const what = level === 1 ? `\`${lang === "python" ? buggy.name : camel(buggy.name)}\` ${template.contract}, but ` : "";
  files["README.md"] = `# ${pkg}\n\nSmall ${lang === "python" ? "Python" : "JavaScript"} helpers.\n\nRun the tests with \`${SWE_TEST_COMMANDS[lang].visible}\`.\n`;
  const issue = `${what}\`${shown}\` does not return \`${expected}\`. Find the bug in the repository and fix it so that the tests pass.`;

  const fixFile = srcPath(buggy);
  const s = template[lang];
  const fixedName = lang === "python" ? buggy.name : camel(buggy.name);
  const search = s.search.replace(/NAME/g, fixedName);
  if (files[fixFile]!.split(search).length !== 2) throw new Error(`bug template ${template.id} (${lang}): the fix's search text is not unique in ${fixFile}`);
  return {
    id: `swe-${lang === "python" ? "py" : "js"}-${index}`,
    kind: "swe",
    lang,
    level,
    bug: template.id,
    issue: issue.charAt(0).toUpperCase() + issue.slice(1),
    files,
    hiddenTests,
    fix: { path: fixFile, search, replace: s.replace.replace(/NAME/g, fixedName) },
    testCommand: SWE_TEST_COMMANDS[lang].visible,
    hiddenTestCommand: SWE_TEST_COMMANDS[lang].hidden,
  };
}

export interface SweTaskOptions {
  count?: number;
  seed?: number;
  levels?: readonly number[];
  languages?: readonly Lang[];
}

/** `count` tasks cycling over the languages and levels (and, through the index, the bug templates). */
export function generateSweTasks(options: SweTaskOptions = {}): SweTask[] {
  const count = options.count ?? 48;
  const levels = options.levels ?? [1, 2, 3];
  const languages = options.languages ?? ["python", "javascript"];
  for (const l of levels) if (![1, 2, 3].includes(l)) throw new RangeError(`swe: level ${l} does not exist; levels are 1, 2 and 3`);
  for (const l of languages) if (l !== "python" && l !== "javascript") throw new RangeError(`swe: language "${l}" is not supported; use "python" or "javascript"`);
  if (!levels.length || !languages.length) throw new RangeError("swe: options.levels and options.languages must not be empty");
  const out: SweTask[] = [];
  for (let i = 0; i < count; i++) {
    out.push(generateSweTask(i, { seed: options.seed ?? 1, level: levels[i % levels.length] as SweLevel, lang: languages[Math.floor(i / levels.length) % languages.length]! }));
  }
  return out;
}
