/**
 * A small PDDL interpreter for the ALFWorld (TextWorld-PDDL) games: parses a domain and a problem,
 * keeps the set of true facts, evaluates formulas (and, or, not, =, exists, forall), grounds the
 * applicable actions by joining their preconditions against the facts, and applies effects (with
 * `when`). Names are lowercased, as PDDL planners do.
 *
 * It is not a planner and not a general PDDL implementation: numeric fluents (`total-cost`) are parsed
 * and ignored, and there is no type hierarchy (the ALFWorld domain has none).
 */

export type SExpr = string | SExpr[];

/** Parses PDDL text into nested lists of lowercased atoms; `;` starts a comment, commas are spaces. */
export function parseSExpr(text: string): SExpr[] {
  const tokens = text
    .replace(/;[^\n]*/g, " ")
    .replace(/,/g, " ")
    .replace(/\(/g, " ( ")
    .replace(/\)/g, " ) ")
    .split(/\s+/)
    .filter((t) => t !== "");
  const stack: SExpr[][] = [[]];
  for (const tok of tokens) {
    if (tok === "(") {
      const list: SExpr[] = [];
      stack[stack.length - 1]!.push(list);
      stack.push(list);
    } else if (tok === ")") {
      if (stack.length === 1) throw new Error("PDDL: unbalanced ')'");
      stack.pop();
    } else {
      stack[stack.length - 1]!.push(tok.toLowerCase());
    }
  }
  if (stack.length !== 1) throw new Error("PDDL: unbalanced '(' (the text ends inside a list)");
  return stack[0]!;
}

export interface TypedVar {
  name: string;
  type: string;
}

export type Formula =
  | { kind: "true" }
  | { kind: "atom"; pred: string; args: string[] }
  | { kind: "eq"; a: string; b: string }
  | { kind: "not"; f: Formula }
  | { kind: "and"; fs: Formula[] }
  | { kind: "or"; fs: Formula[] }
  | { kind: "exists"; vars: TypedVar[]; f: Formula }
  | { kind: "forall"; vars: TypedVar[]; f: Formula };

export type Effect =
  | { kind: "add"; pred: string; args: string[] }
  | { kind: "del"; pred: string; args: string[] }
  | { kind: "and"; es: Effect[] }
  | { kind: "when"; cond: Formula; e: Effect }
  | { kind: "forall"; vars: TypedVar[]; e: Effect }
  | { kind: "none" };

export interface ActionSchema {
  name: string;
  params: TypedVar[];
  precondition: Formula;
  effect: Effect;
}

export interface Domain {
  actions: ActionSchema[];
}

export interface Problem {
  /** Object id -> type. */
  objects: Map<string, string>;
  init: Array<[string, string[]]>;
  goal: Formula;
}

/** Parses `?a - agent ?l ?m - location` into typed variables (untyped ones get type "object"). */
export function parseTypedList(items: SExpr[]): TypedVar[] {
  const out: TypedVar[] = [];
  let pending: string[] = [];
  for (let i = 0; i < items.length; i++) {
    const item = items[i];
    if (typeof item !== "string") throw new Error(`PDDL: expected a name in a typed list, got a list`);
    if (item === "-") {
      const type = items[++i];
      if (typeof type !== "string") throw new Error("PDDL: expected a type after '-'");
      for (const name of pending) out.push({ name: stripVar(name), type });
      pending = [];
    } else {
      pending.push(item);
    }
  }
  for (const name of pending) out.push({ name: stripVar(name), type: "object" });
  return out;
}

function stripVar(name: string): string {
  return name.startsWith("?") ? name.slice(1) : name;
}

function termOf(x: SExpr): string {
  if (typeof x !== "string") throw new Error("PDDL: expected a term, got a list");
  return x.startsWith("?") ? x : x;
}

export function parseFormula(x: SExpr): Formula {
  if (typeof x === "string") throw new Error(`PDDL: expected a formula, got "${x}"`);
  if (x.length === 0) return { kind: "true" };
  const head = x[0];
  if (typeof head !== "string") throw new Error("PDDL: a formula starts with a name");
  switch (head) {
    case "and":
      return { kind: "and", fs: x.slice(1).map(parseFormula) };
    case "or":
      return { kind: "or", fs: x.slice(1).map(parseFormula) };
    case "not":
      return { kind: "not", f: parseFormula(x[1]!) };
    case "=":
      return { kind: "eq", a: termOf(x[1]!), b: termOf(x[2]!) };
    case "exists":
    case "forall":
      return { kind: head, vars: parseTypedList(x[1] as SExpr[]), f: parseFormula(x[2]!) };
    default:
      return { kind: "atom", pred: head, args: x.slice(1).map(termOf) };
  }
}

