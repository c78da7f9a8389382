/**
 * Python-compatible JSON for the tau-bench databases: parse, dump, round, clone and compare values
 * so that tool outputs are byte-for-byte what the benchmark's original implementation prints.
 *
 * Python distinguishes `10` (int) from `10.0` (float) and prints them differently; JavaScript does not.
 * Here an integral *float* is a boxed `Number` object (arithmetic on it still works through `valueOf`),
 * every other number is a primitive: a primitive integer is a Python int, anything non-integral is a
 * float. Objects whose keys look like array indices (JavaScript would reorder those) remember their key
 * order under a symbol. `pyDumps` prints like `json.dumps` with its defaults (", " and ": " separators,
 * ASCII escapes). This file knows nothing of the tools or the envs.
 */

/** A JSON value as loaded here: numbers may be boxed (integral floats). */
export type PyValue = null | boolean | number | string | PyValue[] | { [key: string]: PyValue };
export type PyRecord = Record<string, any>;

/** Remembers the insertion order of objects that have integer-like keys. */
export const KEY_ORDER: unique symbol = Symbol("pyjson.keyOrder");

/** True for an integral float (a boxed Number). */
function isBoxed(value: unknown): value is number {
  return value instanceof Number;
}

/** True when Python would hold this number as a float. */
export function isPyFloat(value: unknown): boolean {
  return value instanceof Number || (typeof value === "number" && !Number.isInteger(value));
}

/** The number as a primitive (unboxes integral floats). */
export function num(value: unknown): number {
  if (value instanceof Number) return value.valueOf();
  if (typeof value === "number") return value;
  throw new TypeError(`expected a number, got ${JSON.stringify(value)}`);
}

/** A Python float holding `x` (boxed when integral, so that it prints as "x.0"). */
export function pyFloat(x: number): number {
  return Number.isInteger(x) ? (new Number(x) as unknown as number) : x;
}

/** `a + b` with Python's int/float typing. */
export function pyAdd(a: unknown, b: unknown): number {
  const r = num(a) + num(b);
  return isPyFloat(a) || isPyFloat(b) ? pyFloat(r) : r;
}

/** `a - b` with Python's int/float typing. */
export function pySub(a: unknown, b: unknown): number {
  const r = num(a) - num(b);
  return isPyFloat(a) || isPyFloat(b) ? pyFloat(r) : r;
}

/** `a * b` with Python's int/float typing. */
export function pyMul(a: unknown, b: unknown): number {
  const r = num(a) * num(b);
  return isPyFloat(a) || isPyFloat(b) ? pyFloat(r) : r;
}

/** `abs(a)` with Python's typing. */
export function pyAbs(a: unknown): number {
  const r = Math.abs(num(a));
  return isPyFloat(a) ? pyFloat(r === 0 ? 0 : r) : r;
}

/**
 * Python's `round(x, ndigits)`: an int stays an int; a float is rounded on its exact binary value,
 * ties to even, and stays a float.
 */
export function pyRound(value: unknown, ndigits = 0): number {
  if (!isPyFloat(value)) return num(value);
  const x = num(value);
  if (!Number.isFinite(x)) return x;
  const scale = 10 ** ndigits;
  // toFixed rounds the exact binary value; only exact ties (x * 10^n ends in .5 exactly) differ from Python.
  let r = Number(x.toFixed(ndigits));
  const scaled = Math.abs(x) * scale;
  if (ndigits <= 3 && Number.isInteger(x * 2 ** 10) && scaled - Math.floor(scaled) === 0.5) {
    const lower = Math.floor(scaled);
    const even = lower % 2 === 0 ? lower : lower + 1;
    r = (Math.sign(x) * even) / scale;
  }
  return pyFloat(r === 0 ? 0 : r);
}

