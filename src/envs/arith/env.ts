/**
 * The arith env (`sinkflex/arith-v0`): a ToolEnv over seeded arithmetic word problems.
 *
 * Tools: `calculate` (evaluates an arithmetic expression) and `submit_answer` (records the final
 * number and ends the episode). A turn without tool calls also ends the episode: its last number is
 * taken as the answer. Reward 1 when the answer equals the task's, else 0, with the evidence. There is
 * no user simulator. This file builds the env; the expert and the registration are their own files.
 */
import { z } from "zod";
import { ToolEnv } from "../../tools/index.js";
import { functionTool } from "../../tools/index.js";
import { evaluateExpression, formatNumber } from "./calculator.js";
import { arithTaskSet, generateArithTasks, type ArithTask, type Difficulty } from "./tasks.js";
import { cachedTasks } from "../task-cache.js";

export interface ArithState {
  submitted?: number;
  calculations: number;
}

export const ARITH_SYSTEM_PROMPT =
  "You solve arithmetic word problems. Use the calculate tool for every calculation, then call submit_answer with the final number.";

const calculate = functionTool({
  name: "calculate",
  description: "Evaluates an arithmetic expression with numbers, + - * / and parentheses, e.g. \"(12 + 3) * 4\".",
  parameters: z.object({ expression: z.string().min(1).max(500).describe("The expression to evaluate.") }),
  execute: ({ expression }, ctx: { state: ArithState }) => {
    ctx.state.calculations++;
    return formatNumber(evaluateExpression(expression));
  },
});

const submitAnswer = functionTool({
  name: "submit_answer",
  description: "Submits the final numeric answer. This ends the task.",
  parameters: z.object({ answer: z.number().describe("The final answer, a number.") }),
  execute: ({ answer }, ctx: { state: ArithState; finish(reason: string): void }) => {
    ctx.state.submitted = answer;
    ctx.finish("submitted");
    return `Answer ${formatNumber(answer)} recorded.`;
  },
});

export interface ArithEnvOptions {
  /** Number of generated tasks. Default 300. */
  count?: number;
  /** Seed of the task generator. Default 7. */
  taskSeed?: number;
  /** Only tasks of this level (1, 2 or 3). */
  difficulty?: Difficulty;
}

export function createArithEnv(options: Record<string, unknown> = {}): ToolEnv<ArithTask, ArithState> {
  const count = options.count ?? 300;
  const taskSeed = options.taskSeed ?? 7;
  const difficulty = options.difficulty;
  if (!Number.isInteger(count) || (count as number) < 1) throw new RangeError(`arith: options.count must be a positive integer, got ${JSON.stringify(count)}`);
  if (!Number.isInteger(taskSeed)) throw new RangeError(`arith: options.taskSeed must be an integer, got ${JSON.stringify(taskSeed)}`);
  if (difficulty !== undefined && difficulty !== 1 && difficulty !== 2 && difficulty !== 3) {
    throw new RangeError(`arith: options.difficulty must be 1, 2 or 3, got ${JSON.stringify(difficulty)}`);
  }
  const tasks = cachedTasks("arith", { count, taskSeed, difficulty }, () => generateArithTasks({ count: count as number, seed: taskSeed as number, difficulty }));
  return new ToolEnv<ArithTask, ArithState>({
    name: "ArithEnv",
    tasks: arithTaskSet(tasks),
    tools: [calculate, submitAnswer],
    metadata: { description: "Arithmetic word problems: calculate, then submit_answer." },
    async open(task) {
      return {
        state: { calculations: 0 },
        messages: [
          { role: "system", content: ARITH_SYSTEM_PROMPT },
          { role: "user", content: task.question },
        ],
      };
    },
    async score(episode) {
      const expected = episode.task.answer;
      let given = episode.state.submitted;
      let via = "submit_answer";
      if (given === undefined) {
        via = "text";
        const last = [...episode.messages].reverse().find((m) => m.role === "assistant");
        const numbers = last?.content.match(/-?\d+(\.\d+)?/g);
        given = numbers ? Number(numbers[numbers.length - 1]) : undefined;
      }
      const correct = given !== undefined && Math.abs(given - expected) < 1e-9;
      return { reward: correct ? 1 : 0, evidence: { expected, given: given ?? null, via, calculations: episode.state.calculations } };
    },
  });
}
