/**
 * Generates new ALFWorld-style houses and tasks of the six task types, as TextWorld-PDDL games (the
 * same JSON as the benchmark's `game.tw-pddl`: the shared `alfred.pddl` domain, a new problem, and the
 * shared `alfred.twl2` grammar with the task line filled in), for training.
 *
 * A house is one room (kitchen, bedroom, bathroom or living room) with receptacles and objects drawn
 * from a small catalog. Difficulty: 1 = few receptacles, nothing closed away, no look-alike objects;
 * 2 = more receptacles, objects may be inside closed ones; 3 = a large room, targets usually closed
 * away, several objects of the target's type scattered about. Every generated game is checked: the
 * scripted (searching) expert must reach its goal within 40 commands, or the draw is repeated. This
 * file does not run episodes.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Rng } from "../../core/index.js";
import { plan } from "./expert.js";
import { Game, Simulator, type GameData } from "./game.js";
import { dataDir, rememberGame, type HouseholdTask, type TaskType } from "./tasks.js";

type Room = "kitchen" | "bedroom" | "bathroom" | "livingroom";

interface ObjectKind {
  type: string;
  props: Array<"cleanable" | "heatable" | "coolable" | "sliceable">;
}

interface ReceptacleKind {
  type: string;
  openable?: boolean;
  /** Object types it can hold; "*" = every pickup-able object of the room. */
  holds: string[] | "*";
  max: number;
}

interface RoomKind {
  receptacles: ReceptacleKind[];
  objects: ObjectKind[];
  lamp?: string;
  lampOn: string[];
}

const food = (type: string): ObjectKind => ({ type, props: ["cleanable", "heatable", "coolable"] });
const dish = (type: string): ObjectKind => ({ type, props: ["cleanable", "heatable", "coolable"] });
const tool = (type: string): ObjectKind => ({ type, props: ["cleanable"] });
const plain = (type: string): ObjectKind => ({ type, props: [] });

