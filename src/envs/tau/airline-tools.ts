/**
 * The airline domain's 14 tools over its users / flights / reservations collections, with the
 * benchmark's behaviour: the same checks in the same order, the same error strings and JSON dumps.
 * Like the original, booking and flight changes do not update seat counts, and a flight change does
 * not rewrite the reservation's cabin.
 *
 * Each tool is a plain function `(db, args) -> string`; `tools.ts` wires them into a `ToolEnv`.
 */
import { calculate } from "./calculate.js";
import type { TauDb } from "./db.js";
import { num, pyAdd, pyClone, pyDumps, pyMul, pyNumStr, pySet, pySub, type PyRecord } from "./pyjson.js";
import type { ToolImpl } from "./retail-tools.js";

/** The airports the airline serves, in the benchmark's order, with their cities. */
const AIRPORTS: [string, string][] = [
  ["SFO", "San Francisco"], ["JFK", "New York"], ["LAX", "Los Angeles"], ["ORD", "Chicago"], ["DFW", "Dallas"],
  ["DEN", "Denver"], ["SEA", "Seattle"], ["ATL", "Atlanta"], ["MIA", "Miami"], ["BOS", "Boston"],
  ["PHX", "Phoenix"], ["IAH", "Houston"], ["LAS", "Las Vegas"], ["MCO", "Orlando"], ["EWR", "Newark"],
  ["CLT", "Charlotte"], ["MSP", "Minneapolis"], ["DTW", "Detroit"], ["PHL", "Philadelphia"], ["LGA", "New York"],
];

/** Certificate ids tried in turn by `send_certificate`. */
const CERTIFICATE_IDS = [3221322, 9852466, 7502997, 4235468, 6146234];

const NEW_RESERVATION_IDS = ["HATHAT", "HATHAU", "HATHAV"];

function hasKey(obj: PyRecord, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key);
}

/** Fills a requested flight segment from the database, or says why it cannot be flown. */
function priceSegment(db: TauDb, flight: PyRecord, cabin: string, passengers: number): string | undefined {
  const number = flight.flight_number as string;
  const data = db.peek("flights", number);
  if (!data) return `Error: flight ${number} not found`;
  if (!hasKey(data.dates, flight.date)) return `Error: flight ${number} not found on date ${flight.date}`;
  const day = data.dates[flight.date];
  if (day.status !== "available") return `Error: flight ${number} not available on date ${flight.date}`;
  if (num(day.available_seats[cabin]) < passengers) return `Error: not enough seats on flight ${number}`;
  flight.price = day.prices[cabin];
  flight.origin = data.origin;
  flight.destination = data.destination;
  return undefined;
}

function sum(values: unknown[]): number {
  return values.reduce<number>((acc, v) => pyAdd(acc, v), 0);
}

