/**
 * Procedurally generated retail and airline tasks with difficulty levels, for a curriculum:
 * easy = 1 change, medium = 2-3 changes, hard = 4-6 changes, all for one user, drawn from the database
 * with a seeded generator. Each task has gold actions, an instruction in the benchmark's style
 * ("Your name is ... You want to ...") and no required outputs. A candidate is kept only when its gold
 * replay on a fresh database succeeds at every step (no tool returns an error), so every generated task
 * is solvable. Generation is deterministic in (domain, seed, count, difficulty).
 */
import { Rng } from "../../core/index.js";
import { loadBase, TauDb, type Collections, type Domain } from "./db.js";
import { describeAction } from "./describe.js";
import { num, type PyRecord } from "./pyjson.js";
import type { TauAction, TauTask } from "./tasks.js";
import { runAction } from "./tools.js";

export type Difficulty = "easy" | "medium" | "hard";

export interface GenerateOptions {
  count: number;
  seed: number;
  difficulty: Difficulty | "mixed";
  dbDir?: string;
}

const RANGES: Record<Difficulty, [number, number]> = { easy: [1, 1], medium: [2, 3], hard: [4, 6] };
const LEVELS: Difficulty[] = ["easy", "medium", "hard"];

/** The tasks; throws when the database cannot supply them (say which level to lower). */
export function generateTasks(domain: Domain, options: GenerateOptions): TauTask[] {
  const base = loadBase(domain, options.dbDir);
  const rng = new Rng(options.seed * 7919 + (domain === "retail" ? 1 : 2));
  const tasks: TauTask[] = [];
  let attempts = 0;
  while (tasks.length < options.count) {
    if (++attempts > options.count * 200) {
      throw new Error(`could not generate ${options.count} ${options.difficulty} ${domain} tasks from this database; ask for fewer or an easier level`);
    }
    const level = options.difficulty === "mixed" ? LEVELS[tasks.length % 3]! : options.difficulty;
    const [lo, hi] = RANGES[level];
    const want = rng.range(lo, hi);
    const task = domain === "retail" ? retailTask(base, rng, want) : airlineTask(base, rng, want);
    if (!task || task.actions.length !== want || !replaysCleanly(domain, base, task)) continue;
    tasks.push({ ...task, difficulty: level });
  }
  return tasks;
}

function replaysCleanly(domain: Domain, base: Collections, task: TauTask): boolean {
  const db = new TauDb(domain, base);
  return task.actions.every((a) => !runAction(domain, db, a.name, a.kwargs).startsWith("Error"));
}

function secondPerson(actions: TauAction[]): string {
  return actions.map((a) => `You want to ${describeAction(a).replace(/\bmy\b/g, "your")}.`).join(" ");
}

/** A variant of the same product other than `itemId`, available, or undefined. */
function otherVariant(base: Collections, rng: Rng, productId: string, itemId: string): string | undefined {
  const product = base.products![productId];
  if (!product) return undefined;
  const choices = Object.keys(product.variants).filter((id) => id !== itemId && product.variants[id].available);
  return choices.length > 0 ? rng.pick(choices) : undefined;
}

function nonGiftMethod(user: PyRecord, rng: Rng): string | undefined {
  const ids = Object.keys(user.payment_methods).filter((id) => user.payment_methods[id].source !== "gift_card");
  return ids.length > 0 ? rng.pick(ids) : undefined;
}

function retailOrderActions(base: Collections, rng: Rng, user: PyRecord, orderId: string): TauAction[] {
  const order = base.orders![orderId]!;
  const items = order.items as PyRecord[];
  const distinct = [...new Set(items.map((i) => i.item_id as string))];
  const pickItems = (max: number) => rng.shuffle([...distinct]).slice(0, rng.range(1, Math.min(max, distinct.length)));
  if (order.status === "pending") {
    if (rng.next() < 0.35) return [{ name: "cancel_pending_order", kwargs: { order_id: orderId, reason: rng.pick(["no longer needed", "ordered by mistake"]) } }];
    const out: TauAction[] = [];
    if (rng.next() < 0.5) {
      const other = base.users![rng.pick(Object.keys(base.users!))]!.address;
      out.push({ name: "modify_pending_order_address", kwargs: { order_id: orderId, address1: other.address1, address2: other.address2, city: other.city, state: other.state, country: other.country, zip: other.zip } });
    }
    const current = (order.payment_history as PyRecord[])[0]?.payment_method_id;
    const alternatives = Object.keys(user.payment_methods).filter(
      (id) => id !== current && (user.payment_methods[id].source !== "gift_card" || num(user.payment_methods[id].balance) >= num((order.payment_history as PyRecord[])[0]?.amount ?? 0)),
    );
    if ((order.payment_history as PyRecord[]).length === 1 && alternatives.length > 0 && rng.next() < 0.5) {
      out.push({ name: "modify_pending_order_payment", kwargs: { order_id: orderId, payment_method_id: rng.pick(alternatives) } });
    }
    if (out.length === 0 || rng.next() < 0.5) {
      const chosen = pickItems(2);
      const fresh = chosen.map((id) => otherVariant(base, rng, items.find((i) => i.item_id === id)!.product_id, id));
      const pm = nonGiftMethod(user, rng);
      if (pm && fresh.every((x) => x !== undefined)) {
        out.push({ name: "modify_pending_order_items", kwargs: { order_id: orderId, item_ids: chosen, new_item_ids: fresh, payment_method_id: pm } });
      }
    }
    return out;
  }
  if (order.status === "delivered") {
    const original = (order.payment_history as PyRecord[])[0]?.payment_method_id as string;
    if (rng.next() < 0.5) return [{ name: "return_delivered_order_items", kwargs: { order_id: orderId, item_ids: pickItems(2), payment_method_id: original } }];
    const chosen = pickItems(2);
    const fresh = chosen.map((id) => otherVariant(base, rng, items.find((i) => i.item_id === id)!.product_id, id));
    const pm = user.payment_methods[original]?.source === "gift_card" ? nonGiftMethod(user, rng) : original;
    if (!pm || fresh.some((x) => x === undefined)) return [];
    return [{ name: "exchange_delivered_order_items", kwargs: { order_id: orderId, item_ids: chosen, new_item_ids: fresh, payment_method_id: pm } }];
  }
  return [];
}

