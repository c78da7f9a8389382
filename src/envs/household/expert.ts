/**
 * The household suite's scripted expert. It reads the goal formula of the game (which object types,
 * which receptacle type, clean/heat/cool/slice, a lamp to switch on, one or two objects), plans on a
 * private copy of the game state — find the object, go to it, open what is closed, take it,
 * transform it, put it, close what it opened — and plays the plan one `act` call per turn.
 *
 * It is not a general PDDL planner: it solves the six ALFWorld task types (and sliced variants); on a
 * game it cannot plan, `plan` throws with the reason.
 */
import type { AgentTurn, ChatObservation, Rng } from "../../core/index.js";
import type { Expert } from "../suite.js";
import { Simulator, type Game } from "./game.js";
import type { Formula } from "./pddl.js";

interface ObjectNeed {
  otype: string;
  props: Set<string>;
  /** The goal's receptacle variable it must end in, if any. */
  recepVar?: string;
  held: boolean;
}

interface GoalNeeds {
  objects: ObjectNeed[];
  /** Receptacle variable -> its receptacle type. */
  receptacles: Map<string, string>;
  /** The lamp type to switch on (look_at_obj_in_light). */
  lamp?: string;
}

function collectAtoms(f: Formula, out: Array<{ pred: string; args: string[] }> = []) {
  switch (f.kind) {
    case "atom":
      out.push(f);
      break;
    case "and":
    case "or":
      f.fs.forEach((g) => collectAtoms(g, out));
      break;
    case "exists":
      collectAtoms(f.f, out);
      break;
    default:
      break; // negations and forall (e.g. "every receptacle closed") are satisfied by closing what we open
  }
  return out;
}

/** What the goal asks for, read from its atoms. */
export function analyzeGoal(goal: Formula): GoalNeeds {
  const atoms = collectAtoms(goal);
  const otypes = new Map<string, string>();
  const receptacles = new Map<string, string>();
  for (const a of atoms) {
    if (a.pred === "objecttype") otypes.set(a.args[0]!, a.args[1]!);
    if (a.pred === "receptacletype") receptacles.set(a.args[0]!, a.args[1]!);
  }
  let lampVar: string | undefined;
  for (const a of atoms) if (a.pred === "istoggled") lampVar = a.args[0];
  const objects: ObjectNeed[] = [];
  for (const [v, otype] of otypes) {
    if (v === lampVar) continue;
    const props = new Set<string>();
    let recepVar: string | undefined;
    let held = false;
    for (const a of atoms) {
      if (a.args[0] === v && ["isclean", "ishot", "iscool", "issliced"].includes(a.pred)) props.add(a.pred);
      if (a.pred === "inreceptacle" && a.args[0] === v) recepVar = a.args[1];
      if (a.pred === "holds" && a.args[1] === v) held = true;
    }
    if (recepVar === undefined && !held) continue;
    objects.push({ otype, props, recepVar, held });
  }
  return { objects, receptacles, lamp: lampVar ? otypes.get(lampVar) : undefined };
}

export interface PlanOptions {
  /**
   * true (default): search for objects as a player would — visit receptacles that can hold the wanted
   * type, then the others, opening closed ones, remembering what was seen — and act on what the
   * observations showed. false: go straight to the objects (the shortest plan, using the hidden state).
   */
  explore?: boolean;
}