const ROOMS: Record<Room, RoomKind> = {
  kitchen: {
    receptacles: [
      { type: "CounterTop", holds: "*", max: 3 },
      { type: "Cabinet", openable: true, holds: "*", max: 6 },
      { type: "Drawer", openable: true, holds: ["Fork", "Spoon", "Knife", "Spatula", "SaltShaker", "PepperShaker", "DishSponge"], max: 3 },
      { type: "Fridge", openable: true, holds: ["Apple", "Bread", "Egg", "Potato", "Tomato", "Lettuce", "Mug", "Cup", "Bowl", "Plate", "Pan", "Pot"], max: 1 },
      { type: "Microwave", openable: true, holds: ["Apple", "Bread", "Egg", "Potato", "Tomato", "Mug", "Cup", "Bowl", "Plate"], max: 1 },
      { type: "SinkBasin", holds: ["Apple", "Egg", "Potato", "Tomato", "Lettuce", "Mug", "Cup", "Bowl", "Plate", "Pan", "Pot", "Fork", "Spoon", "Knife", "Spatula", "DishSponge"], max: 1 },
      { type: "StoveBurner", holds: ["Pan", "Pot"], max: 4 },
      { type: "GarbageCan", holds: ["Apple", "Bread", "Egg", "Potato", "Tomato", "Lettuce", "DishSponge", "SoapBottle"], max: 1 },
      { type: "DiningTable", holds: "*", max: 1 },
      { type: "Shelf", holds: "*", max: 3 },
    ],
    objects: [
      food("Apple"), food("Bread"), food("Egg"), food("Potato"), food("Tomato"),
      { type: "Lettuce", props: ["cleanable", "coolable"] },
      dish("Mug"), dish("Cup"), dish("Bowl"), dish("Plate"),
      { type: "Pan", props: ["cleanable", "coolable"] }, { type: "Pot", props: ["cleanable", "coolable"] },
      tool("Fork"), tool("Spoon"), tool("Knife"), tool("Spatula"), tool("DishSponge"),
      plain("SaltShaker"), plain("PepperShaker"), plain("SoapBottle"),
    ],
    lampOn: [],
  },
  bedroom: {
    receptacles: [
      { type: "Bed", holds: ["Pillow", "Book", "CellPhone", "Laptop", "CD"], max: 1 },
      { type: "Desk", holds: "*", max: 1 },
      { type: "SideTable", holds: "*", max: 2 },
      { type: "Dresser", holds: "*", max: 1 },
      { type: "Drawer", openable: true, holds: ["Book", "CellPhone", "CreditCard", "KeyChain", "Pen", "Pencil", "CD"], max: 6 },
      { type: "Shelf", holds: "*", max: 4 },
      { type: "Safe", openable: true, holds: ["CellPhone", "CreditCard", "KeyChain", "CD", "Watch"], max: 1 },
      { type: "GarbageCan", holds: ["Pen", "Pencil", "CD", "CreditCard"], max: 1 },
    ],
    objects: ["Book", "CellPhone", "CreditCard", "KeyChain", "Pen", "Pencil", "CD", "AlarmClock", "Pillow", "Laptop", "Watch"].map(plain),
    lamp: "DeskLamp",
    lampOn: ["Desk", "SideTable", "Dresser"],
  },
  bathroom: {
    receptacles: [
      { type: "CounterTop", holds: "*", max: 1 },
      { type: "SinkBasin", holds: ["SoapBar", "Cloth", "SprayBottle"], max: 2 },
      { type: "Toilet", holds: ["SoapBar", "Cloth", "SprayBottle", "ToiletPaper", "Candle", "SoapBottle"], max: 1 },
      { type: "Cabinet", openable: true, holds: "*", max: 4 },
      { type: "Drawer", openable: true, holds: ["SoapBar", "Cloth", "Candle"], max: 2 },
      { type: "Shelf", holds: "*", max: 2 },
      { type: "GarbageCan", holds: ["SoapBar", "Cloth", "SprayBottle", "ToiletPaper", "SoapBottle"], max: 1 },
    ],
    objects: [tool("SoapBar"), tool("Cloth"), plain("SprayBottle"), plain("ToiletPaper"), plain("Candle"), plain("SoapBottle")],
    lampOn: [],
  },
  livingroom: {
    receptacles: [
      { type: "Sofa", holds: ["Pillow", "RemoteControl", "Newspaper", "Laptop", "KeyChain", "CreditCard"], max: 1 },
      { type: "ArmChair", holds: ["Pillow", "RemoteControl", "Newspaper", "Laptop", "KeyChain", "CreditCard"], max: 2 },
      { type: "CoffeeTable", holds: "*", max: 1 },
      { type: "SideTable", holds: "*", max: 2 },
      { type: "TVStand", holds: "*", max: 1 },
      { type: "Drawer", openable: true, holds: ["RemoteControl", "KeyChain", "CreditCard", "Newspaper"], max: 4 },
      { type: "Shelf", holds: "*", max: 3 },
      { type: "Safe", openable: true, holds: ["KeyChain", "CreditCard", "Watch"], max: 1 },
    ],
    objects: ["Pillow", "RemoteControl", "Newspaper", "Laptop", "KeyChain", "CreditCard", "Box", "Statue", "Vase", "Watch"].map(plain),
    lamp: "DeskLamp",
    lampOn: ["SideTable", "CoffeeTable", "TVStand"],
  },
};

const ROOMS_FOR: Record<(typeof GENERATED_TYPES)[number], Room[]> = {
  pick_and_place_simple: ["kitchen", "bedroom", "bathroom", "livingroom"],
  pick_clean_then_place_in_recep: ["kitchen", "bathroom"],
  pick_heat_then_place_in_recep: ["kitchen"],
  pick_cool_then_place_in_recep: ["kitchen"],
  look_at_obj_in_light: ["bedroom", "livingroom"],
  pick_two_obj_and_place: ["kitchen", "bedroom", "bathroom", "livingroom"],
};
const GENERATED_TYPES = [
  "pick_and_place_simple",
  "pick_clean_then_place_in_recep",
  "pick_heat_then_place_in_recep",
  "pick_cool_then_place_in_recep",
  "look_at_obj_in_light",
  "pick_two_obj_and_place",
] as const;

export interface GenerateOptions {
  count: number;
  seed: number;
  /** 1-3; when absent, levels cycle 1, 2, 3. */
  difficulty?: 1 | 2 | 3;
  /** Task types to draw from (all six by default); they cycle in order. */
  types?: readonly TaskType[];
}