function retailTask(base: Collections, rng: Rng, want: number): TauTask | undefined {
  const userId = rng.pick(Object.keys(base.users!));
  const user = base.users![userId]!;
  const actions: TauAction[] = [];
  for (const orderId of rng.shuffle([...(user.orders as string[])])) {
    if (actions.length >= want) break;
    const more = retailOrderActions(base, rng, user, orderId);
    actions.push(...more.slice(0, want - actions.length));
  }
  if (actions.length < want && rng.next() < 0.7) {
    const other = base.users![rng.pick(Object.keys(base.users!))]!.address;
    actions.push({ name: "modify_user_address", kwargs: { user_id: userId, address1: other.address1, address2: other.address2, city: other.city, state: other.state, country: other.country, zip: other.zip } });
  }
  if (actions.length !== want) return undefined;
  const who = rng.next() < 0.5
    ? `Your name is ${user.name.first_name} ${user.name.last_name} and your zip code is ${user.address.zip}.`
    : `Your name is ${user.name.first_name} ${user.name.last_name} and your email is ${user.email}.`;
  return { user_id: userId, instruction: `${who} ${secondPerson(actions)}`, actions, outputs: [], annotator: "generated" };
}

function cardOf(user: PyRecord, rng: Rng): string | undefined {
  const ids = Object.keys(user.payment_methods).filter((id) => user.payment_methods[id].source === "credit_card");
  return ids.length > 0 ? rng.pick(ids) : undefined;
}

function airlineReservationAction(base: Collections, rng: Rng, user: PyRecord, resId: string): TauAction | undefined {
  const res = base.reservations![resId]!;
  const card = cardOf(user, rng);
  const kind = rng.int(4);
  if (kind === 0) return { name: "cancel_reservation", kwargs: { reservation_id: resId } };
  if (!card) return undefined;
  if (kind === 1) {
    const extra = rng.range(1, 2);
    return {
      name: "update_reservation_baggages",
      kwargs: { reservation_id: resId, total_baggages: num(res.total_baggages) + extra, nonfree_baggages: num(res.nonfree_baggages) + rng.range(0, extra), payment_id: card },
    };
  }
  if (kind === 2) {
    const saved = (user.saved_passengers as PyRecord[]) ?? [];
    if (saved.length === 0) return undefined;
    const passengers = (res.passengers as PyRecord[]).map((p) => ({ first_name: p.first_name, last_name: p.last_name, dob: p.dob }));
    const s = rng.pick(saved);
    passengers[0] = { first_name: s.first_name, last_name: s.last_name, dob: s.dob };
    return { name: "update_reservation_passengers", kwargs: { reservation_id: resId, passengers } };
  }
  const cabins = ["basic_economy", "economy", "business"].filter((c) => c !== res.cabin);
  return {
    name: "update_reservation_flights",
    kwargs: { reservation_id: resId, cabin: rng.pick(cabins), flights: (res.flights as PyRecord[]).map((f) => ({ flight_number: f.flight_number, date: f.date })), payment_id: card },
  };
}

function bookAction(base: Collections, rng: Rng, userId: string, user: PyRecord): TauAction | undefined {
  const card = cardOf(user, rng);
  if (!card) return undefined;
  const flight = base.flights![rng.pick(Object.keys(base.flights!))]!;
  const dates = Object.keys(flight.dates).filter((d) => flight.dates[d].status === "available");
  if (dates.length === 0) return undefined;
  const date = rng.pick(dates);
  const cabin = rng.pick(["basic_economy", "economy", "business"]);
  const insurance = rng.pick(["yes", "no"]);
  const bags = rng.range(0, 2);
  const nonfree = rng.range(0, bags);
  const price = num(flight.dates[date].prices[cabin]);
  const total = price + (insurance === "yes" ? 30 : 0) + 50 * nonfree;
  return {
    name: "book_reservation",
    kwargs: {
      user_id: userId,
      origin: flight.origin,
      destination: flight.destination,
      flight_type: "one_way",
      cabin,
      flights: [{ flight_number: flight.flight_number, date }],
      passengers: [{ first_name: user.name.first_name, last_name: user.name.last_name, dob: user.dob }],
      payment_methods: [{ payment_id: card, amount: total }],
      total_baggages: bags,
      nonfree_baggages: nonfree,
      insurance,
    },
  };
}

function airlineTask(base: Collections, rng: Rng, want: number): TauTask | undefined {
  const userId = rng.pick(Object.keys(base.users!));
  const user = base.users![userId]!;
  const actions: TauAction[] = [];
  for (const resId of rng.shuffle([...(user.reservations as string[])])) {
    if (actions.length >= want) break;
    const a = airlineReservationAction(base, rng, user, resId);
    if (a) actions.push(a);
  }
  if (actions.length < want) {
    const b = bookAction(base, rng, userId, user);
    if (b) actions.push(b);
  }
  if (actions.length !== want) return undefined;
  return { user_id: userId, instruction: `Your user id is ${userId}. ${secondPerson(actions)}`, actions, outputs: [], annotator: "generated" };
}
