/**
 * The `calculate` tool shared by retail and airline: evaluates + - * / and parentheses over numbers
 * with Python's semantics (int/float typing, true division, `round(x, 2)`), and prints the result as
 * Python's `str` would. It is a small recursive-descent evaluator, not a general expression language.
 */
import { isPyFloat, num, pyFloat, pyNumStr, pyRound } from "./pyjson.js";

const ALLOWED = /^[0-9+\-*/(). ]*$/;

class CalcError extends Error {}

/** Python's `str(round(float(eval(expression)), 2))`, or the error string the benchmark prints. */
export function calculate(expression: string): string {
  if (!ALLOWED.test(expression)) return "Error: invalid characters in expression";
  try {
    const value = evaluate(expression);
    return pyNumStr(pyRound(pyFloat(num(value)), 2));
  } catch (err) {
    if (err instanceof CalcError) return `Error: ${err.message}`;
    throw err;
  }
}

function evaluate(src: string): number {
  const tokens = src.match(/\d+\.?\d*|\.\d+|\*\*|\/\/|[-+*/()]/g) ?? [];
  let pos = 0;
  const peek = () => tokens[pos];
  const next = () => tokens[pos++];
  const binop = (a: number, b: number, op: string): number => {
    const x = num(a);
    const y = num(b);
    const float = isPyFloat(a) || isPyFloat(b);
    if (op === "/") {
      if (y === 0) throw new CalcError(float ? "float division by zero" : "division by zero");
      return pyFloat(x / y);
    }
    if (op === "//") {
      if (y === 0) throw new CalcError(float ? "float floor division by zero" : "integer division or modulo by zero");
      return float ? pyFloat(Math.floor(x / y)) : Math.floor(x / y);
    }
    const r = op === "+" ? x + y : op === "-" ? x - y : op === "*" ? x * y : x ** y;
    return float || (op === "**" && y < 0) ? pyFloat(r) : r;
  };
  const atom = (): number => {
    const t = next();
    if (t === undefined) throw new CalcError("invalid syntax (<string>, line 1)");
    if (t === "(") {
      const v = sum();
      if (next() !== ")") throw new CalcError("invalid syntax (<string>, line 1)");
      return v;
    }
    if (t === "-" || t === "+") {
      const v = unary();
      return t === "-" ? (isPyFloat(v) ? pyFloat(-num(v)) : -num(v)) : v;
    }
    if (/^[\d.]/.test(t)) return t.includes(".") ? pyFloat(Number(t)) : Number(t);
    throw new CalcError("invalid syntax (<string>, line 1)");
  };
  const power = (): number => {
    const base = atom();
    if (peek() === "**") {
      next();
      return binop(base, unary(), "**");
    }
    return base;
  };
  const unary = (): number => {
    const t = peek();
    if (t === "-" || t === "+") {
      next();
      const v = unary();
      return t === "-" ? (isPyFloat(v) ? pyFloat(-num(v)) : -num(v)) : v;
    }
    return power();
  };
  const product = (): number => {
    let v = unary();
    while (peek() === "*" || peek() === "/" || peek() === "//") {
      const op = next()!;
      v = binop(v, unary(), op);
    }
    return v;
  };
  const sum = (): number => {
    let v = product();
    while (peek() === "+" || peek() === "-") {
      const op = next()!;
      v = binop(v, product(), op);
    }
    return v;
  };
  const result = sum();
  if (pos !== tokens.length) throw new CalcError("invalid syntax (<string>, line 1)");
  return result;
}