/** The longest expert episode a generated game may need (the env's time limit is 50 steps). */
const MAX_EXPERT_STEPS = 40;

let sharedText: { domain: string; grammar: string } | undefined;
function sharedGameText(): { domain: string; grammar: string } {
  if (!sharedText) {
    const dir = join(dataDir(), "alfworld");
    try {
      sharedText = { domain: readFileSync(join(dir, "alfred.pddl"), "utf8"), grammar: readFileSync(join(dir, "alfred.twl2"), "utf8") };
    } catch (err) {
      throw new Error(`household generator: cannot read alfred.pddl / alfred.twl2 in ${dir} (${(err as Error).message}); set SINKFLEX_DATA_DIR`);
    }
  }
  return sharedText;
}

/** A position-like id suffix in the ALFWorld style (`_bar__plus_01_dot_25`). */
function idFor(prefix: string, n: number): string {
  return `${prefix}_bar__plus_${String(Math.floor(n / 100)).padStart(2, "0")}_dot_${String(n % 100).padStart(2, "0")}`;
}

interface Placed {
  id: string;
  kind: ReceptacleKind;
  loc: string;
}

/** One generated game: a house, a task and its goal; throws when the draw cannot make the task. */
function drawGame(rng: Rng, type: (typeof GENERATED_TYPES)[number], level: 1 | 2 | 3): { data: GameData; task: string } {
  const roomName = rng.pick(ROOMS_FOR[type]);
  const room = ROOMS[roomName];
  let serial = rng.range(1, 50);
  const nextId = (prefix: string) => idFor(prefix, (serial += rng.range(1, 37)));
  // Receptacles: a few kinds at level 1, most at level 3; the appliances a task needs are always there.
  const needKinds = new Set<string>();
  if (type === "pick_clean_then_place_in_recep") needKinds.add("SinkBasin");
  if (type === "pick_heat_then_place_in_recep") needKinds.add("Microwave");
  if (type === "pick_cool_then_place_in_recep") needKinds.add("Fridge");
  const kinds = rng.shuffle([...room.receptacles]);
  const wanted = [3, 5, room.receptacles.length][level - 1]!;
  const chosen = kinds.filter((k, i) => i < wanted || needKinds.has(k.type));
  if (level === 1) for (const k of chosen) if (k.openable && !needKinds.has(k.type)) chosen.splice(chosen.indexOf(k), 1);
  const receptacles: Placed[] = [];
  let locSerial = rng.range(1, 9);
  const newLoc = () => `loc_bar_${(locSerial += rng.range(1, 5))}_bar_${rng.range(0, 9)}_bar_${rng.range(0, 3)}_bar_${[0, 30, 45, 60][rng.int(4)]}`;
  for (const kind of chosen) {
    const n = level === 1 ? 1 : rng.range(1, Math.min(kind.max, level === 2 ? 2 : kind.max));
    for (let i = 0; i < n; i++) {
      const prefix = kind.type === "SinkBasin" ? "Sink" : kind.type;
      let id = nextId(prefix);
      if (kind.type === "SinkBasin") id += "_bar_SinkBasin";
      receptacles.push({ id, kind, loc: newLoc() });
    }
  }
  const canHold = (r: ReceptacleKind, otype: string) => r.holds === "*" || r.holds.includes(otype);
  const objectKinds = room.objects;
  const facts: string[] = [];
  const objects = new Map<string, string>([["agent1", "agent"]]);
  const start = `loc_bar_${(locSerial += 3)}_bar_${rng.range(0, 9)}_bar_0_bar_30`;
  facts.push(`(atLocation agent1 ${start})`);
  for (const r of receptacles) {
    objects.set(r.id, "receptacle");
    facts.push(`(receptacleType ${r.id} ${r.kind.type}Type)`, `(receptacleAtLocation ${r.id} ${r.loc})`);
    if (r.kind.openable) facts.push(`(openable ${r.id})`);
  }
  for (const rk of new Set(receptacles.map((r) => r.kind))) {
    for (const ok of objectKinds) if (canHold(rk, ok.type)) facts.push(`(canContain ${rk.type}Type ${ok.type}Type)`);
  }
  const placeObject = (ok: ObjectKind, where: Placed[]): string => {
    const r = rng.pick(where);
    const id = nextId(ok.type);
    objects.set(id, "object");
    facts.push(`(objectType ${id} ${ok.type}Type)`, `(inReceptacle ${id} ${r.id})`, `(objectAtLocation ${id} ${r.loc})`, `(pickupable ${id})`);
    for (const p of ok.props) facts.push(`(${p} ${id})`);
    return id;
  };
  const holders = (otype: string, exclude?: string) => receptacles.filter((r) => canHold(r.kind, otype) && r.kind.type !== exclude);

  // The task's object and target.
  const transforms: Partial<Record<TaskType, { prop: ObjectKind["props"][number]; appliance: string }>> = {
    pick_clean_then_place_in_recep: { prop: "cleanable", appliance: "SinkBasin" },
    pick_heat_then_place_in_recep: { prop: "heatable", appliance: "Microwave" },
    pick_cool_then_place_in_recep: { prop: "coolable", appliance: "Fridge" },
  };
  const transform = transforms[type]?.prop;
  const appliance = transforms[type]?.appliance;
  const eligible = objectKinds.filter((o) => (!transform || o.props.includes(transform)) && holders(o.type, appliance).length >= 2);
  if (eligible.length === 0) throw new Error("no eligible object");
  const target = rng.pick(eligible);
  let targetRecep: Placed | undefined;
  let lampType: string | undefined;
  if (type === "look_at_obj_in_light") {
    lampType = room.lamp!;
    const spots = receptacles.filter((r) => room.lampOn.includes(r.kind.type));
    if (spots.length === 0) throw new Error("no place for a lamp");
    const spot = rng.pick(spots);
    const lamp = nextId(lampType);
    objects.set(lamp, "object");
    facts.push(`(objectType ${lamp} ${lampType}Type)`, `(inReceptacle ${lamp} ${spot.id})`, `(objectAtLocation ${lamp} ${spot.loc})`, `(toggleable ${lamp})`);
  } else {
    targetRecep = rng.pick(holders(target.type, appliance));
  }
  // Where the task objects start: not in the target; at level 3, inside closed receptacles when possible.
  const sources = holders(target.type).filter((r) => r !== targetRecep && (!appliance || r.kind.type !== appliance));
  if (sources.length === 0) throw new Error("no place to start from");
  const closed = sources.filter((r) => r.kind.openable);
  const startFrom = level === 3 && closed.length > 0 ? closed : level === 1 ? sources.filter((r) => !r.kind.openable) : sources;
  if (startFrom.length === 0) throw new Error("no open place to start from");
  const copies = type === "pick_two_obj_and_place" ? 2 : 1;
  for (let i = 0; i < copies + (level === 3 ? rng.range(1, 2) : 0); i++) placeObject(target, startFrom);
  // Distractors: other objects anywhere they fit.
  const distractors = [2, 6, 14][level - 1]!;
  for (let i = 0; i < distractors; i++) {
    const ok = rng.pick(objectKinds.filter((o) => level === 3 || o.type !== target.type));
    const where = holders(ok.type);
    if (where.length > 0) placeObject(ok, where);
  }

  const lower = target.type.toLowerCase();
  const recepName = targetRecep ? targetRecep.kind.type.toLowerCase() : "";
  const rt = targetRecep ? `${targetRecep.kind.type}Type` : "";
  let goal: string;
  let task: string;
  switch (type) {
    case "pick_and_place_simple":
      goal = `(and (exists (?r - receptacle) (exists (?o - object) (and (inReceptacle ?o ?r) (objectType ?o ${target.type}Type) (receptacleType ?r ${rt})))) (forall (?re - receptacle) (not (opened ?re))))`;
      task = `put some ${lower} on ${recepName}.`;
      break;
    case "pick_two_obj_and_place":
      goal = `(and (exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 ${target.type}Type) (receptacleType ?r ${rt}) (inReceptacle ?o1 ?r) (exists (?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o2 ${target.type}Type) (receptacleType ?r ${rt}) (inReceptacle ?o2 ?r)))))))`;
      task = `put two ${lower} in ${recepName}.`;
      break;
    case "look_at_obj_in_light":
      goal = `(and (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?ot ${lampType}Type) (toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r))) (exists (?o - object ?a - agent) (and (objectType ?o ${target.type}Type) (holds ?a ?o))))`;
      task = `look at ${lower} under the ${lampType!.toLowerCase()}.`;
      break;
    default: {
      const wording: Record<string, [string, string]> = { cleanable: ["isClean", "clean"], heatable: ["isHot", "heat"], coolable: ["isCool", "cool"] };
      const [pred, verb] = wording[transform!]!;
      goal = `(and (exists (?r - receptacle) (exists (?o - object) (and (${transform} ?o) (objectType ?o ${target.type}Type) (receptacleType ?r ${rt}) (${pred} ?o) (inReceptacle ?o ?r)))))`;
      task = `${verb} some ${lower} and put it in ${recepName}.`;
    }
  }
  const objectLines = [...objects].map(([id, t]) => `        ${id} - ${t}`).join("\n");
  const typeLines = [...new Set([...objectKinds.map((o) => o.type), ...(lampType ? [lampType] : [])])].map((t) => `        ${t}Type - otype`);
  const rtypeLines = [...new Set(receptacles.map((r) => r.kind.type))].map((t) => `        ${t}Type - rtype`);
  const locLines = [...new Set([start, ...receptacles.map((r) => r.loc)])].map((l) => `        ${l} - location`);
  const problem = [
    `(define (problem generated_${type})`,
    "(:domain alfred)",
    "(:objects",
    objectLines,
    ...typeLines,
    ...rtypeLines,
    ...locLines,
    ")",
    "(:init",
    ...facts.map((f) => `        ${f}`),
    ")",
    `(:goal ${goal})`,
    ")",
  ].join("\n");
  const shared = sharedGameText();
  const grammar = shared.grammar.replace("Your task is to: UNKNOWN GOAL.", `Your task is to: ${task}`);
  return { data: { pddl_domain: shared.domain, pddl_problem: problem, grammar, solvable: true }, task };
}

