/**
 * The restapi scripted expert: makes the task's gold chain of API calls through the env's own tools,
 * one call per turn, retrying a call whose result is an error (a fault: HTTP 503, a timeout, a
 * garbled body) up to `maxAttempts` times, then reads the answer from the last result at the task's
 * `answerPath` and submits it. It never submits the task's stored answer: what it submits is what the
 * API returned. `wrongAnswer` is the same play with a changed value in the final answer.
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import { changeArg, offByOne, withChangedCall, type Expert } from "../suite.js";
import type { RestTask } from "./tasks.js";

/** The value at a dotted path ("flights.0.price") of a JSON value. */
export function valueAt(value: unknown, path: string): unknown {
  let node = value;
  for (const key of path.split(".")) {
    if (node === null || typeof node !== "object") return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

export class RestApiExpert implements Expert {
  private step = 0;
  private attempts = 0;
  private calls = 0;

  constructor(
    readonly task: RestTask,
    readonly maxAttempts = 6,
  ) {}

  act(obs: ChatObservation): AgentTurn {
    const last = obs.messages.find((m) => m.role === "tool");
    if (this.calls > 0 && last?.role === "tool") {
      if (last.isError) {
        if (this.attempts >= this.maxAttempts) return this.submit(`I could not get an answer: ${last.content.slice(0, 200)}`, "unknown");
      } else if (this.step === this.task.chain.length - 1) {
        let body: unknown;
        try {
          body = JSON.parse(last.content);
        } catch {
          return this.submit("The last result was not JSON.", "unknown");
        }
        const value = valueAt(body, this.task.answerPath);
        if (typeof value !== "number" && typeof value !== "string") return this.submit(`No ${this.task.answerPath} in the result.`, "unknown");
        return this.submit(`The answer is ${value}.`, value);
      } else {
        this.step++;
        this.attempts = 0;
      }
    }
    const gold = this.task.chain[this.step]!;
    this.attempts++;
    this.calls++;
    const content = this.attempts > 1 ? `That call failed; let me try ${gold.tool} again.` : `Let me call ${gold.tool}.`;
    return { content, toolCalls: [{ id: `call_${this.calls}`, name: gold.tool, arguments: JSON.stringify(gold.args) }] };
  }

  private submit(content: string, answer: string | number): AgentTurn {
    this.calls++;
    return { content, toolCalls: [{ id: `call_${this.calls}`, name: "submit_answer", arguments: JSON.stringify({ answer }) }] };
  }
}

/**
 * The expert's play with the final answer changed: a number moved by 1% (at least 1), beyond the 1e-4
 * relative tolerance numeric answers are scored with (answer.ts); a string altered. It must score 0.
 */
export function wrongAnswer(task: RestTask): Expert {
  const change = (v: unknown) => (typeof v === "number" ? v + Math.max(1, Math.round(Math.abs(v) * 0.01)) : offByOne(v));
  return withChangedCall(new RestApiExpert(task), (call) => (call.name === "submit_answer" ? changeArg(call, "answer", change) : undefined));
}
