/**
 * The SWE scripted expert: lists the repository, runs the tests (they fail), reads the file with the
 * bug, applies the known fix with edit_file, runs the tests again and submits. It knows the fix; it
 * is not a solver. Its episodes are SFT data and the suite's replay.
 */
import type { AgentTurn, ChatObservation } from "../../core/index.js";
import type { Expert } from "../suite.js";
import type { SweTask } from "./swe-tasks.js";

export class SweExpert implements Expert {
  private step = 0;

  constructor(readonly task: SweTask) {}

  act(_obs: ChatObservation): AgentTurn {
    this.step++;
    const call = (content: string, name: string, args: Record<string, unknown>): AgentTurn => ({
      content,
      toolCalls: [{ id: `call_${this.step}`, name, arguments: JSON.stringify(args) }],
    });
    const { fix } = this.task;
    switch (this.step) {
      case 1:
        return call("Let me look at the repository.", "list_files", {});
      case 2:
        return call("Let me run the tests to see what fails.", "run_tests", {});
      case 3:
        return call(`The failure points at ${fix.path}; let me read it.`, "read_file", { path: fix.path });
      case 4:
        return call("Here is the bug; I'll fix it.", "edit_file", { path: fix.path, search: fix.search, replace: fix.replace });
      case 5:
        return call("Let me run the tests again.", "run_tests", {});
      case 6:
        return call("The tests pass; submitting.", "submit", {});
      default:
        return { content: "Submitted.", toolCalls: [] };
    }
  }
}

/**
 * The expert's play without its fix: it looks, runs the tests, and submits the repository with the bug
 * still in it (the `edit_file` turn is skipped), which the tests must fail.
 */
export function wrongAnswer(task: SweTask): Expert {
  const expert = new SweExpert(task);
  return {
    async act(obs) {
      let turn = await expert.act(obs);
      if (turn.toolCalls[0]?.name === "edit_file") turn = await expert.act(obs);
      return turn;
    },
  };
}