/** The level of the `index`-th task: fixed, or cycling 1, 2, 3 over rounds of the task types. */
function levelOf(options: GenerateOptions, index: number, typeCount: number): 1 | 2 | 3 {
  return options.difficulty ?? ((1 + (Math.floor(index / typeCount) % 3)) as 1 | 2 | 3);
}

/**
 * The `index`-th generated task; the same options and index always give the same game. Task types
 * cycle in order; a draw is kept only if its goal does not already hold and the scripted expert solves it.
 */
export function generateTask(options: Omit<GenerateOptions, "count">, index: number): HouseholdTask {
  const types = (options.types ?? GENERATED_TYPES).filter((t): t is (typeof GENERATED_TYPES)[number] => (GENERATED_TYPES as readonly string[]).includes(t));
  if (types.length === 0) throw new Error(`household generator: no generable task type among ${JSON.stringify(options.types)}`);
  const type = types[index % types.length]!;
  const level = levelOf(options as GenerateOptions, index, types.length);
  const rng = new Rng((options.seed * 1_000_003 + index * 7919 + level) >>> 0);
  const id = `gen/${options.seed}/${options.difficulty ?? "mixed"}/${index}`;
  for (let attempt = 0; attempt < 50; attempt++) {
    let drawn: { data: GameData; task: string };
    try {
      drawn = drawGame(rng, type, level);
    } catch {
      continue; // this room cannot host the task: draw again
    }
    const game = new Game(drawn.data, id);
    if (new Simulator(game).won()) continue;
    try {
      // The searching expert must finish well within the registered 50-step limit.
      if (plan(game).length > MAX_EXPERT_STEPS) continue;
    } catch {
      continue;
    }
    const task: HouseholdTask = { id, taskType: type, data: drawn.data, difficulty: level };
    rememberGame(task, game);
    return task;
  }
  throw new Error(`household generator: could not make a solvable ${type} game at level ${level} (seed ${options.seed}, index ${index})`);
}

/** `count` generated tasks (see `generateTask`). */
export function generateTasks(options: GenerateOptions): HouseholdTask[] {
  return Array.from({ length: options.count }, (_, i) => generateTask(options, i));
}
