/**
 * The scripted expert for retail and airline: a support agent that follows the policy through the
 * dialogue and the tools only. It asks for identity and looks the user up with what the user says
 * (it never reads the user id from the task), looks at an order or reservation before changing it,
 * lists each change and waits for the user's explicit "yes", then makes it, and finally tells the
 * user the figures they asked for. Its plan — which changes to make — comes from the task's gold
 * actions, as a person would work it out from the conversation. `wrongActions` is the same play with
 * one changed argument in its first write action.
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import { offByOne, withChangedCall, type Expert } from "../suite.js";
import type { Domain } from "./db.js";
import { describeAction } from "./describe.js";
import { pyDumps } from "./pyjson.js";
import type { TauAction, TauTask } from "./tasks.js";
import { WRITE_TOOLS } from "./tools.js";

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

/**
 * The expert's play with the first string argument of its first write action changed (an order,
 * reservation or user id with its last digit moved on, another value otherwise), so the database ends
 * up other than the gold actions leave it. Tasks that write nothing have no such wrong answer.
 */
export function wrongActions(domain: Domain, task: TauTask): Expert | { none: string } {
  if (!task.actions.some((a) => WRITE_TOOLS[domain].has(a.name))) return { none: "the task changes nothing (its reward reads only the outputs said), so there is no write action to change" };
  return withChangedCall(new TauExpert(domain, task), (call) => {
    if (!WRITE_TOOLS[domain].has(call.name)) return undefined;
    const kwargs = JSON.parse(call.arguments) as Record<string, unknown>;
    const key = Object.keys(kwargs).find((k) => typeof kwargs[k] === "string");
    return key === undefined ? undefined : { ...call, arguments: pyDumps({ ...kwargs, [key]: offByOne(kwargs[key]) }) };
  });
}
