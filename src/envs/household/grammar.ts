/**
 * The TextWorld text grammar (`.twl2`) of the ALFWorld games: parsing and derivation.
 *
 * A grammar file has a top-level `grammar :: """{json}"""` block of rules and `action Name {...}`
 * blocks with a command `template`, a `feedback` symbol and their own rules. A rule is a list of
 * alternatives `{condition?, rhs}`; the first whose condition holds is used. In a rhs, `#sym#` expands
 * a rule, `{o.name}` prints an attribute of a bound entity (`+` concatenates, `or` falls back), and
 * `[{expr | condition}]` lists `expr` for every binding of the condition's unbound variables, joined
 * with the grammar's list separators (or "nothing").
 *
 * This file only turns rules into text over a `FactState`; it does not decide what actions do.
 */
import { FactState, holds, solve, type Binding, type Formula, type TypedVar } from "./pddl.js";

export interface Alternative {
  condition?: string;
  rhs: string;
}

export interface ActionText {
  template: string;
  feedback: string;
}

export interface Grammar {
  rules: Map<string, Alternative[]>;
  /** PDDL action name (lowercase) -> its command template and feedback symbol. */
  actions: Map<string, ActionText>;
}

/** What the grammar needs to know about an entity. */
export interface EntityText {
  id: string;
  name: string;
  indefinite: string;
  definite: string;
}

function addRules(rules: Map<string, Alternative[]>, json: string, where: string): void {
  let parsed: Record<string, Alternative[]>;
  try {
    parsed = JSON.parse(json) as Record<string, Alternative[]>;
  } catch (err) {
    throw new Error(`grammar: the rules of ${where} are not valid JSON (${(err as Error).message})`);
  }
  for (const [name, alts] of Object.entries(parsed)) rules.set(name, alts);
}

/** Parses the text of a `.twl2` grammar (as in `alfred.twl2` or a game's `grammar` field). */
export function parseGrammar(text: string): Grammar {
  const rules = new Map<string, Alternative[]>();
  const actions = new Map<string, ActionText>();
  const firstAction = text.search(/^[ \t]*action\s+\w+\s*\{/m);
  const head = firstAction < 0 ? text : text.slice(0, firstAction);
  const top = /grammar\s*::\s*"""([\s\S]*?)"""/.exec(head);
  if (!top) throw new Error('grammar: no top-level `grammar :: """..."""` block');
  addRules(rules, top[1]!, "the top-level block");
  const blocks = firstAction < 0 ? [] : text.slice(firstAction).split(/^(?=[ \t]*action\s+\w+\s*\{)/m);
  for (const block of blocks) {
    const name = /^\s*action\s+(\w+)/.exec(block)![1]!;
    const template = /template\s*::\s*"((?:[^"\\]|\\.)*)"/.exec(block);
    const feedback = /feedback\s*::\s*"((?:[^"\\]|\\.)*)"/.exec(block);
    if (!template || !feedback) throw new Error(`grammar: action ${name} has no template or no feedback`);
    actions.set(name.toLowerCase(), { template: template[1]!, feedback: feedback[1]! });
    const own = /grammar\s*::\s*"""([\s\S]*?)"""/.exec(block);
    if (own) addRules(rules, own[1]!, `action ${name}`);
  }
  return { rules, actions };
}

/** A grammar condition: `pred(v:type, w:type) & not_pred(...)`, as a PDDL formula and its variables. */
export function parseCondition(text: string): { formula: Formula; vars: TypedVar[] } {
  const vars = new Map<string, string>();
  const fs: Formula[] = [];
  for (const part of text.split("&")) {
    const m = /^\s*(\w+)\(([^)]*)\)\s*$/.exec(part);
    if (!m) throw new Error(`grammar: cannot read the condition "${part.trim()}"`);
    let pred = m[1]!.toLowerCase();
    const negated = pred.startsWith("not_");
    if (negated) pred = pred.slice(4);
    const args = m[2]!
      .split(",")
      .map((a) => a.trim())
      .filter((a) => a !== "")
      .map((a) => {
        const [v, t] = a.split(":").map((x) => x.trim());
        vars.set(v!, t ?? "object");
        return `?${v}`;
      });
    const atom: Formula = { kind: "atom", pred, args };
    fs.push(negated ? { kind: "not", f: atom } : atom);
  }
  return { formula: { kind: "and", fs }, vars: [...vars].map(([name, type]) => ({ name, type })) };
}

export interface DeriveContext {
  state: FactState;
  binding: Binding;
  entity(id: string): EntityText;
}

/** Derives text from a rhs string (or `#symbol#`) in a context. */
export class Deriver {
  private readonly conditions = new Map<string, { formula: Formula; vars: TypedVar[] }>();

  constructor(readonly grammar: Grammar) {}

  private condition(text: string) {
    let c = this.conditions.get(text);
    if (!c) this.conditions.set(text, (c = parseCondition(text)));
    return c;
  }

