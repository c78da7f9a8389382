/**
 * The scripted expert for retail and airline: a support agent that follows the policy through the
 * dialogue and the tools only. It asks for identity and looks the user up with what the user says
 * (it never reads the user id from the task), looks at an order or reservation before changing it,
 * lists each change and waits for the user's explicit "yes", then makes it, and finally tells the
 * user the figures they asked for. Its plan — which changes to make — comes from the task's gold
 * actions, as a person would work it out from the conversation. `wrongActions` is the same play with
 * one changed argument in a write action, chosen so that the database ends up other than the gold
 * actions leave it.
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import { offByOne, withChangedCall, type Expert } from "../suite.js";
import { replayGold } from "./conform.js";
import { diffDbs, loadBase, TauDb, type Domain } from "./db.js";
import { describeAction } from "./describe.js";
import { pyDumps, type PyRecord } from "./pyjson.js";
import type { TauAction, TauTask } from "./tasks.js";
import { runAction, WRITE_TOOLS } from "./tools.js";

type Stage = "greet" | "identify" | "plan";

export class TauExpert implements Expert {
  private stage: Stage = "greet";
  private planIndex = 0;
  private awaiting: TauAction | undefined;
  private readonly viewed = new Set<string>();
  private outputsSaid = false;
  private calls = 0;

  constructor(
    private readonly domain: Domain,
    private readonly task: TauTask,
  ) {}

  act(obs: ChatObservation): AgentTurn {
    const userText = [...obs.messages].reverse().find((m) => m.role === "user")?.content ?? "";
    const tool = [...obs.messages].reverse().find((m) => m.role === "tool");
    if (this.stage === "greet") {
      this.stage = "identify";
      return this.say(this.identityQuestion());
    }
    if (this.stage === "identify") {
      if (tool) {
        if (tool.content.startsWith("Error")) return this.say(`I could not find your account (${tool.content}). ${this.identityQuestion()}`);
        this.stage = "plan";
        return this.say("Thank you, your identity is verified. How can I help you today?");
      }
      return this.lookup(userText) ?? this.say(this.identityQuestion());
    }
    if (this.awaiting) {
      const action = this.awaiting;
      this.awaiting = undefined;
      this.planIndex++;
      if (/\byes\b/i.test(userText)) return this.call(action.name, action.kwargs);
    }
    return this.next();
  }

  private identityQuestion(): string {
    return this.domain === "retail"
      ? "Hello! Before I can help, I need to verify your identity. Could you please give me your email address, or your first and last name together with your zip code?"
      : "Hello! Before I can help, could you please give me your user id?";
  }

  /** A look-up with the identity the user stated, or undefined when the message has none. */
  private lookup(text: string): AgentTurn | undefined {
    if (this.domain === "airline") {
      const id = /user id is ([A-Za-z0-9_]+)/i.exec(text)?.[1] ?? /\b([a-z]+_[a-z]+_\d+)\b/.exec(text)?.[1];
      return id ? this.call("get_user_details", { user_id: id }) : undefined;
    }
    const email = /([A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]+)/.exec(text)?.[1];
    if (email) return this.call("find_user_id_by_email", { email });
    const m = /name is ([A-Za-z'-]+) ([A-Za-z' -]+?) and my zip(?: code)? is (\d{5})/i.exec(text);
    if (m) return this.call("find_user_id_by_name_zip", { first_name: m[1], last_name: m[2], zip: m[3] });
    return undefined;
  }

  private next(): AgentTurn {
    const action = this.task.actions[this.planIndex];
    if (!action) {
      if (!this.outputsSaid) {
        this.outputsSaid = true;
        return this.say(this.closing());
      }
      return this.say("Thank you for contacting us. Have a great day!");
    }
    if (action.name === "transfer_to_human_agents") {
      if (this.task.outputs.length > 0 && !this.outputsSaid) {
        this.outputsSaid = true;
        return this.say(this.closing());
      }
      this.planIndex++;
      return this.call(action.name, action.kwargs);
    }
    if (!WRITE_TOOLS[this.domain].has(action.name)) {
      this.planIndex++;
      return this.call(action.name, action.kwargs);
    }
    const target = this.domain === "retail" ? action.kwargs.order_id : action.kwargs.reservation_id;
    if (typeof target === "string" && !this.viewed.has(target)) {
      this.viewed.add(target);
      return this.domain === "retail"
        ? this.call("get_order_details", { order_id: target })
        : this.call("get_reservation_details", { reservation_id: target });
    }
    this.awaiting = action;
    return this.say(`Here are the details: I will ${describeAction(action)}. Would you like me to proceed? Please confirm (yes/no).`);
  }

  private closing(): string {
    if (this.task.outputs.length === 0) {
      return this.task.actions.some((a) => WRITE_TOOLS[this.domain].has(a.name))
        ? "Everything you asked for is done. Is there anything else I can help you with?"
        : "I'm sorry, but under our policy I cannot make that change for you. Is there anything else I can help you with?";
    }
    return `Here is what you asked about: ${this.task.outputs.join("; ")}. Is there anything else I can help you with?`;
  }

  private say(content: string): AgentTurn {
    return { content, toolCalls: [] };
  }

  private call(name: string, kwargs: Record<string, unknown>): AgentTurn {
    return { content: "", toolCalls: [{ id: `call_${++this.calls}`, name, arguments: pyDumps(kwargs) }] };
  }
}

