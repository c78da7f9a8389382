/**
 * A small arithmetic evaluator for the `calculate` tool: numbers, + - * /, parentheses and unary
 * minus, with the usual precedence. It is a recursive-descent parser, not `eval`: anything else is a
 * `SyntaxError` that says where the expression went wrong.
 */

export function evaluateExpression(expression: string): number {
  const text = expression;
  let i = 0;
  const fail = (what: string): never => {
    throw new SyntaxError(`${what} at position ${i} of "${text}"; use numbers, + - * / and parentheses`);
  };
  const skip = () => {
    while (i < text.length && /\s/.test(text[i]!)) i++;
  };
  const number = (): number => {
    skip();
    const m = /^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?/.exec(text.slice(i));
    if (!m) return fail(i >= text.length ? "unexpected end of expression" : `unexpected "${text[i]}"`);
    i += m[0].length;
    return Number(m[0]);
  };
  const factor = (): number => {
    skip();
    if (text[i] === "-") {
      i++;
      return -factor();
    }
    if (text[i] === "+") {
      i++;
      return factor();
    }
    if (text[i] === "(") {
      i++;
      const v = sum();
      skip();
      if (text[i] !== ")") fail('missing ")"');
      i++;
      return v;
    }
    return number();
  };
  const product = (): number => {
    let v = factor();
    for (;;) {
      skip();
      const op = text[i];
      if (op !== "*" && op !== "/") return v;
      i++;
      const rhs = factor();
      if (op === "/" && rhs === 0) throw new RangeError(`division by zero in "${text}"`);
      v = op === "*" ? v * rhs : v / rhs;
    }
  };
  function sum(): number {
    let v = product();
    for (;;) {
      skip();
      const op = text[i];
      if (op !== "+" && op !== "-") return v;
      i++;
      const rhs = product();
      v = op === "+" ? v + rhs : v - rhs;
    }
  }
  if (text.trim() === "") fail("empty expression");
  const value = sum();
  skip();
  if (i < text.length) fail(`unexpected "${text[i]}"`);
  return value;
}

/** A number as the calculator prints it: integers exactly, others to at most 10 decimals. */
export function formatNumber(value: number): string {
  if (Number.isInteger(value)) return String(value);
  return String(Number(value.toFixed(10)));
}
