/**
 * The arith task set: seeded arithmetic word problems in three difficulty levels (one, two or three
 * operations), each with its expression and its integer answer. Generation is procedural and
 * deterministic in (count, seed, difficulty); no data files are read.
 */
import { Rng } from "../../core/index.js";
import type { TaskSet } from "../../tools/index.js";

export type Difficulty = 1 | 2 | 3;

export interface ArithTask {
  index: number;
  difficulty: Difficulty;
  question: string;
  /** The calculation that answers the question, e.g. "12 * 7 - 15". */
  expression: string;
  answer: number;
}

type Template = (r: Rng) => { question: string; expression: string; answer: number };

const NAMES = ["Mia", "Tom", "Ava", "Leo", "Zoe", "Sam", "Ivy", "Max"];

const TEMPLATES: Record<Difficulty, Template[]> = {
  1: [
    (r) => {
      const [n, a, b] = [r.pick(NAMES), r.range(5, 90), r.range(2, 60)];
      return { question: `${n} has ${a} marbles and buys ${b} more. How many marbles does ${n} have now?`, expression: `${a} + ${b}`, answer: a + b };
    },
    (r) => {
      const [b, a] = [r.range(2, 40), r.range(41, 120)];
      return { question: `A baker made ${a} rolls and sold ${b} of them. How many rolls are left?`, expression: `${a} - ${b}`, answer: a - b };
    },
    (r) => {
      const [a, b] = [r.range(2, 25), r.range(2, 24)];
      return { question: `There are ${a} boxes with ${b} pencils in each. How many pencils are there in all?`, expression: `${a} * ${b}`, answer: a * b };
    },
    (r) => {
      const [a, b] = [r.range(2, 20), r.range(2, 12)];
      return {
        question: `${a * b} stickers are shared equally among ${b} children. How many stickers does each child get?`,
        expression: `${a * b} / ${b}`,
        answer: a,
      };
    },
  ],
  2: [
    (r) => {
      const [a, b] = [r.range(3, 20), r.range(6, 30)];
      const c = r.range(1, a * b - 1);
      return {
        question: `A shop has ${a} crates of ${b} apples each and sells ${c} apples. How many apples are left?`,
        expression: `${a} * ${b} - ${c}`,
        answer: a * b - c,
      };
    },
    (r) => {
      const [n, a, b, c] = [r.pick(NAMES), r.range(5, 40), r.range(2, 14), r.range(1, 50)];
      return {
        question: `${n} reads ${a} pages a day for ${b} days, then ${c} more pages. How many pages did ${n} read in total?`,
        expression: `${a} * ${b} + ${c}`,
        answer: a * b + c,
      };
    },
    (r) => {
      const [c, k, a] = [r.range(2, 9), r.range(2, 15), r.range(10, 60)];
      const b = c * k + a; // b - a is divisible by c
      return {
        question: `A club raised ${b} dollars, spent ${a} on snacks, and split the rest equally among ${c} teams. How many dollars does each team get?`,
        expression: `(${b} - ${a}) / ${c}`,
        answer: k,
      };
    },
  ],
  3: [
    (r) => {
      const [a, b, c] = [r.range(2, 12), r.range(3, 15), r.range(5, 40)];
      const d = r.range(1, a * b * c - 1);
      return {
        question: `An orchard has ${a} rows of ${b} trees. Each tree gives ${c} apples and ${d} apples spoil. How many good apples are there?`,
        expression: `${a} * ${b} * ${c} - ${d}`,
        answer: a * b * c - d,
      };
    },
    (r) => {
      const [a, b, c, d] = [r.range(2, 20), r.range(5, 24), r.range(2, 20), r.range(5, 24)];
      return {
        question: `A school orders ${a} packs of ${b} pens and ${c} packs of ${d} pencils. How many pens and pencils does it order?`,
        expression: `${a} * ${b} + ${c} * ${d}`,
        answer: a * b + c * d,
      };
    },
    (r) => {
      const [a, b, d] = [r.range(5, 30), r.range(2, 10), r.range(2, 8)];
      // The final's points make the total a multiple of d, so it splits evenly among the players.
      const c = ((d - ((a * b) % d)) % d) + d * r.range(1, 5);
      const sum = a * b + c;
      return {
        question: `A team scored ${a} points in each of ${b} games and ${c} points in the final. The points are shared equally among ${d} players. How many points does each player get?`,
        expression: `(${a} * ${b} + ${c}) / ${d}`,
        answer: sum / d,
      };
    },
  ],
};

export interface ArithTaskOptions {
  /** Number of tasks. Default 300. */
  count?: number;
  /** Seed of the generator. Default 7. */
  seed?: number;
  /** Only this level; by default the levels cycle 1, 2, 3. */
  difficulty?: Difficulty;
}

export function generateArithTasks(options: ArithTaskOptions = {}): ArithTask[] {
  const count = options.count ?? 300;
  const rng = new Rng(options.seed ?? 7);
  const tasks: ArithTask[] = [];
  for (let index = 0; index < count; index++) {
    const difficulty = options.difficulty ?? (((index % 3) + 1) as Difficulty);
    const task = rng.pick(TEMPLATES[difficulty])(rng.fork(index));
    if (!Number.isInteger(task.answer)) throw new Error(`arith task ${index} has a non-integer answer ${task.answer} (${task.expression})`);
    tasks.push({ index, difficulty, ...task });
  }
  return tasks;
}

export function arithTaskSet(tasks: readonly ArithTask[]): TaskSet<ArithTask> {
  return {
    size: tasks.length,
    get(i) {
      const t = tasks[i];
      if (!t) throw new RangeError(`arith task index ${i} is out of range [0, ${tasks.length - 1}]`);
      return t;
    },
  };
}