/** One argument of one gold write action changed: the action's index in `task.actions` and its new kwargs. */
export interface WrongChange {
  actionIndex: number;
  kwargs: Record<string, any>;
}

/** The other variants on sale of the retail product that has variant `itemId` (none in airline). */
function otherVariants(db: TauDb, itemId: unknown): string[] {
  if (db.domain !== "retail" || typeof itemId !== "string") return [];
  for (const [, product] of db.entries("products")) {
    const variants = product.variants as PyRecord;
    if (Object.prototype.hasOwnProperty.call(variants, itemId)) return Object.keys(variants).filter((id) => id !== itemId && variants[id].available);
  }
  return [];
}

/**
 * `kwargs` with one argument changed, in key order: a string, the first id of a list or a number moved
 * on by one; then a payment method id replaced by each other payment method of the customer; then the
 * first new item replaced by each other variant on sale of its product.
 */
function changedKwargs(db: TauDb, kwargs: Record<string, any>, paymentMethods: string[]): Record<string, any>[] {
  const out: Record<string, any>[] = [];
  for (const [key, value] of Object.entries(kwargs)) {
    if (typeof value === "string" || typeof value === "number") out.push({ ...kwargs, [key]: offByOne(value) });
    else if (Array.isArray(value) && typeof value[0] === "string") out.push({ ...kwargs, [key]: [offByOne(value[0]), ...value.slice(1)] });
  }
  for (const key of ["payment_method_id", "payment_id"]) {
    const value = kwargs[key];
    if (typeof value === "string") for (const other of paymentMethods) if (other !== value) out.push({ ...kwargs, [key]: other });
  }
  const newItems = kwargs.new_item_ids;
  if (Array.isArray(newItems)) for (const other of otherVariants(db, newItems[0])) out.push({ ...kwargs, new_item_ids: [other, ...newItems.slice(1)] });
  return out;
}

/**
 * The first change of one argument of one gold write action (actions in order, arguments in key
 * order) after which replaying the gold actions leaves the database other than the gold replay does;
 * undefined when there is none. A gold write action the tools refuse (e.g. a payment change with too
 * little gift card balance, which the benchmark's gold actions keep) changes nothing, and so does any
 * change to it that the tools refuse too: such a change is no wrong answer and is passed over (paying
 * with another of the customer's methods, or choosing a cheaper variant, which the tools accept, is one).
 */
export function wrongChange(domain: Domain, task: TauTask, dbDir?: string): WrongChange | undefined {
  const gold = replayGold(domain, task, dbDir).db;
  const paymentMethods = Object.keys(gold.peek("users", task.user_id)?.payment_methods ?? {});
  for (let actionIndex = 0; actionIndex < task.actions.length; actionIndex++) {
    const action = task.actions[actionIndex]!;
    if (!WRITE_TOOLS[domain].has(action.name)) continue;
    for (const kwargs of changedKwargs(gold, action.kwargs, paymentMethods)) {
      const db = new TauDb(domain, loadBase(domain, dbDir));
      task.actions.forEach((a, i) => {
        if (a.name !== "transfer_to_human_agents") runAction(domain, db, a.name, i === actionIndex ? kwargs : a.kwargs);
      });
      if (diffDbs(db, gold).length > 0) return { actionIndex, kwargs };
    }
  }
  return undefined;
}

/**
 * The expert's play with one argument of one write action changed (`wrongChange`: an order,
 * reservation, item or payment id with its last digit moved on, another value otherwise, another
 * payment method of the customer or another variant of a new item), so the database ends up other
 * than the gold actions leave it. Tasks that write nothing, or whose outcome no single changed
 * argument alters, have no such wrong answer.
 */
export function wrongActions(domain: Domain, task: TauTask): Expert | { none: string } {
  if (!task.actions.some((a) => WRITE_TOOLS[domain].has(a.name))) return { none: "the task changes nothing (its reward reads only the outputs said), so there is no write action to change" };
  const change = wrongChange(domain, task);
  if (!change) return { none: "no single changed argument of a write action leaves the database other than the gold actions do" };
  // The expert makes the gold actions as they are; the changed one is the n-th call identical to it.
  const target = task.actions[change.actionIndex]!;
  const arguments_ = pyDumps(target.kwargs);
  const occurrence = task.actions.slice(0, change.actionIndex).filter((a) => a.name === target.name && pyDumps(a.kwargs) === arguments_).length;
  let seen = 0;
  return withChangedCall(new TauExpert(domain, task), (call) => {
    if (call.name !== target.name || call.arguments !== arguments_ || seen++ !== occurrence) return undefined;
    return { ...call, arguments: pyDumps(change.kwargs) };
  });
}