/** Plans the commands that reach the goal of `game`, checking each on a private simulator. */
export function plan(game: Game, planOptions: PlanOptions = {}): string[] {
  const explore = planOptions.explore ?? true;
  const sim = new Simulator(game);
  const s = sim.state;
  const commands: string[] = [];
  const name = (id: string) => game.entity(id).name;
  const agent = s.objectsOf("agent")[0]!;
  const run = (command: string) => {
    // Recorded as the game's own wording (a grammar may say "move X to Y" for put).
    const found = sim.find(command);
    if (!found) throw new Error(`household expert: "${command}" is not admissible in ${game.source}`);
    sim.step(found.command);
    commands.push(found.command);
  };
  const first = <T>(it: Iterable<T>): T | undefined => {
    for (const x of it) return x;
    return undefined;
  };
  const here = () => first(s.tuples("atlocation", 0, agent))?.[1];
  const locationOf = (r: string) => first(s.tuples("receptacleatlocation", 0, r))?.[1];
  const containerOf = (o: string) => first(s.tuples("inreceptacle", 0, o))?.[1];
  const byName = (a: string, b: string) => name(a).localeCompare(name(b), "en", { numeric: true });
  const ofType = (pred: "objecttype" | "receptacletype", type: string) =>
    [...s.tuples(pred)].filter((t) => t[1] === type).map((t) => t[0]!).sort(byName);
  const goTo = (r: string) => {
    if (here() !== locationOf(r)) run(`go to ${name(r)}`);
  };
  const opened: string[] = [];
  const openIfClosed = (r: string) => {
    if (s.has("openable", [r]) && !s.has("opened", [r])) {
      run(`open ${name(r)}`);
      opened.push(r);
    }
  };
  const closeOpened = () => {
    while (opened.length > 0) run(`close ${name(opened.pop()!)}`);
  };
  const fetch = (o: string) => {
    const r = containerOf(o);
    if (!r) throw new Error(`household expert: ${name(o)} is in no receptacle in ${game.source}`);
    goTo(r);
    openIfClosed(r);
    run(`take ${name(o)} from ${name(r)}`);
    closeOpened();
  };
  // What the player has seen: object -> the receptacle it was seen in (updated on every visit).
  const seen = new Map<string, string>();
  const visited = new Set<string>();
  const look = (r: string) => {
    if (s.has("openable", [r]) && !s.has("opened", [r])) return;
    for (const [o, at] of [...seen]) if (at === r) seen.delete(o);
    for (const t of s.tuples("inreceptacle", 1, r)) seen.set(t[0]!, r);
  };
  /**
   * Finds an object that `wanted` accepts: where one was seen already, else by visiting receptacles
   * (those whose type can hold `otype` first) and opening closed ones. Returns it with the agent at its
   * receptacle (opened if needed; the caller closes).
   */
  const locate = (wanted: (o: string) => boolean, otype: string, what: string): { o: string; r: string } => {
    const known = [...seen].filter(([o, r]) => wanted(o) && s.has("inreceptacle", [o, r])).sort((a, b) => byName(a[0], b[0]))[0];
    if (known) {
      goTo(known[1]);
      openIfClosed(known[1]);
      return { o: known[0], r: known[1] };
    }
    const all = [...s.objectsOf("receptacle")].filter((r) => locationOf(r) !== undefined).sort(byName);
    const holds = (r: string) => {
      const rt = first(s.tuples("receptacletype", 0, r))?.[1];
      return rt !== undefined && s.has("cancontain", [rt, otype]);
    };
    for (const r of [...all.filter(holds), ...all.filter((r) => !holds(r))]) {
      if (visited.has(r)) continue;
      visited.add(r);
      goTo(r);
      look(r);
      openIfClosed(r);
      look(r);
      const found = [...s.tuples("inreceptacle", 1, r)].map((t) => t[0]!).filter(wanted).sort(byName)[0];
      if (found) return { o: found, r };
      closeOpened();
    }
    throw new Error(`household expert: searched every receptacle and found no ${what} in ${game.source}`);
  };
  const takeHere = (found: { o: string; r: string }) => {
    run(`take ${name(found.o)} from ${name(found.r)}`);
    closeOpened();
  };
  const putDown = (o: string, r: string) => {
    goTo(r);
    openIfClosed(r);
    run(`put ${name(o)} in/on ${name(r)}`);
    closeOpened();
  };
  const applianceFor: Record<string, string[]> = {
    isclean: ["sinkbasintype", "sinktype"],
    ishot: ["microwavetype"],
    iscool: ["fridgetype"],
  };
  const verb: Record<string, string> = { isclean: "clean", ishot: "heat", iscool: "cool" };

  const needs = analyzeGoal(game.problem.goal);
  if (needs.objects.length === 0) throw new Error(`household expert: no object to move in the goal of ${game.source}`);
  const canContain = (r: string, o: string) => {
    const rt = first(s.tuples("receptacletype", 0, r))?.[1];
    const ot = first(s.tuples("objecttype", 0, o))?.[1];
    return rt !== undefined && ot !== undefined && s.has("cancontain", [rt, ot]);
  };
  // One target receptacle per goal variable, able to hold the object type.
  const targets = new Map<string, string>();
  for (const need of needs.objects) {
    if (!need.recepVar || targets.has(need.recepVar)) continue;
    const rtype = needs.receptacles.get(need.recepVar);
    if (!rtype) throw new Error(`household expert: the goal of ${game.source} does not say the receptacle type`);
    const sample = ofType("objecttype", need.otype)[0];
    const options = ofType("receptacletype", rtype).filter((r) => sample === undefined || canContain(r, sample));
    if (options.length === 0) throw new Error(`household expert: no ${rtype} can hold a ${need.otype} in ${game.source}`);
    targets.set(need.recepVar, options[0]!);
  }

  const used = new Set<string>();
  for (const need of needs.objects) {
    const target = need.recepVar ? targets.get(need.recepVar) : undefined;
    // Objects already in the target come last: one of them serves only if it still needs transforming.
    const usable = (o: string) =>
      !used.has(o) && s.has("objecttype", [o, need.otype]) && s.has("pickupable", [o]) && containerOf(o) !== undefined && (need.props.size > 0 || containerOf(o) !== target);
    let o: string;
    if (explore) {
      if (need.props.has("issliced")) {
        const isKnife = (k: string) => (s.has("objecttype", [k, "knifetype"]) || s.has("objecttype", [k, "butterknifetype"])) && containerOf(k) !== undefined;
        takeHere(locate(isKnife, "knifetype", "knife"));
      }
      const found = locate(usable, need.otype, need.otype.replace(/type$/, ""));
      o = found.o;
      used.add(o);
      if (need.props.has("issliced")) {
        const knife = first(s.tuples("holds", 0, agent))![1]!;
        run(`slice ${name(o)} with ${name(knife)}`);
        run(`put ${name(knife)} in/on ${name(found.r)}`);
      }
      takeHere(found);
    } else {
      const reachable = ofType("objecttype", need.otype).filter(usable);
      const candidates = [...reachable.filter((x) => containerOf(x) !== target), ...reachable.filter((x) => containerOf(x) === target)];
      if (!candidates[0]) throw new Error(`household expert: no ${need.otype} left to take in ${game.source}`);
      o = candidates[0];
      used.add(o);
      if (need.props.has("issliced")) {
        const knife = [...ofType("objecttype", "knifetype"), ...ofType("objecttype", "butterknifetype")].find((k) => containerOf(k) !== undefined);
        if (!knife) throw new Error(`household expert: no knife to slice with in ${game.source}`);
        fetch(knife);
        const at = containerOf(o)!;
        goTo(at);
        openIfClosed(at);
        run(`slice ${name(o)} with ${name(knife)}`);
        run(`put ${name(knife)} in/on ${name(at)}`);
        closeOpened();
      }
      fetch(o);
    }
    for (const prop of ["isclean", "ishot", "iscool"]) {
      if (!need.props.has(prop)) continue;
      const appliance = applianceFor[prop]!.flatMap((t) => ofType("receptacletype", t))[0];
      if (!appliance) throw new Error(`household expert: no appliance to make the object ${prop.slice(2)} in ${game.source}`);
      goTo(appliance);
      run(`${verb[prop]} ${name(o)} with ${name(appliance)}`);
    }
    if (target) putDown(o, target);
  }
  if (needs.lamp) {
    const lampType = needs.lamp;
    let lamp: string | undefined;
    if (explore) {
      lamp = locate((l) => s.has("objecttype", [l, lampType]) && s.has("toggleable", [l]), lampType, lampType.replace(/type$/, "")).o;
    } else {
      lamp = ofType("objecttype", lampType).find((l) => containerOf(l) !== undefined);
      if (!lamp) throw new Error(`household expert: no ${lampType} on a receptacle in ${game.source}`);
      goTo(containerOf(lamp)!);
    }
    run(`use ${name(lamp)}`);
    closeOpened();
  }
  if (!sim.won()) throw new Error(`household expert: the plan for ${game.source} does not reach the goal (${commands.join("; ")})`);
  return commands;
}

