/**
 * The PDDL interpreter and the text grammar on small hand-written inputs: parsing, formulas with
 * exists/forall/=, grounding, effects with `when`, ALFWorld's entity names, and grammar lists.
 */
import { describe, expect, it } from "vitest";
import { entityNames } from "../../../src/envs/household/game.js";
import { callToCommand, parseGoldTrajectory } from "../../../src/envs/household/gold.js";
import { Deriver, parseGrammar } from "../../../src/envs/household/grammar.js";
import { applicableActions, applyAction, FactState, holds, parseDomain, parseFormula, parseProblem, parseSExpr } from "../../../src/envs/household/pddl.js";

const domain = parseDomain(`(define (domain d)
  (:action flip :parameters (?x - thing)
    :precondition (and (small ?x))
    :effect (and (when (on ?x) (not (on ?x))) (when (not (on ?x)) (on ?x)) (increase (total-cost) 1))))`);
const problem = parseProblem(`(define (problem p) (:domain d)
  (:objects A_bar_1 B_bar_2 - thing C - thing)
  (:init (small A_bar_1) (small B_bar_2) (on B_bar_2) (= (total-cost) 0))
  (:goal (and (forall (?t - thing) (not (on ?t))) (exists (?u ?v - thing) (and (small ?u) (small ?v) (not (= ?u ?v)))))))`);

describe("pddl", () => {
  it("parses lists, lowercases names and skips comments", () => {
    expect(parseSExpr("(a (B c) ; note\n d)")).toEqual([["a", ["b", "c"], "d"]]);
    expect(() => parseSExpr("(a")).toThrow(/unbalanced/);
  });

  it("grounds, applies conditional effects and evaluates the goal", () => {
    const s = new FactState(problem.objects, problem.init);
    expect(holds(s, problem.goal, new Map())).toBe(false);
    expect(applicableActions(s, domain).map((a) => a.binding.get("x"))).toEqual(["a_bar_1", "b_bar_2"]);
    applyAction(s, applicableActions(s, domain)[1]!);
    expect(s.has("on", ["b_bar_2"])).toBe(false);
    expect(holds(s, problem.goal, new Map())).toBe(true);
    expect(holds(s, parseFormula(parseSExpr("(exists (?t - thing) (on ?t))")[0]!), new Map())).toBe(false);
  });
});

describe("names and grammar", () => {
  it("numbers ids per prefix over their sorted order, from the highest down", () => {
    // Ids arrive lowercased, as the PDDL parser reads them.
    const names = entityNames(["cabinet_bar__plus_01", "cabinet_bar__minus_02", "sink_bar_1_bar_sinkbasin", "sink_bar_2", "agent1"]);
    expect(names.get("cabinet_bar__minus_02")).toBe("cabinet 2");
    expect(names.get("cabinet_bar__plus_01")).toBe("cabinet 1");
    expect(names.get("sink_bar_1_bar_sinkbasin")).toBe("sinkbasin 1");
    expect(names.get("sink_bar_2")).toBe("sink 1");
  });

  it("derives conditional rules and lists with separators", () => {
    const grammar = parseGrammar(`grammar :: """{
      "show": [{"condition": "small(x:thing)", "rhs": "You see [{x.indefinite + ' ' + x.name | small(x:thing)}]."}, {"rhs": "Empty."}],
      "list_separator": [{"rhs": ", "}], "list_last_separator": [{"rhs": ", and "}], "list_empty": [{"rhs": "nothing"}]
    }""";
    action flip { template :: "flip {x}"; feedback :: "#show#"; }`);
    expect(grammar.actions.get("flip")).toEqual({ template: "flip {x}", feedback: "#show#" });
    const s = new FactState(problem.objects, problem.init);
    const d = new Deriver(grammar);
    const ctx = { state: s, binding: new Map(), entity: (id: string) => ({ id, name: id.toUpperCase(), indefinite: "a", definite: "the" }) };
    expect(d.symbol("show", ctx)).toBe("You see a A_BAR_1, and a B_BAR_2.");
    s.delete("small", ["a_bar_1"]);
    s.delete("small", ["b_bar_2"]);
    expect(d.symbol("show", ctx)).toBe("Empty.");
  });

  it("reads gold trajectories into commands", () => {
    expect(callToCommand('take("bowl 1", "countertop 3")')).toBe("take bowl 1 from countertop 3");
    expect(callToCommand('put("bowl 1", "cabinet 1")')).toBe("put bowl 1 in/on cabinet 1");
    expect(callToCommand('goto("toaster 1")')).toBe("go to toaster 1");
    expect(() => callToCommand('fly("x")')).toThrow(/unknown call/);
    const steps = parseGoldTrajectory('Assistant:\n<execute>\nuse("desklamp 1")\n</execute>\n\nObservation:\nYou turn on the desklamp 1.\n');
    expect(steps).toEqual([{ call: 'use("desklamp 1")', command: "use desklamp 1", observation: "You turn on the desklamp 1." }]);
  });
});
