/**
 * Plain-language descriptions of tau-bench actions and their key identifiers.
 *
 * The scripted user states its request with `describeAction`, the scripted expert lists the action
 * details it asks the user to confirm with the same words, and `keyTerms` are the identifiers (order,
 * item, payment, reservation and flight ids, ...) a message must mention for the scripted user to
 * recognise the action as the one it wants. Nothing here touches a database.
 */
import { pyNumStr } from "./pyjson.js";
import type { TauAction } from "./tasks.js";

const list = (xs: unknown[]): string => (xs as string[]).join(", ");

function address(k: Record<string, any>): string {
  return [k.address1, k.address2, k.city, k.state, k.zip, k.country].filter((x) => x !== undefined && x !== "").join(", ");
}

function flights(fs: any[]): string {
  return fs.map((f) => `${f.flight_number} on ${f.date}`).join(", ");
}

/** One action as a request in the first person ("cancel order #W1 because ..."). */
export function describeAction(action: TauAction): string {
  const k = action.kwargs;
  switch (action.name) {
    case "cancel_pending_order":
      return `cancel order ${k.order_id} because ${k.reason}`;
    case "modify_pending_order_address":
      return `change the shipping address of order ${k.order_id} to ${address(k)}`;
    case "modify_user_address":
      return `change my default address (user ${k.user_id}) to ${address(k)}`;
    case "modify_pending_order_payment":
      return `pay for order ${k.order_id} with ${k.payment_method_id} instead`;
    case "modify_pending_order_items":
      return `change item(s) ${list(k.item_ids)} of order ${k.order_id} to item(s) ${list(k.new_item_ids)}, settling any price difference with ${k.payment_method_id}`;
    case "exchange_delivered_order_items":
      return `exchange item(s) ${list(k.item_ids)} of order ${k.order_id} for item(s) ${list(k.new_item_ids)}, settling any price difference with ${k.payment_method_id}`;
    case "return_delivered_order_items":
      return `return item(s) ${list(k.item_ids)} of order ${k.order_id}, refunded to ${k.payment_method_id}`;
    case "book_reservation":
      return (
        `book a ${String(k.flight_type).replace("_", "-")} ${k.cabin} trip from ${k.origin} to ${k.destination} on flights ${flights(k.flights)} ` +
        `for ${(k.passengers as any[]).map((p) => `${p.first_name} ${p.last_name} (born ${p.dob})`).join(", ")}, ` +
        `with ${k.total_baggages} checked bag(s) of which ${k.nonfree_baggages} paid, insurance: ${k.insurance}, ` +
        `paying ${(k.payment_methods as any[]).map((p) => `${pyNumStr(p.amount)} with ${p.payment_id}`).join(" and ")}`
      );
    case "cancel_reservation":
      return `cancel reservation ${k.reservation_id}`;
    case "update_reservation_flights":
      return `change reservation ${k.reservation_id} to ${k.cabin} on flights ${flights(k.flights)}, paying any difference with ${k.payment_id}`;
    case "update_reservation_baggages":
      return `set reservation ${k.reservation_id} to ${k.total_baggages} checked bag(s) of which ${k.nonfree_baggages} paid, using ${k.payment_id}`;
    case "update_reservation_passengers":
      return `change the passengers of reservation ${k.reservation_id} to ${(k.passengers as any[]).map((p) => `${p.first_name} ${p.last_name} (born ${p.dob})`).join(", ")}`;
    case "send_certificate":
      return `receive a certificate of ${pyNumStr(k.amount)} dollars as compensation (user ${k.user_id})`;
    case "transfer_to_human_agents":
      return "be transferred to a human agent";
    default:
      return `${action.name} ${JSON.stringify(k)}`;
  }
}

/** The identifiers a message must mention to refer to this action (compared case-insensitively). */
export function keyTerms(action: TauAction): string[] {
  const k = action.kwargs;
  const terms: string[] = [];
  const add = (v: unknown) => {
    if (typeof v === "string" && v !== "") terms.push(v);
  };
  add(k.order_id);
  add(k.reservation_id);
  add(k.payment_method_id);
  add(k.payment_id);
  for (const id of [...(k.item_ids ?? []), ...(k.new_item_ids ?? [])]) add(id);
  for (const f of k.flights ?? []) add(f.flight_number);
  for (const p of k.payment_methods ?? []) add(p.payment_id);
  if (action.name.endsWith("_address")) add(k.address1);
  if (action.name === "update_reservation_passengers" || action.name === "book_reservation") for (const p of k.passengers ?? []) add(p.first_name);
  if (action.name === "update_reservation_baggages") add(String(k.total_baggages));
  if (action.name === "send_certificate") add(pyNumStr(k.amount));
  return [...new Set(terms)];
}

/** True when the text mentions every key term of the action. */
export function mentions(text: string, action: TauAction): boolean {
  const lower = text.toLowerCase();
  return keyTerms(action).every((t) => lower.includes(t.toLowerCase()));
}