/**
 * A command a learner typically gets wrong in the current state, one the game answers with "Nothing
 * happens." (so nothing changes): taking an object the goal names from the receptacle here when it is
 * not there (or the receptacle is closed), or going to a receptacle the room does not have (the next
 * number of a kind it has). Undefined when neither exists.
 */
export function householdMistake(sim: Simulator, rng: Rng): string | undefined {
  const s = sim.state;
  const name = (id: string) => sim.game.entity(id).name;
  const agent = s.objectsOf("agent")[0];
  const here = agent === undefined ? undefined : [...s.tuples("atlocation", 0, agent)][0]?.[1];
  const wanted = new Set(analyzeGoal(sim.game.problem.goal).objects.map((o) => o.otype));
  const takes: string[] = [];
  for (const [r, at] of s.tuples("receptacleatlocation")) {
    if (at !== here) continue;
    for (const [o, type] of s.tuples("objecttype")) if (wanted.has(type!)) takes.push(`take ${name(o!)} from ${name(r!)}`);
  }
  const highest = new Map<string, number>();
  for (const r of s.objectsOf("receptacle")) {
    const m = /^(.*) (\d+)$/.exec(name(r));
    if (m) highest.set(m[1]!, Math.max(highest.get(m[1]!) ?? 0, Number(m[2])));
  }
  const goes = [...highest].map(([kind, n]) => `go to ${kind} ${n + 1}`);
  const invalid = (cs: string[]) => cs.filter((c) => sim.find(c) === undefined);
  // Most of a small policy's wrong commands are takes where the object is not; then made-up receptacles.
  const wrongTakes = rng.next() < 0.7 ? invalid(takes) : [];
  const pool = wrongTakes.length > 0 ? wrongTakes : invalid(goes);
  return pool.length > 0 ? rng.pick(pool) : undefined;
}