/** Python's `repr(float)` / `str(float)`: the shortest round-trip digits in Python's layout. */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "Infinity";
  if (x === -Infinity) return "-Infinity";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const [mantissa, expText] = x.toExponential().split("e") as [string, string];
  const exp = Number(expText);
  const negative = mantissa.startsWith("-");
  const digits = mantissa.replace("-", "").replace(".", "");
  const sign = negative ? "-" : "";
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = Math.abs(exp) < 10 ? `0${Math.abs(exp)}` : String(Math.abs(exp));
    return `${sign}${m}e${exp < 0 ? "-" : "+"}${e}`;
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
  const intPart = digits.length > exp + 1 ? digits.slice(0, exp + 1) : digits + "0".repeat(exp + 1 - digits.length);
  const frac = digits.length > exp + 1 ? digits.slice(exp + 1) : "0";
  return `${sign}${intPart}.${frac}`;
}

/** Python's `str()` of a number. */
export function pyNumStr(value: unknown): string {
  if (isBoxed(value)) return pyFloatRepr(num(value));
  const x = num(value);
  return Number.isInteger(x) ? String(x) : pyFloatRepr(x);
}

/** The keys of an object in Python's (insertion) order. */
export function pyKeys(obj: PyRecord): string[] {
  const order = (obj as { [KEY_ORDER]?: string[] })[KEY_ORDER];
  return order ? order.filter((k) => Object.prototype.hasOwnProperty.call(obj, k)) : Object.keys(obj);
}

function dumpString(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += "\\\\";
    else if (c === 0x0a) out += "\\n";
    else if (c === 0x0d) out += "\\r";
    else if (c === 0x09) out += "\\t";
    else if (c === 0x08) out += "\\b";
    else if (c === 0x0c) out += "\\f";
    else if (c < 0x20 || c > 0x7e) out += `\\u${c.toString(16).padStart(4, "0")}`;
    else out += s[i];
  }
  return out + '"';
}

/** `json.dumps(value)` with Python's defaults; `sortKeys` is `sort_keys=True`. */
export function pyDumps(value: unknown, sortKeys = false): string {
  if (value === null || value === undefined) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "number" || value instanceof Number) return pyNumStr(value);
  if (typeof value === "string") return dumpString(value);
  if (Array.isArray(value)) return `[${value.map((v) => pyDumps(v, sortKeys)).join(", ")}]`;
  if (typeof value === "object") {
    let keys = pyKeys(value as PyRecord);
    if (sortKeys) keys = [...keys].sort();
    return `{${keys.map((k) => `${dumpString(k)}: ${pyDumps((value as PyRecord)[k], sortKeys)}`).join(", ")}}`;
  }
  throw new TypeError(`pyDumps: cannot serialize a ${typeof value}`);
}

/** A deep copy that keeps boxed floats and remembered key orders. */
export function pyClone<T>(value: T): T {
  if (value === null || typeof value !== "object") return value;
  if (value instanceof Number) return pyFloat(value.valueOf()) as unknown as T;
  if (Array.isArray(value)) return value.map(pyClone) as unknown as T;
  const out: PyRecord = {};
  for (const k of Object.keys(value)) out[k] = pyClone((value as PyRecord)[k]);
  const order = (value as { [KEY_ORDER]?: string[] })[KEY_ORDER];
  if (order) Object.defineProperty(out, KEY_ORDER, { value: [...order], enumerable: false, writable: true });
  return out as T;
}

/** Structural equality: key order aside, numbers by value (10 equals 10.0). */
export function pyEqual(a: unknown, b: unknown): boolean {
  if (a instanceof Number || b instanceof Number) {
    return (typeof a === "number" || a instanceof Number) && (typeof b === "number" || b instanceof Number) && num(a) === num(b);
  }
  if (a === b) return true;
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    return a.length === bb.length && a.every((v, i) => pyEqual(v, bb[i]));
  }
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && pyEqual((a as PyRecord)[k], (b as PyRecord)[k]));
}