export const AIRLINE_TOOLS: Record<string, ToolImpl> = {
  book_reservation: (db, args) => {
    const { user_id, origin, destination, flight_type, cabin, flights, passengers, payment_methods, total_baggages, nonfree_baggages, insurance } = args;
    const user = db.get("users", user_id);
    if (!user) return "Error: user not found";
    let reservationId = NEW_RESERVATION_IDS[0]!;
    for (const id of NEW_RESERVATION_IDS) {
      reservationId = id;
      if (!db.has("reservations", id)) break;
    }
    const reservation: PyRecord = {
      reservation_id: reservationId,
      user_id,
      origin,
      destination,
      flight_type,
      cabin,
      flights: pyClone(flights),
      passengers,
      payment_history: payment_methods,
      created_at: "2024-05-15T15:00:00",
      total_baggages,
      nonfree_baggages,
      insurance,
    };
    let total: number = 0;
    for (const flight of reservation.flights as PyRecord[]) {
      const error = priceSegment(db, flight, cabin, passengers.length);
      if (error) return error;
      total = pyAdd(total, pyMul(flight.price, passengers.length));
    }
    if (insurance === "yes") total = pyAdd(total, 30 * passengers.length);
    total = pyAdd(total, pyMul(50, nonfree_baggages));
    for (const payment of payment_methods as PyRecord[]) {
      const id = payment.payment_id as string;
      if (!hasKey(user.payment_methods, id)) return `Error: payment method ${id} not found`;
      const method = user.payment_methods[id];
      if ((method.source === "gift_card" || method.source === "certificate") && num(method.amount) < num(payment.amount)) {
        return `Error: not enough balance in payment method ${id}`;
      }
    }
    const paid = sum((payment_methods as PyRecord[]).map((p) => p.amount));
    if (num(paid) !== num(total)) {
      return `Error: payment amount does not add up, total price is ${pyNumStr(total)}, but paid ${pyNumStr(paid)}`;
    }
    for (const payment of payment_methods as PyRecord[]) {
      const method = user.payment_methods[payment.payment_id];
      if (method.source === "gift_card") method.amount = pySub(method.amount, payment.amount);
      else if (method.source === "certificate") delete user.payment_methods[payment.payment_id];
    }
    db.put("reservations", reservationId, reservation);
    (user.reservations as string[]).push(reservationId);
    return pyDumps(reservation);
  },

  calculate: (_db, { expression }) => calculate(expression),

  cancel_reservation: (db, { reservation_id }) => {
    const reservation = db.get("reservations", reservation_id);
    if (!reservation) return "Error: reservation not found";
    const refunds = (reservation.payment_history as PyRecord[]).map((p) => ({
      payment_id: p.payment_id,
      amount: pySub(0, p.amount),
    }));
    (reservation.payment_history as PyRecord[]).push(...refunds);
    reservation.status = "cancelled";
    return pyDumps(reservation);
  },

  get_reservation_details: (db, { reservation_id }) => {
    const reservation = db.peek("reservations", reservation_id);
    return reservation ? pyDumps(reservation) : "Error: reservation not found";
  },

  get_user_details: (db, { user_id }) => {
    const user = db.peek("users", user_id);
    return user ? pyDumps(user) : "Error: user not found";
  },

  list_all_airports: () => pyDumps(Object.fromEntries(AIRPORTS)),

  search_direct_flight: (db, { origin, destination, date }) => {
    const results: PyRecord[] = [];
    for (const [, flight] of db.entries("flights")) {
      if (flight.origin !== origin || flight.destination !== destination) continue;
      if (!hasKey(flight.dates, date) || flight.dates[date].status !== "available") continue;
      const row: PyRecord = {};
      for (const k of Object.keys(flight)) if (k !== "dates") row[k] = flight[k];
      Object.assign(row, flight.dates[date]);
      results.push(row);
    }
    return pyDumps(results);
  },

  search_onestop_flight: (db, { origin, destination, date }) => {
    const results: PyRecord[][] = [];
    const all = [...db.entries("flights")].map(([, f]) => f);
    for (const first of all) {
      if (first.origin !== origin) continue;
      for (const second of all) {
        if (second.destination !== destination || first.destination !== second.origin) continue;
        const nextDay = String(first.scheduled_arrival_time_est).includes("+1");
        const date2 = nextDay ? `2024-05-${Number(String(date).slice(-2)) + 1}` : date;
        if (String(first.scheduled_arrival_time_est) > String(second.scheduled_departure_time_est)) continue;
        if (!hasKey(first.dates, date) || !hasKey(second.dates, date2)) continue;
        if (first.dates[date].status !== "available" || second.dates[date2].status !== "available") continue;
        const leg = (f: PyRecord, d: string): PyRecord => {
          const row: PyRecord = {};
          for (const k of Object.keys(f)) if (k !== "dates") row[k] = f[k];
          Object.assign(row, f.dates[d]);
          row.date = d;
          return row;
        };
        results.push([leg(first, date), leg(second, date2)]);
      }
    }
    return pyDumps(results);
  },

  send_certificate: (db, { user_id, amount }) => {
    const user = db.get("users", user_id);
    if (!user) return "Error: user not found";
    for (const n of CERTIFICATE_IDS) {
      const id = `certificate_${n}`;
      if (!hasKey(user.payment_methods, id)) {
        pySet(user.payment_methods, id, { source: "certificate", amount, id });
        return `Certificate ${id} added to user ${user_id} with amount ${pyNumStr(amount)}.`;
      }
    }
    return "Too many certificates";
  },

  think: () => "",

  transfer_to_human_agents: () => "Transfer successful",

  update_reservation_baggages: (db, { reservation_id, total_baggages, nonfree_baggages, payment_id }) => {
    const reservation = db.get("reservations", reservation_id);
    if (!reservation) return "Error: reservation not found";
    const total = pyMul(50, Math.max(0, num(nonfree_baggages) - num(reservation.nonfree_baggages)));
    const user = db.get("users", reservation.user_id)!;
    if (!hasKey(user.payment_methods, payment_id)) return "Error: payment method not found";
    const method = user.payment_methods[payment_id];
    if (method.source === "certificate") return "Error: certificate cannot be used to update reservation";
    if (method.source === "gift_card" && num(method.amount) < num(total)) return "Error: gift card balance is not enough";
    reservation.total_baggages = total_baggages;
    reservation.nonfree_baggages = nonfree_baggages;
    if (method.source === "gift_card") method.amount = pySub(method.amount, total);
    if (num(total) !== 0) (reservation.payment_history as PyRecord[]).push({ payment_id, amount: total });
    return pyDumps(reservation);
  },

  update_reservation_flights: (db, { reservation_id, cabin, flights, payment_id }) => {
    const reservation = db.get("reservations", reservation_id);
    if (!reservation) return "Error: reservation not found";
    const passengers = (reservation.passengers as PyRecord[]).length;
    const wanted = pyClone(flights) as PyRecord[];
    let total: number = 0;
    for (const flight of wanted) {
      const same = (reservation.flights as PyRecord[]).find(
        (f) => f.flight_number === flight.flight_number && f.date === flight.date && cabin === reservation.cabin,
      );
      if (same) {
        total = pyAdd(total, pyMul(same.price, passengers));
        flight.price = same.price;
        flight.origin = same.origin;
        flight.destination = same.destination;
        continue;
      }
      const error = priceSegment(db, flight, cabin, passengers);
      if (error) return error;
      total = pyAdd(total, pyMul(flight.price, passengers));
    }
    total = pySub(total, pyMul(sum((reservation.flights as PyRecord[]).map((f) => f.price)), passengers));
    const user = db.get("users", reservation.user_id)!;
    if (!hasKey(user.payment_methods, payment_id)) return "Error: payment method not found";
    const method = user.payment_methods[payment_id];
    if (method.source === "certificate") return "Error: certificate cannot be used to update reservation";
    if (method.source === "gift_card" && num(method.amount) < num(total)) return "Error: gift card balance is not enough";
    if (method.source === "gift_card") method.amount = pySub(method.amount, total);
    reservation.flights = wanted;
    if (num(total) !== 0) (reservation.payment_history as PyRecord[]).push({ payment_id, amount: total });
    return pyDumps(reservation);
  },

  update_reservation_passengers: (db, { reservation_id, passengers }) => {
    const reservation = db.get("reservations", reservation_id);
    if (!reservation) return "Error: reservation not found";
    if ((passengers as unknown[]).length !== (reservation.passengers as unknown[]).length) return "Error: number of passengers does not match";
    reservation.passengers = passengers;
    return pyDumps(reservation);
  },
};

/** Tools that change the database (the agent must get the user's explicit confirmation first). */
export const AIRLINE_WRITE_TOOLS = new Set([
  "book_reservation",
  "cancel_reservation",
  "send_certificate",
  "update_reservation_baggages",
  "update_reservation_flights",
  "update_reservation_passengers",
]);
