/**
 * One ALFWorld game as a text simulator: the PDDL domain and problem of a TextWorld-PDDL game file,
 * its grammar, the names the player sees ("countertop 3"), and `step(command)` that applies the
 * matching admissible action and answers with the grammar's feedback, or "Nothing happens.".
 *
 * Entity names follow ALFWorld's convention: an id such as `CounterTop_bar__plus_00_dot_93...` is
 * named by its prefix ("countertop", "sinkbasin" for sink basins) and a number; the ids of one prefix,
 * sorted, are numbered from the highest down. This file holds no episode bookkeeping (see env.ts).
 */
import { Deriver, parseGrammar, type EntityText, type Grammar } from "./grammar.js";
import { applicableActions, applyAction, FactState, holds, parseDomain, parseProblem, type Domain, type GroundAction, type Problem } from "./pddl.js";

/** The JSON of a `game.tw-pddl` file. */
export interface GameData {
  pddl_domain: string;
  pddl_problem: string;
  grammar: string;
  solvable?: boolean;
  walkthrough?: string[];
}

export const NOTHING_HAPPENS = "Nothing happens.";

/** ALFWorld's entity names: prefix + number, numbered per prefix over the sorted ids. */
export function entityNames(ids: Iterable<string>): Map<string, string> {
  const sorted = [...new Set(ids)].sort();
  const prefixOf = (id: string): string | undefined => {
    const at = id.indexOf("_bar_");
    if (at < 0) return undefined;
    return id.slice(0, at) + (id.includes("basin") ? "basin" : "");
  };
  const counts = new Map<string, number>();
  for (const id of sorted) {
    const p = prefixOf(id);
    if (p !== undefined) counts.set(p, (counts.get(p) ?? 0) + 1);
  }
  const names = new Map<string, string>();
  for (const id of sorted) {
    const p = prefixOf(id);
    if (p === undefined) {
      names.set(id, `${id} `);
      continue;
    }
    const n = counts.get(p)!;
    counts.set(p, n - 1);
    names.set(id, `${p} ${n}`);
  }
  return names;
}

/**
 * Parsed domains by their text. Every ALFWorld game carries the same domain (and every generated one
 * the same copy), so it is parsed once; a Domain is never changed after parsing.
 */
const parsedDomains = new Map<string, Domain>();
const PARSED_DOMAINS = 8;

function domainOf(text: string): Domain {
  let domain = parsedDomains.get(text);
  if (!domain) {
    domain = parseDomain(text);
    parsedDomains.set(text, domain);
    if (parsedDomains.size > PARSED_DOMAINS) parsedDomains.delete(parsedDomains.keys().next().value!);
  }
  return domain;
}

/** The parsed, immutable parts of a game; `Simulator` instances share it. */
export class Game {
  readonly domain: Domain;
  readonly problem: Problem;
  readonly grammar: Grammar;
  readonly deriver: Deriver;
  readonly entities: Map<string, EntityText>;
  /** The task line, e.g. "clean some bowl and put it in cabinet." */
  readonly taskText: string;

  constructor(readonly data: GameData, readonly source = "game") {
    for (const field of ["pddl_domain", "pddl_problem", "grammar"] as const) {
      if (typeof data[field] !== "string") throw new Error(`${source}: the game has no "${field}" text; is it a TextWorld-PDDL (.tw-pddl) file?`);
    }
    this.domain = domainOf(data.pddl_domain);
    this.problem = parseProblem(data.pddl_problem);
    this.grammar = parseGrammar(data.grammar);
    this.deriver = new Deriver(this.grammar);
    const ids = new Set<string>();
    for (const [, args] of this.problem.init) for (const a of args) ids.add(a);
    this.entities = new Map();
    for (const [id, name] of entityNames(ids)) this.entities.set(id, { id, name, indefinite: "a", definite: "the" });
    const task = this.grammar.rules.get("task")?.[0]?.rhs ?? "";
    this.taskText = task.replace(/^Your task is to:\s*/, "");
  }

  entity(id: string): EntityText {
    const e = this.entities.get(id);
    if (e) return e;
    return { id, name: id, indefinite: "a", definite: "the" };
  }

  /** The id of an entity by its shown name ("bowl 1"), or undefined. */
  idOf(name: string): string | undefined {
    for (const e of this.entities.values()) if (e.name === name) return e.id;
    return undefined;
  }
}

