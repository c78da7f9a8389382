/**
 * The arith scripted expert: calls `calculate` with the task's expression, reads the result from the
 * tool message, and submits it. It acts only through the agent's tools. `wrongAnswer` is the same play
 * with an answer off by one (`envs replay --wrong`).
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import { changeArg, withChangedCall, type Expert } from "../suite.js";
import type { ArithTask } from "./tasks.js";

export class ArithExpert implements Expert {
  private turn = 0;

  constructor(readonly task: ArithTask) {}

  act(obs: ChatObservation): AgentTurn {
    this.turn++;
    if (this.turn === 1) {
      return {
        content: "Let me calculate that.",
        toolCalls: [{ id: "call_1", name: "calculate", arguments: JSON.stringify({ expression: this.task.expression }) }],
      };
    }
    const result = obs.messages.find((m) => m.role === "tool" && m.name === "calculate" && !m.isError);
    if (this.turn === 2 && result) {
      return {
        content: `The answer is ${result.content}.`,
        toolCalls: [{ id: "call_2", name: "submit_answer", arguments: JSON.stringify({ answer: Number(result.content) }) }],
      };
    }
    return { content: `The answer is ${this.task.answer}.`, toolCalls: [] };
  }
}

/** The expert's play with the submitted answer off by one: the verifier must score it 0. */
export function wrongAnswer(task: ArithTask): Expert {
  return withChangedCall(new ArithExpert(task), (call) => (call.name === "submit_answer" ? changeArg(call, "answer") : undefined));
}