/** The first path where two values differ ("" when equal), for evidence and error messages. */
export function firstDifference(a: unknown, b: unknown, path = ""): string | undefined {
  if (pyEqual(a, b)) return undefined;
  if (a && b && typeof a === "object" && typeof b === "object" && !(a instanceof Number) && !(b instanceof Number)) {
    if (Array.isArray(a) && Array.isArray(b)) {
      if (a.length !== b.length) return `${path || "."}: length ${a.length} != ${b.length}`;
      for (let i = 0; i < a.length; i++) {
        const d = firstDifference(a[i], b[i], `${path}[${i}]`);
        if (d) return d;
      }
    } else if (!Array.isArray(a) && !Array.isArray(b)) {
      for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
        const d = firstDifference((a as PyRecord)[k], (b as PyRecord)[k], `${path}.${k}`);
        if (d) return d;
      }
    }
  }
  return `${path || "."}: ${pyDumps(a)} != ${pyDumps(b)}`;
}

const INDEX_LIKE = /^(?:0|[1-9]\d*)$/;

/**
 * Parses JSON text keeping what `JSON.parse` loses: integral floats ("10.0") stay floats and objects
 * with integer-like keys keep their key order.
 */
export function pyParse(text: string): any {
  let i = 0;
  const fail = (what: string): never => {
    throw new SyntaxError(`pyParse: ${what} at offset ${i}`);
  };
  const ws = () => {
    for (;;) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
      else return;
    }
  };
  const str = (): string => {
    const start = ++i;
    let simple = true;
    for (;;) {
      const c = text.charCodeAt(i);
      if (Number.isNaN(c)) fail("unterminated string");
      if (c === 0x22) break;
      if (c === 0x5c) {
        simple = false;
        i += 2;
        continue;
      }
      i++;
    }
    const raw = text.slice(start, i);
    i++;
    return simple ? raw : (JSON.parse(`"${raw}"`) as string);
  };
  const value = (): any => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const obj: PyRecord = {};
      let order: string[] | undefined;
      const keys: string[] = [];
      ws();
      if (text[i] === "}") {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a key");
        const key = str();
        ws();
        if (text[i++] !== ":") fail("expected ':'");
        obj[key] = value();
        keys.push(key);
        if (INDEX_LIKE.test(key)) order = keys;
        ws();
        const d = text[i++];
        if (d === "}") break;
        if (d !== ",") fail("expected ',' or '}'");
      }
      if (order) Object.defineProperty(obj, KEY_ORDER, { value: keys, enumerable: false, writable: true });
      return obj;
    }
    if (c === "[") {
      i++;
      const arr: any[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value());
        ws();
        const d = text[i++];
        if (d === "]") break;
        if (d !== ",") fail("expected ',' or ']'");
      }
      return arr;
    }
    if (c === '"') return str();
    if (text.startsWith("true", i)) {
      i += 4;
      return true;
    }
    if (text.startsWith("false", i)) {
      i += 5;
      return false;
    }
    if (text.startsWith("null", i)) {
      i += 4;
      return null;
    }
    const m = /-?\d+(\.\d+)?([eE][+-]?\d+)?/y;
    m.lastIndex = i;
    const found = m.exec(text);
    if (!found) return fail("unexpected character");
    i += found[0].length;
    const x = Number(found[0]);
    return found[1] !== undefined || found[2] !== undefined ? pyFloat(x) : x;
  };
  const result = value();
  ws();
  if (i !== text.length) fail("trailing characters");
  return result;
}

/** Adds a key to an object, keeping a remembered key order up to date. */
export function pySet(obj: PyRecord, key: string, value: unknown): void {
  const order = (obj as { [KEY_ORDER]?: string[] })[KEY_ORDER];
  if (order && !Object.prototype.hasOwnProperty.call(obj, key)) order.push(key);
  else if (!order && INDEX_LIKE.test(key)) {
    Object.defineProperty(obj, KEY_ORDER, { value: [...Object.keys(obj), key], enumerable: false, writable: true });
  }
  obj[key] = value;
}
