/**
 * The options a remote client may set: an explicit allow-list per env, each option with a declared
 * type and bounds. Envs declare theirs at registration (`EnvDefaults.clientOptions`); `serveEnv`
 * checks every client's session and reset options against it before they reach `make` or `reset`.
 *
 * An allow-list never holds paths, URLs, credentials or unbounded sizes: those are fixed by whoever
 * starts the server. This file is the rules and their checker only; it does no I/O.
 */

/** One option's type and bounds. */
export type OptionRule =
  | { type: "integer"; min: number; max: number }
  | { type: "number"; min: number; max: number }
  | { type: "boolean" }
  | { type: "enum"; values: readonly (string | number)[] }
  | { type: "list"; item: OptionRule; maxItems: number };

/** Option name -> rule. */
export type OptionRules = Readonly<Record<string, OptionRule>>;

/** The allow-lists of one env: the options of a new session (`make`) and those of `reset`. */
export interface ClientOptionRules {
  session?: OptionRules;
  reset?: OptionRules;
}

/** A seed: any 31-bit non-negative integer. */
export const SEED_RULE: OptionRule = { type: "integer", min: 0, max: 2 ** 31 - 1 };

/** The wrapper settings of the standard stack (see registry.ts), open to clients of every registered env. */
export const WRAPPER_CLIENT_OPTIONS: OptionRules = {
  maxEpisodeSteps: { type: "integer", min: 1, max: 10_000 },
  tokenBudget: { type: "integer", min: 1, max: 10_000_000 },
};

/** The reset option of every task-set env: which task to play (the env checks it against its task count). */
export const TASK_INDEX_RESET_OPTIONS: OptionRules = { taskIndex: { type: "integer", min: 0, max: 10_000_000 } };

/** A client option outside the allow-list or its bounds (the server answers 400). */
export class ClientOptionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ClientOptionError";
  }
}

/** The rule in words, e.g. "an integer in 1..500" or "a list of at most 5 of 1, 2, 3, 4, 5". */
export function describeRule(rule: OptionRule): string {
  switch (rule.type) {
    case "integer":
      return `an integer in ${rule.min}..${rule.max}`;
    case "number":
      return `a number in ${rule.min}..${rule.max}`;
    case "boolean":
      return "true or false";
    case "enum":
      return `one of ${rule.values.map((v) => JSON.stringify(v)).join(", ")}`;
    case "list":
      return `a list of 1 to ${rule.maxItems} items, each ${describeRule(rule.item)}`;
  }
}

/** "count (an integer in 1..500), levels (...)", or "none" for an empty allow-list. */
export function describeRules(rules: OptionRules): string {
  const names = Object.keys(rules);
  if (names.length === 0) return "none";
  return names.map((n) => `${n} (${describeRule(rules[n]!)})`).join("; ");
}

function fits(rule: OptionRule, value: unknown): boolean {
  switch (rule.type) {
    case "integer":
      return typeof value === "number" && Number.isInteger(value) && value >= rule.min && value <= rule.max;
    case "number":
      return typeof value === "number" && Number.isFinite(value) && value >= rule.min && value <= rule.max;
    case "boolean":
      return typeof value === "boolean";
    case "enum":
      return (typeof value === "string" || typeof value === "number") && rule.values.includes(value);
    case "list":
      return Array.isArray(value) && value.length >= 1 && value.length <= rule.maxItems && value.every((v) => fits(rule.item, v));
  }
}

/** A short, bounded rendering of a client's value for an error message. */
function shown(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/**
 * Checks a client's `options` (of a new session or of a reset) against `rules`; `fixed` names the
 * options the server's operator set, which clients may not change. Throws `ClientOptionError`
 * naming the first offending option and what is allowed.
 */
export function checkClientOptions(
  where: "session" | "reset",
  options: Record<string, unknown>,
  rules: OptionRules,
  fixed: ReadonlySet<string> = new Set(),
): void {
  for (const [name, value] of Object.entries(options)) {
    if (value === undefined) continue;
    if (fixed.has(name)) {
      throw new ClientOptionError(`${where} option "${name}" is fixed by the server and cannot be set by a client; the ${where} options a client may set: ${describeRules(rules)}`);
    }
    const rule = Object.hasOwn(rules, name) ? rules[name] : undefined;
    if (!rule) {
      throw new ClientOptionError(
        `${where} option "${name}" is not one a client may set; the ${where} options a client may set: ${describeRules(rules)} ` +
          `(paths, URLs, credentials and other settings are fixed by whoever starts the server, e.g. \`sinkflex envs serve --options-file\`)`,
      );
    }
    if (!fits(rule, value)) throw new ClientOptionError(`${where} option "${name}" must be ${describeRule(rule)}, got ${shown(value)}`);
  }
}
