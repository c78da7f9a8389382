/**
 * The MINT scripted expert. Code tasks: it submits the benchmark's own solution (HumanEval's prompt
 * plus canonical body, MBPP's code). Answer tasks: it prints the reference answer with run_code and
 * submits what the program printed. It knows the references; it is not a solver. Its episodes are
 * SFT data and the suite's gold replay.
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import { changeArg, withChangedCall, type Expert } from "../suite.js";
import type { MintTask, Reference } from "./mint-tasks.js";

/** A Python literal for a reference answer. */
export function pythonLiteral(v: Reference): string {
  if (typeof v === "boolean") return v ? "True" : "False";
  if (Array.isArray(v)) return `[${v.map((x) => pythonLiteral(x)).join(", ")}]`;
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(v);
  return JSON.stringify(v);
}

export class MintExpert implements Expert {
  private step = 0;

  constructor(readonly task: MintTask) {}

  act(obs: ChatObservation): AgentTurn {
    this.step++;
    const call = (content: string, name: string, args: Record<string, unknown>): AgentTurn => ({
      content,
      toolCalls: [{ id: `call_${this.step}`, name, arguments: JSON.stringify(args) }],
    });
    const task = this.task;
    if (task.kind === "code") {
      if (this.step === 1) return call("Here is my implementation.", "submit", { code: task.gold });
      return { content: "Submitted.", toolCalls: [] };
    }
    if (this.step === 1) return call("Let me compute the answer.", "run_code", { code: `print(${pythonLiteral(task.reference)})` });
    if (this.step === 2) {
      const out = obs.messages.find((m) => m.role === "tool");
      const printed = out && !out.isError ? out.content.split("\n[exit status")[0]!.trim() : String(task.reference);
      return call(`The answer is ${printed}.`, "submit", { answer: printed });
    }
    return { content: "Submitted.", toolCalls: [] };
  }
}

/**
 * Answer tasks: the expert's play with the submitted answer changed (a number off by one). Code tasks
 * have no well-defined wrong answer: a changed program may still pass the tests, and one made to fail
 * on purpose says nothing about the verifier.
 */
export function wrongAnswer(task: MintTask): Expert | { none: string } {
  if (task.kind === "code") return { none: "a code task's wrong program is not well defined (a changed program may still be correct)" };
  return withChangedCall(new MintExpert(task), (call) => (call.name === "submit" ? changeArg(call, "answer") : undefined));
}
