/**
 * Partial progress toward a household goal, for reward rubrics: how much of the goal holds for the
 * best choice of its objects. The reward stays the goal itself (1 when it holds); progress only tells
 * apart the failures that came closer (took the right object, heated it) from those that did not.
 *
 * A goal is a conjunction of `exists` parts (the object and receptacle to use, by their types) and
 * constraints such as "every receptacle closed". For each `exists` part, its conditions split into
 * static ones (types and affordances: predicates no action changes), which choose the candidates, and
 * dynamic ones (in a receptacle, hot, clean, toggled, held), which are what the agent must bring about.
 * A part's share is the best, over candidate bindings, of its dynamic conditions that hold; an object
 * that should be in a receptacle and is in the agent's hands counts half. Progress is the parts'
 * shares plus the goal as a whole (1 or 0), over the number of parts plus one: below 1 until the goal
 * holds.
 */
import { holds, solve, type Domain, type Effect, type FactState, type Formula, type Problem, type TypedVar } from "./pddl.js";

/** The most candidate bindings looked at per part (the generated and ALFWorld goals have far fewer). */
const MAX_BINDINGS = 20_000;

// Progress is computed after every step of every episode: what depends only on the game is kept.
const dynamicByDomain = new WeakMap<Domain, Set<string>>();
const agentsByProblem = new WeakMap<Problem, string[]>();

/** The predicates some action adds or deletes. */
export function dynamicPredicates(domain: Domain): Set<string> {
  const cached = dynamicByDomain.get(domain);
  if (cached) return cached;
  const out = new Set<string>();
  const visit = (e: Effect): void => {
    if (e.kind === "add" || e.kind === "del") out.add(e.pred);
    else if (e.kind === "and") e.es.forEach(visit);
    else if (e.kind === "when" || e.kind === "forall") visit(e.e);
  };
  for (const a of domain.actions) visit(a.effect);
  dynamicByDomain.set(domain, out);
  return out;
}

function agentsOf(problem: Problem): string[] {
  let agents = agentsByProblem.get(problem);
  if (!agents) agentsByProblem.set(problem, (agents = [...problem.objects].filter(([, type]) => type === "agent").map(([id]) => id)));
  return agents;
}

/** An `exists` part flattened: its variables and its leaf conditions (nested exists and ands opened). */
function flatten(f: Formula, vars: TypedVar[], leaves: Formula[]): void {
  if (f.kind === "exists") {
    vars.push(...f.vars);
    flatten(f.f, vars, leaves);
  } else if (f.kind === "and") {
    for (const g of f.fs) flatten(g, vars, leaves);
  } else {
    leaves.push(f);
  }
}

function partShare(state: FactState, part: Formula, dynamic: ReadonlySet<string>, agents: readonly string[]): number {
  const vars: TypedVar[] = [];
  const leaves: Formula[] = [];
  flatten(part, vars, leaves);
  const isDynamic = (f: Formula) => f.kind === "atom" && dynamic.has(f.pred);
  const goals = leaves.filter(isDynamic) as Array<Extract<Formula, { kind: "atom" }>>;
  if (goals.length === 0) return holds(state, part, new Map()) ? 1 : 0;
  const choice: Formula = { kind: "and", fs: leaves.filter((f) => !isDynamic(f)) };
  let best = 0;
  let seen = 0;
  for (const b of solve(state, vars, choice, new Map())) {
    let met = 0;
    for (const g of goals) {
      if (holds(state, g, b)) met += 1;
      else if (g.pred === "inreceptacle") {
        const object = b.get(g.args[0]!.replace(/^\?/, "")) ?? g.args[0]!;
        if (agents.some((a) => state.has("holds", [a, object]))) met += 0.5;
      }
    }
    best = Math.max(best, met / goals.length);
    if (best === 1 || ++seen >= MAX_BINDINGS) break;
  }
  return best;
}

/** Progress toward the problem's goal in [0, 1]: 1 exactly when the goal holds. */
export function goalProgress(state: FactState, problem: Problem, domain: Domain): number {
  const goal = problem.goal;
  if (holds(state, goal, new Map())) return 1;
  const dynamic = dynamicPredicates(domain);
  const agents = agentsOf(problem);
  const parts = (goal.kind === "and" ? goal.fs : [goal]).filter((f) => f.kind === "exists");
  const shares = parts.map((p) => partShare(state, p, dynamic, agents));
  return shares.reduce((a, x) => a + x, 0) / (parts.length + 1);
}