  /** The first binding (extending ctx's) under which the condition holds, or undefined. */
  private match(text: string, ctx: DeriveContext): Binding | undefined {
    const { formula, vars } = this.condition(text);
    const open = vars.filter((v) => !ctx.binding.has(v.name));
    if (open.length === 0) return holds(ctx.state, formula, ctx.binding) ? ctx.binding : undefined;
    for (const b of solve(ctx.state, open, formula, ctx.binding)) return b;
    return undefined;
  }

  symbol(name: string, ctx: DeriveContext): string {
    const alts = this.grammar.rules.get(name);
    if (!alts) throw new Error(`grammar: no rule "${name}"`);
    for (const alt of alts) {
      if (alt.condition === undefined) return this.derive(alt.rhs, ctx);
      // A condition only selects the alternative: its own matches bind nothing in the rhs, where a
      // list re-enumerates every variable the action did not bind.
      if (this.match(alt.condition, ctx)) return this.derive(alt.rhs, ctx);
    }
    return "";
  }

  derive(text: string, ctx: DeriveContext): string {
    let out = "";
    let i = 0;
    while (i < text.length) {
      const c = text[i]!;
      if (c === "[" && text[i + 1] === "{") {
        const end = matchingBrace(text, i + 1);
        if (end < 0 || text[end + 1] !== "]") {
          out += c;
          i++;
          continue;
        }
        out += this.list(text.slice(i + 2, end), ctx);
        i = end + 2;
      } else if (c === "{") {
        const end = matchingBrace(text, i);
        if (end < 0) {
          out += text.slice(i);
          break;
        }
        out += this.expr(text.slice(i + 1, end), ctx);
        i = end + 1;
      } else if (c === "#") {
        const end = text.indexOf("#", i + 1);
        if (end < 0) {
          out += text.slice(i);
          break;
        }
        out += this.symbol(text.slice(i + 1, end), ctx);
        i = end + 1;
      } else {
        out += c;
        i++;
      }
    }
    return out;
  }

  private list(inner: string, ctx: DeriveContext): string {
    const bar = inner.lastIndexOf("|");
    const expr = inner.slice(0, bar).trim();
    const { formula, vars } = this.condition(inner.slice(bar + 1).trim());
    const open = vars.filter((v) => !ctx.binding.has(v.name));
    const items: string[] = [];
    const seen = new Set<string>();
    const bindings = [...solve(ctx.state, open, formula, ctx.binding)];
    // Listed in the order of the entities' ids, the first listed variable first.
    bindings.sort((x, y) => {
      for (const v of open) {
        const a = x.get(v.name)!;
        const b = y.get(v.name)!;
        if (a !== b) return a < b ? -1 : 1;
      }
      return 0;
    });
    for (const b of bindings) {
      const text = this.expr(expr, { ...ctx, binding: b });
      const k = open.map((v) => b.get(v.name)).join(" ");
      if (seen.has(k)) continue;
      seen.add(k);
      items.push(text);
    }
    if (items.length === 0) return this.grammar.rules.has("list_empty") ? this.symbol("list_empty", ctx) : "nothing";
    if (items.length === 1) return items[0]!;
    const sep = this.grammar.rules.has("list_separator") ? this.symbol("list_separator", ctx) : ", ";
    const last = this.grammar.rules.has("list_last_separator") ? this.symbol("list_last_separator", ctx) : ", and ";
    return items.slice(0, -1).join(sep) + last + items[items.length - 1];
  }

  /** `o.indefinite + ' ' + o.name`, `r.name or r.id`, `#overview(o)#`. */
  private expr(text: string, ctx: DeriveContext): string {
    const options = text.split(/\s+or\s+/);
    for (const option of options) {
      const value = option
        .split("+")
        .map((term) => this.term(term.trim(), ctx))
        .join("");
      if (value !== "") return value;
    }
    return "";
  }

  private term(term: string, ctx: DeriveContext): string {
    if (/^'.*'$/.test(term) || /^".*"$/.test(term)) return term.slice(1, -1);
    if (term.startsWith("#") && term.endsWith("#")) return this.symbol(term.slice(1, -1), ctx);
    const m = /^(\w+)(?:\.(\w+))?$/.exec(term);
    if (!m) return term;
    const id = ctx.binding.get(m[1]!);
    if (id === undefined) throw new Error(`grammar: "${term}" names the unbound variable ${m[1]}`);
    const entity = ctx.entity(id);
    switch (m[2] ?? "name") {
      case "name":
        return entity.name;
      case "id":
        return entity.id;
      case "indefinite":
        return entity.indefinite;
      case "definite":
        return entity.definite;
      default:
        throw new Error(`grammar: unknown attribute in "${term}"`);
    }
  }
}

function matchingBrace(text: string, open: number): number {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === "{") depth++;
    else if (text[i] === "}") {
      depth--;
      if (depth === 0) return i;
    }
  }
  return -1;
}
