/**
 * The bash suite's scripted expert: it looks at the working directory (a `stat`-only listing that does
 * not change access times), then submits the task's reference command. Its episodes are SFT data and
 * the suite's replay. It is not a solver: it knows the reference. `wrongAnswer` plays the same but
 * submits a different command: the reference plus a change to the tree.
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import { withChangedCall, type Expert } from "../suite.js";
import { fileSystem } from "./fixtures.js";
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

/**
 * The reference command with an extra file change: it writes `.sinkflex-wrong` at the tree's top before
 * and after running the reference (in a subshell, so an `exit` or `cd` in it does not skip the second),
 * so the tree differs from the reference's even when the reference deletes files.
 */
export function wrongCommand(task: BashTask): string {
  const marker = `${fileSystem(task.fs).mountPoint}/.sinkflex-wrong`;
  return `: > ${marker}; (\n${task.gold}\n); : > ${marker}`;
}

/** The expert's play submitting `wrongCommand(task)`: the verifier must score it 0. */
export function wrongAnswer(task: BashTask): Expert {
  return withChangedCall(new BashExpert(task), (call) => (call.name === "submit" ? { ...call, arguments: JSON.stringify({ command: wrongCommand(task) }) } : undefined));
}