function parseEffect(x: SExpr): Effect {
  if (typeof x === "string") throw new Error(`PDDL: expected an effect, got "${x}"`);
  if (x.length === 0) return { kind: "none" };
  const head = x[0] as string;
  switch (head) {
    case "and":
      return { kind: "and", es: x.slice(1).map(parseEffect) };
    case "not": {
      const inner = x[1] as SExpr[];
      return { kind: "del", pred: inner[0] as string, args: inner.slice(1).map(termOf) };
    }
    case "when":
      return { kind: "when", cond: parseFormula(x[1]!), e: parseEffect(x[2]!) };
    case "forall":
      return { kind: "forall", vars: parseTypedList(x[1] as SExpr[]), e: parseEffect(x[2]!) };
    case "increase":
    case "decrease":
    case "assign":
      return { kind: "none" };
    default:
      return { kind: "add", pred: head, args: x.slice(1).map(termOf) };
  }
}

function section(list: SExpr[], key: string): SExpr[] | undefined {
  return list.find((s): s is SExpr[] => Array.isArray(s) && s[0] === key);
}

export function parseDomain(text: string): Domain {
  const top = parseSExpr(text)[0];
  if (!Array.isArray(top) || top[0] !== "define") throw new Error("PDDL domain: expected (define (domain ...) ...)");
  const actions: ActionSchema[] = [];
  for (const item of top) {
    if (!Array.isArray(item) || item[0] !== ":action") continue;
    const name = item[1] as string;
    let params: TypedVar[] = [];
    let precondition: Formula = { kind: "true" };
    let effect: Effect = { kind: "none" };
    for (let i = 2; i < item.length; i += 2) {
      const key = item[i];
      const value = item[i + 1]!;
      if (key === ":parameters") params = parseTypedList(value as SExpr[]);
      else if (key === ":precondition") precondition = parseFormula(value);
      else if (key === ":effect") effect = parseEffect(value);
    }
    actions.push({ name, params, precondition, effect });
  }
  if (actions.length === 0) throw new Error("PDDL domain: no (:action ...) found");
  return { actions };
}

export function parseProblem(text: string): Problem {
  const top = parseSExpr(text)[0];
  if (!Array.isArray(top) || top[0] !== "define") throw new Error("PDDL problem: expected (define (problem ...) ...)");
  const objects = new Map<string, string>();
  for (const v of parseTypedList((section(top, ":objects") ?? [":objects"]).slice(1))) objects.set(v.name, v.type);
  const init: Array<[string, string[]]> = [];
  for (const fact of (section(top, ":init") ?? [":init"]).slice(1)) {
    if (!Array.isArray(fact) || fact[0] === "=") continue; // numeric fluents are ignored
    init.push([fact[0] as string, fact.slice(1) as string[]]);
  }
  const goalSection = section(top, ":goal");
  if (!goalSection) throw new Error("PDDL problem: no (:goal ...)");
  return { objects, init, goal: parseFormula(goalSection[1]!) };
}

export type Binding = ReadonlyMap<string, string>;

const key = (args: readonly string[]) => args.join(" ");

/** The set of true facts, indexed by predicate, with the typed objects of the problem. */
export class FactState {
  private readonly facts = new Map<string, Map<string, string[]>>();
  /** pred -> argument position -> value -> the facts' keys with that value there. */
  private readonly index = new Map<string, Array<Map<string, Set<string>>>>();
  /** Type -> sorted object ids of that type. */
  private readonly byType = new Map<string, string[]>();

  constructor(readonly objectTypes: ReadonlyMap<string, string>, init: Iterable<[string, string[]]> = []) {
    for (const [id, type] of objectTypes) {
      let list = this.byType.get(type);
      if (!list) this.byType.set(type, (list = []));
      list.push(id);
    }
    for (const list of this.byType.values()) list.sort();
    for (const [pred, args] of init) this.add(pred, args);
  }

  clone(): FactState {
    const copy = new FactState(this.objectTypes);
    for (const [pred, m] of this.facts) for (const args of m.values()) copy.add(pred, args);
    return copy;
  }

  objectsOf(type: string): readonly string[] {
    return this.byType.get(type) ?? [];
  }

  has(pred: string, args: readonly string[]): boolean {
    return this.facts.get(pred)?.has(key(args)) ?? false;
  }

