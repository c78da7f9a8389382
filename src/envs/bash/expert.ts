/**
 * The bash suite's scripted expert: it looks at the working directory (a `stat`-only listing that does
 * not change access times), then submits the task's reference command. Its episodes are SFT data and
 * the suite's replay. It is not a solver: it knows the reference.
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import type { Expert } from "../suite.js";
import type { BashTask } from "./tasks.js";

export class BashExpert implements Expert {
  private step = 0;

  constructor(private readonly task: BashTask) {}

  act(_obs: ChatObservation): AgentTurn {
    const call = (name: string, command: string): AgentTurn => ({
      content: "",
      toolCalls: [{ id: `call_${this.step}`, name, arguments: JSON.stringify({ command }) }],
    });
    this.step++;
    if (this.step === 1) return call("run", "pwd && ls -ld .");
    if (this.step === 2) return call("submit", this.task.gold);
    return { content: "Submitted.", toolCalls: [] };
  }
}
