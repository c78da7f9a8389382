/**
 * The retail domain's 16 tools over its users / orders / products collections, with the benchmark's
 * behaviour: the same checks in the same order, the same error strings, the same JSON dumps and the
 * same float arithmetic (`round(x, 2)` on gift card balances and price differences).
 *
 * Each tool is a plain function `(db, args) -> string`; wiring them into a `ToolEnv` (schemas from
 * `tools.json`, episode end on transfer) is done in `tools.ts`.
 */
import { calculate } from "./calculate.js";
import type { TauDb } from "./db.js";
import { num, pyAbs, pyAdd, pyDumps, pyRound, pySub, type PyRecord } from "./pyjson.js";

export type ToolImpl = (db: TauDb, args: Record<string, any>) => string;

const CANCEL_REASONS = ["no longer needed", "ordered by mistake"];

function countOf(list: string[], x: string): number {
  return list.reduce((n, v) => (v === x ? n + 1 : n), 0);
}

function pySorted(list: string[]): string[] {
  return [...list].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

function userPaymentMethods(db: TauDb, order: PyRecord): PyRecord {
  const user = db.get("users", order.user_id);
  if (!user) throw new Error(`KeyError: '${order.user_id}'`);
  return user.payment_methods as PyRecord;
}

/** Checks the items to swap and sums the price difference (the shared part of exchange and modify). */
function priceDifference(db: TauDb, order: PyRecord, itemIds: string[], newItemIds: string[]): { error: string } | { diff: number } {
  const allItemIds = (order.items as PyRecord[]).map((it) => it.item_id as string);
  for (const itemId of itemIds) {
    if (countOf(itemIds, itemId) > countOf(allItemIds, itemId)) return { error: `Error: ${itemId} not found` };
  }
  if (itemIds.length !== newItemIds.length) return { error: "Error: the number of items to be exchanged should match" };
  let diff: number = 0;
  for (let i = 0; i < itemIds.length; i++) {
    const item = (order.items as PyRecord[]).find((it) => it.item_id === itemIds[i])!;
    const product = db.peek("products", item.product_id);
    if (!product) throw new Error(`KeyError: '${item.product_id}'`);
    const variant = Object.prototype.hasOwnProperty.call(product.variants, newItemIds[i]!) ? product.variants[newItemIds[i]!] : undefined;
    if (!variant || !variant.available) return { error: `Error: new item ${newItemIds[i]} not found or available` };
    diff = pyAdd(diff, pySub(variant.price, item.price));
  }
  return { diff };
}

export const RETAIL_TOOLS: Record<string, ToolImpl> = {
  calculate: (_db, { expression }) => calculate(expression),

  cancel_pending_order: (db, { order_id, reason }) => {
    const order = db.get("orders", order_id);
    if (!order) return "Error: order not found";
    if (order.status !== "pending") return "Error: non-pending order cannot be cancelled";
    if (!CANCEL_REASONS.includes(reason)) return "Error: invalid reason";
    const refunds: PyRecord[] = [];
    for (const payment of order.payment_history as PyRecord[]) {
      const pmId = payment.payment_method_id as string;
      refunds.push({ transaction_type: "refund", amount: payment.amount, payment_method_id: pmId });
      if (pmId.includes("gift_card")) {
        const pm = userPaymentMethods(db, order)[pmId];
        pm.balance = pyRound(pyAdd(pm.balance, payment.amount), 2);
      }
    }
    order.status = "cancelled";
    order.cancel_reason = reason;
    (order.payment_history as PyRecord[]).push(...refunds);
    return pyDumps(order);
  },

  exchange_delivered_order_items: (db, { order_id, item_ids, new_item_ids, payment_method_id }) => {
    const order = db.get("orders", order_id);
    if (!order) return "Error: order not found";
    if (order.status !== "delivered") return "Error: non-delivered order cannot be exchanged";
    const checked = priceDifference(db, order, item_ids, new_item_ids);
    if ("error" in checked) return checked.error;
    const diff = pyRound(checked.diff, 2);
    const methods = userPaymentMethods(db, order);
    if (!Object.prototype.hasOwnProperty.call(methods, payment_method_id)) return "Error: payment method not found";
    const pm = methods[payment_method_id];
    if (pm.source === "gift_card" && num(pm.balance) < num(diff)) {
      return "Error: insufficient gift card balance to pay for the price difference";
    }
    order.status = "exchange requested";
    order.exchange_items = pySorted(item_ids);
    order.exchange_new_items = pySorted(new_item_ids);
    order.exchange_payment_method_id = payment_method_id;
    order.exchange_price_difference = diff;
    return pyDumps(order);
  },

  find_user_id_by_email: (db, { email }) => {
    const wanted = String(email).toLowerCase();
    for (const [id, user] of db.entries("users")) if (String(user.email).toLowerCase() === wanted) return id;
    return "Error: user not found";
  },

  find_user_id_by_name_zip: (db, { first_name, last_name, zip }) => {
    const first = String(first_name).toLowerCase();
    const last = String(last_name).toLowerCase();
    for (const [id, user] of db.entries("users")) {
      if (user.name.first_name.toLowerCase() === first && user.name.last_name.toLowerCase() === last && user.address.zip === zip) return id;
    }
    return "Error: user not found";
  },

  get_order_details: (db, { order_id }) => {
    const order = db.peek("orders", order_id);
    return order ? pyDumps(order) : "Error: order not found";
  },

  get_product_details: (db, { product_id }) => {
    const product = db.peek("products", product_id);
    return product ? pyDumps(product) : "Error: product not found";
  },

  get_user_details: (db, { user_id }) => {
    const user = db.peek("users", user_id);
    return user ? pyDumps(user) : "Error: user not found";
  },

  list_all_product_types: (db) => {
    const byName = new Map<string, string>();
    for (const [, product] of db.entries("products")) byName.set(product.name, product.product_id);
    const sorted: PyRecord = {};
    for (const name of [...byName.keys()].sort()) sorted[name] = byName.get(name);
    return pyDumps(sorted, true);
  },

  modify_pending_order_address: (db, { order_id, address1, address2, city, state, country, zip }) => {
    const order = db.get("orders", order_id);
    if (!order) return "Error: order not found";
    if (order.status !== "pending") return "Error: non-pending order cannot be modified";
    order.address = { address1, address2, city, state, country, zip };
    return pyDumps(order);
  },

  modify_pending_order_items: (db, { order_id, item_ids, new_item_ids, payment_method_id }) => {
    const order = db.get("orders", order_id);
    if (!order) return "Error: order not found";
    if (order.status !== "pending") return "Error: non-pending order cannot be modified";
    const checked = priceDifference(db, order, item_ids, new_item_ids);
    if ("error" in checked) return checked.error;
    const diff = checked.diff;
    const methods = userPaymentMethods(db, order);
    if (!Object.prototype.hasOwnProperty.call(methods, payment_method_id)) return "Error: payment method not found";
    const pm = methods[payment_method_id];
    if (pm.source === "gift_card" && num(pm.balance) < num(diff)) return "Error: insufficient gift card balance to pay for the new item";
    (order.payment_history as PyRecord[]).push({
      transaction_type: num(diff) > 0 ? "payment" : "refund",
      amount: pyAbs(diff),
      payment_method_id,
    });
    if (pm.source === "gift_card") pm.balance = pyRound(pySub(pm.balance, diff), 2);
    for (let i = 0; i < item_ids.length; i++) {
      const item = (order.items as PyRecord[]).find((it) => it.item_id === item_ids[i])!;
      const variant = db.peek("products", item.product_id)!.variants[new_item_ids[i]];
      item.item_id = new_item_ids[i];
      item.price = variant.price;
      item.options = variant.options;
    }
    order.status = "pending (item modified)";
    return pyDumps(order);
  },

  modify_pending_order_payment: (db, { order_id, payment_method_id }) => {
    const order = db.get("orders", order_id);
    if (!order) return "Error: order not found";
    if (order.status !== "pending") return "Error: non-pending order cannot be modified";
    const methods = userPaymentMethods(db, order);
    if (!Object.prototype.hasOwnProperty.call(methods, payment_method_id)) return "Error: payment method not found";
    const history = order.payment_history as PyRecord[];
    if (history.length > 1 || history[0]!.transaction_type !== "payment") {
      return "Error: there should be exactly one payment for a pending order";
    }
    const oldId = history[0]!.payment_method_id as string;
    if (oldId === payment_method_id) return "Error: the new payment method should be different from the current one";
    const amount = history[0]!.amount;
    const pm = methods[payment_method_id];
    if (pm.source === "gift_card" && num(pm.balance) < num(amount)) return "Error: insufficient gift card balance to pay for the order";
    history.push(
      { transaction_type: "payment", amount, payment_method_id },
      { transaction_type: "refund", amount, payment_method_id: oldId },
    );
    if (pm.source === "gift_card") pm.balance = pyRound(pySub(pm.balance, amount), 2);
    if (oldId.includes("gift_card")) {
      const old = methods[oldId];
      old.balance = pyRound(pyAdd(old.balance, amount), 2);
    }
    return pyDumps(order);
  },

  modify_user_address: (db, { user_id, address1, address2, city, state, country, zip }) => {
    const user = db.get("users", user_id);
    if (!user) return "Error: user not found";
    user.address = { address1, address2, city, state, country, zip };
    return pyDumps(user);
  },

  return_delivered_order_items: (db, { order_id, item_ids, payment_method_id }) => {
    const order = db.get("orders", order_id);
    if (!order) return "Error: order not found";
    if (order.status !== "delivered") return "Error: non-delivered order cannot be returned";
    const methods = userPaymentMethods(db, order);
    if (!Object.prototype.hasOwnProperty.call(methods, payment_method_id)) return "Error: payment method not found";
    if (!String(payment_method_id).includes("gift_card") && payment_method_id !== (order.payment_history as PyRecord[])[0]!.payment_method_id) {
      return "Error: payment method should be either the original payment method or a gift card";
    }
    const allItemIds = (order.items as PyRecord[]).map((it) => it.item_id as string);
    for (const itemId of item_ids as string[]) {
      if (countOf(item_ids, itemId) > countOf(allItemIds, itemId)) return `Error: ${itemId} not found`;
    }
    order.status = "return requested";
    order.return_items = pySorted(item_ids);
    order.return_payment_method_id = payment_method_id;
    return pyDumps(order);
  },

  think: () => "",

  transfer_to_human_agents: () => "Transfer successful",
};

/** Tools that change the database (the agent must get the user's explicit confirmation first). */
export const RETAIL_WRITE_TOOLS = new Set([
  "cancel_pending_order",
  "exchange_delivered_order_items",
  "modify_pending_order_address",
  "modify_pending_order_items",
  "modify_pending_order_payment",
  "modify_user_address",
  "return_delivered_order_items",
]);