  add(pred: string, args: readonly string[]): void {
    let m = this.facts.get(pred);
    if (!m) this.facts.set(pred, (m = new Map()));
    const k = key(args);
    if (m.has(k)) return;
    m.set(k, [...args]);
    let idx = this.index.get(pred);
    if (!idx) this.index.set(pred, (idx = []));
    args.forEach((value, i) => {
      const at = (idx[i] ??= new Map());
      let keys = at.get(value);
      if (!keys) at.set(value, (keys = new Set()));
      keys.add(k);
    });
  }

  delete(pred: string, args: readonly string[]): void {
    const k = key(args);
    if (!this.facts.get(pred)?.delete(k)) return;
    const idx = this.index.get(pred)!;
    args.forEach((value, i) => idx[i]?.get(value)?.delete(k));
  }

  /** The argument tuples of `pred`; with `position`/`value`, only those with that value there. */
  tuples(pred: string, position?: number, value?: string): Iterable<string[]> {
    const m = this.facts.get(pred);
    if (!m) return [];
    if (position === undefined) return m.values();
    const keys = this.index.get(pred)?.[position]?.get(value!);
    if (!keys) return [];
    return [...keys].map((k) => m.get(k)!);
  }

  /** Every fact, as [pred, args], in a stable order. */
  all(): Array<[string, string[]]> {
    const out: Array<[string, string[]]> = [];
    for (const pred of [...this.facts.keys()].sort()) {
      for (const k of [...this.facts.get(pred)!.keys()].sort()) out.push([pred, this.facts.get(pred)!.get(k)!]);
    }
    return out;
  }

  /** A canonical string of the facts (for equality checks and determinism tests). */
  signature(): string {
    return this.all()
      .map(([p, a]) => `${p}(${a.join(",")})`)
      .join(";");
  }
}

function resolve(term: string, b: Binding): string | undefined {
  if (term.startsWith("?")) return b.get(term.slice(1));
  return term;
}

/** True when `f` holds in `s` under the binding (every free variable must be bound). */
export function holds(s: FactState, f: Formula, b: Binding): boolean {
  switch (f.kind) {
    case "true":
      return true;
    case "atom": {
      const args = f.args.map((t) => resolve(t, b));
      if (args.some((a) => a === undefined)) throw new Error(`PDDL: unbound variable in (${f.pred} ${f.args.join(" ")})`);
      return s.has(f.pred, args as string[]);
    }
    case "eq":
      return resolve(f.a, b) === resolve(f.b, b);
    case "not":
      return !holds(s, f.f, b);
    case "and":
      return f.fs.every((g) => holds(s, g, b));
    case "or":
      return f.fs.some((g) => holds(s, g, b));
    case "exists": {
      for (const _ of solve(s, f.vars, f.f, b)) return true;
      return false;
    }
    case "forall": {
      for (const _ of solve(s, f.vars, { kind: "not", f: f.f }, b)) return false;
      return true;
    }
  }
}

function positiveAtoms(f: Formula, out: Array<{ pred: string; args: string[] }> = []) {
  if (f.kind === "atom") out.push(f);
  else if (f.kind === "and") for (const g of f.fs) positiveAtoms(g, out);
  return out;
}

/**
 * Every extension of `b` to `vars` under which `f` holds. Variables are bound by joining the positive
 * atoms of `f`'s top-level conjunction with the facts (most-bound atom first), the rest by type.
 */
export function* solve(s: FactState, vars: readonly TypedVar[], f: Formula, b: Binding): Generator<Binding> {
  // A disjunction is solved branch by branch, an existential by solving for its variables too; both
  // keep only the distinct bindings of `vars`.
  const lifted = liftExists(f, new Set([...vars.map((v) => v.name), ...b.keys()]));
  if (f.kind === "or" || lifted) {
    const seen = new Set<string>();
    const branches = f.kind === "or" ? f.fs.map((g) => ({ vars: [...vars], f: g })) : [{ vars: [...vars, ...lifted!.vars], f: lifted!.f }];
    for (const branch of branches) {
      for (const found of solve(s, branch.vars, branch.f, b)) {
        const k = vars.map((v) => found.get(v.name)).join(" ");
        if (seen.has(k)) continue;
        seen.add(k);
        const projected = new Map(b);
        for (const v of vars) projected.set(v.name, found.get(v.name)!);
        yield projected;
      }
    }
    return;
  }
  yield* solveConjunction(s, vars, f, b);
}