/** A command the player may type now, and the action it runs. */
export interface Admissible {
  command: string;
  action: GroundAction;
}

/** The live state of one playthrough of a game. */
export class Simulator {
  readonly state: FactState;
  private admissibleCache: Admissible[] | undefined;

  constructor(readonly game: Game) {
    this.state = new FactState(game.problem.objects, game.problem.init);
  }

  private ctx(binding: ReadonlyMap<string, string>) {
    return { state: this.state, binding, entity: (id: string) => this.game.entity(id) };
  }

  /** The opening text: "-= Welcome to TextWorld, ALFRED! =-\n\n<look>\n\n<task>". */
  intro(): string {
    return this.game.deriver.symbol("intro", this.ctx(new Map()));
  }

  won(): boolean {
    return holds(this.state, this.game.problem.goal, new Map());
  }

  /** The admissible commands (sorted, unique) with their actions. */
  admissible(): Admissible[] {
    if (!this.admissibleCache) this.admissibleCache = this.ground(this.game.domain.actions);
    return this.admissibleCache;
  }

  /** The admissible commands of the given action schemas, sorted, first grounding of each command kept. */
  private ground(schemas: Domain["actions"]): Admissible[] {
    const byCommand = new Map<string, Admissible>();
    for (const action of applicableActions(this.state, { actions: schemas })) {
      const text = this.game.grammar.actions.get(action.schema.name);
      if (!text) continue;
      const command = this.formatCommand(text.template, action);
      if (!byCommand.has(command)) byCommand.set(command, { command, action });
    }
    return [...byCommand.values()].sort((a, b) => (a.command < b.command ? -1 : a.command > b.command ? 1 : 0));
  }

  /** The schemas whose command template could produce `typed` (by the template's fixed first word). */
  private schemasFor(typed: string): Domain["actions"] {
    const verb = typed.split(" ")[0]!;
    const putLike = ["put", "move", "place"].includes(verb);
    return this.game.domain.actions.filter((schema) => {
      const template = this.game.grammar.actions.get(schema.name)?.template.toLowerCase();
      if (!template) return false;
      const first = template.split(" ")[0]!;
      return first === verb || (putLike && (first === "put" || first === "move"));
    });
  }

  admissibleCommands(): string[] {
    return this.admissible().map((a) => a.command);
  }

  private formatCommand(template: string, action: GroundAction): string {
    // `{o}` is the name of the entity bound to o; the rest is grammar (e.g. go to's list).
    const plain = template.replace(/\{(\w+)\}/g, (_, v: string) => {
      const id = action.binding.get(v);
      return id === undefined ? `{${v}}` : this.game.entity(id).name;
    });
    return this.game.deriver.derive(plain, this.ctx(action.binding)).trim();
  }

  /**
   * Runs one command. It must be one of the admissible commands (spacing and case aside; `put X in Y`,
   * `put X on Y` and `move X to Y` are accepted for the grammar's put command); anything else changes
   * nothing and answers "Nothing happens.".
   */
  step(command: string): { feedback: string; valid: boolean } {
    const found = this.find(command);
    if (!found) return { feedback: NOTHING_HAPPENS, valid: false };
    applyAction(this.state, found.action);
    this.admissibleCache = undefined;
    const text = this.game.grammar.actions.get(found.action.schema.name)!;
    const feedback = this.game.deriver.derive(text.feedback, this.ctx(found.action.binding));
    return { feedback, valid: true };
  }

  /** The admissible command a typed command stands for, or undefined. */
  find(command: string): Admissible | undefined {
    const typed = normalize(command);
    // Only the actions whose command starts with the same word need grounding (unless all are known).
    const all = this.admissibleCache ?? this.ground(this.schemasFor(typed));
    const exact = all.find((a) => normalize(a.command) === typed);
    if (exact) return exact;
    const put = /^(?:put|move|place) (.+?) (?:in\/on|into|in|on|to) (.+)$/.exec(typed);
    if (put) {
      return all.find((a) => {
        const m = /^(?:put|move) (.+?) (?:in\/on|into|in|on|to) (.+)$/.exec(normalize(a.command));
        return m !== null && m[1] === put[1] && m[2] === put[2];
      });
    }
    return undefined;
  }
}

function normalize(command: string): string {
  return command.trim().toLowerCase().replace(/\s+/g, " ");
}