/** Plays a precomputed plan through the `act` tool, one command per turn, and makes `householdMistake`s when asked. */
export class HouseholdExpert implements Expert {
  private next = 0;
  /** The game as the expert has played it so far: made at the first mistake asked for, then kept in step. */
  private sim: { at: number; sim: Simulator } | undefined;

  constructor(private readonly commands: string[], private readonly game: Game) {}

  act(_obs: ChatObservation): AgentTurn {
    const command = this.commands[this.next];
    if (command === undefined) return { content: "I have no further actions.", toolCalls: [] };
    this.next++;
    return actTurn(command, `call_${this.next}`);
  }

  mistake(rng: Rng): AgentTurn | undefined {
    this.sim ??= { at: 0, sim: new Simulator(this.game) };
    while (this.sim.at < this.next) this.sim.sim.step(this.commands[this.sim.at++]!);
    const command = householdMistake(this.sim.sim, rng);
    return command === undefined ? undefined : actTurn(command, `call_${this.next}_wrong`);
  }
}

/** An assistant turn that runs one command through `act`. */
export function actTurn(command: string, id: string): AgentTurn {
  return { content: "", toolCalls: [{ id, name: "act", arguments: JSON.stringify({ command }) }] };
}

/**
 * The expert's play stopped one step short of the goal: every command of the plan but the last, then
 * no further action, so the game ends in a wrong final state (`envs replay --wrong`).
 */
export function wrongActions(game: Game): Expert {
  return new HouseholdExpert(plan(game).slice(0, -1), game);
}