/** `exists` at the top of `f` or of its top-level conjunction, pulled out (when its names are fresh). */
function liftExists(f: Formula, taken: Set<string>): { vars: TypedVar[]; f: Formula } | undefined {
  if (f.kind === "exists" && f.vars.every((v) => !taken.has(v.name))) return { vars: f.vars, f: f.f };
  if (f.kind !== "and") return undefined;
  const vars: TypedVar[] = [];
  const fs: Formula[] = [];
  let changed = false;
  for (const g of f.fs) {
    if (g.kind === "exists" && g.vars.every((v) => !taken.has(v.name) && !vars.some((w) => w.name === v.name))) {
      vars.push(...g.vars);
      fs.push(g.f);
      changed = true;
    } else fs.push(g);
  }
  return changed ? { vars, f: { kind: "and", fs } } : undefined;
}

function* solveConjunction(s: FactState, vars: readonly TypedVar[], f: Formula, b: Binding): Generator<Binding> {
  const atoms = positiveAtoms(f);
  const types = new Map(vars.map((v) => [v.name, v.type]));
  function* rec(cur: Map<string, string>): Generator<Binding> {
    const unbound = vars.filter((v) => !cur.has(v.name));
    if (unbound.length === 0) {
      if (holds(s, f, cur)) yield new Map(cur);
      return;
    }
    // The atom with an unbound search variable and the most bound arguments.
    let best: { pred: string; args: string[] } | undefined;
    let bestBound = -1;
    for (const atom of atoms) {
      let bound = 0;
      let open = false;
      for (const t of atom.args) {
        if (t.startsWith("?") && !cur.has(t.slice(1))) {
          if (types.has(t.slice(1))) open = true;
          else {
            open = false;
            bound = -2;
            break;
          }
        } else bound++;
      }
      if (open && bound > bestBound) {
        best = atom;
        bestBound = bound;
      }
    }
    if (best) {
      let position: number | undefined;
      let value: string | undefined;
      best.args.forEach((t, i) => {
        if (position !== undefined) return;
        const v = t.startsWith("?") ? cur.get(t.slice(1)) : t;
        if (v !== undefined) [position, value] = [i, v];
      });
      for (const tuple of s.tuples(best.pred, position, value)) {
        if (tuple.length !== best.args.length) continue;
        const next = new Map(cur);
        let ok = true;
        for (let i = 0; i < tuple.length && ok; i++) {
          const t = best.args[i]!;
          const value = tuple[i]!;
          if (!t.startsWith("?")) ok = t === value;
          else {
            const name = t.slice(1);
            const have = next.get(name);
            if (have !== undefined) ok = have === value;
            else {
              const type = types.get(name)!;
              ok = s.objectTypes.get(value) === type;
              next.set(name, value);
            }
          }
        }
        if (ok) yield* rec(next);
      }
      return;
    }
    const v = unbound[0]!;
    for (const id of s.objectsOf(v.type)) {
      const next = new Map(cur);
      next.set(v.name, id);
      yield* rec(next);
    }
  }
  yield* rec(new Map(b));
}

function collectEffects(s: FactState, e: Effect, b: Binding, adds: Array<[string, string[]]>, dels: Array<[string, string[]]>) {
  switch (e.kind) {
    case "none":
      return;
    case "add":
    case "del": {
      const args = e.args.map((t) => resolve(t, b));
      if (args.some((a) => a === undefined)) throw new Error(`PDDL: unbound variable in effect (${e.pred} ...)`);
      (e.kind === "add" ? adds : dels).push([e.pred, args as string[]]);
      return;
    }
    case "and":
      for (const x of e.es) collectEffects(s, x, b, adds, dels);
      return;
    case "when":
      if (holds(s, e.cond, b)) collectEffects(s, e.e, b, adds, dels);
      return;
    case "forall":
      for (const inner of solve(s, e.vars, { kind: "true" }, b)) collectEffects(s, e.e, inner, adds, dels);
      return;
  }
}

export interface GroundAction {
  schema: ActionSchema;
  binding: Binding;
}

/** Every applicable grounding of every action, in domain order, then binding order. */
export function applicableActions(s: FactState, domain: Domain): GroundAction[] {
  const out: GroundAction[] = [];
  for (const schema of domain.actions) {
    for (const binding of solve(s, schema.params, schema.precondition, new Map())) out.push({ schema, binding });
  }
  return out;
}

/** Applies an action's effects: conditions are read on the state before, deletes then adds. */
export function applyAction(s: FactState, action: GroundAction): void {
  const adds: Array<[string, string[]]> = [];
  const dels: Array<[string, string[]]> = [];
  collectEffects(s, action.schema.effect, action.binding, adds, dels);
  for (const [p, a] of dels) s.delete(p, a);
  for (const [p, a] of adds) s.add(p, a);
}
