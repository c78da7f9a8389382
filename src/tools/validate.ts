/**
 * Argument validation against a tool's JSON Schema, with messages an agent can act on, and a short
 * call signature (`listPets({status: "available" | "sold", limit?: integer})`) to say what is expected.
 * Validators are compiled once per schema and cached, by object and by content (envs made per episode
 * build equal schemas as new objects). A schema the validator cannot compile (an odd
 * keyword from a foreign source) is not checked here: the tool itself still rejects bad arguments.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import formatsPlugin from "ajv-formats";
import type { JsonSchema } from "../gym/index.js";

const ajv = new Ajv({
  allErrors: true,
  strict: false,
  coerceTypes: false,
  // Formats this validator does not know (OpenAPI's "int64", a service's own "phone") are not checked, silently.
  logger: { log: () => undefined, warn: () => undefined, error: (...args: unknown[]) => console.error(...args) },
});
// Standard formats ("date", "date-time", "email", "uri", "uuid", ...) are checked.
// ajv-formats is CommonJS: under NodeNext its callable export is the module itself.
(formatsPlugin as unknown as (a: Ajv) => void)(ajv);
const cache = new WeakMap<JsonSchema, ValidateFunction | "unchecked">();
// By the schema's JSON text; emptied when it reaches BY_TEXT_MAX entries (a process that keeps making new schemas).
const byText = new Map<string, ValidateFunction | "unchecked">();
const BY_TEXT_MAX = 2_000;

export type ValidationResult = { ok: true } | { ok: false; message: string };

export function validateArguments(schema: JsonSchema, args: unknown): ValidationResult {
  let validate = cache.get(schema);
  if (!validate) {
    const text = JSON.stringify(schema);
    validate = byText.get(text);
    if (!validate) {
      try {
        validate = ajv.compile(schema);
      } catch {
        validate = "unchecked";
      }
      if (byText.size >= BY_TEXT_MAX) byText.clear();
      byText.set(text, validate);
    }
    cache.set(schema, validate);
  }
  if (validate === "unchecked") return { ok: true };
  try {
    if (validate(args)) return { ok: true };
  } catch (err) {
    // A pathological value (nesting deep enough to exhaust the stack) cannot be checked: it is refused.
    return { ok: false, message: `arguments could not be checked (${(err as Error).message}); send smaller, less deeply nested arguments` };
  }
  return { ok: false, message: describeErrors(validate.errors ?? []) };
}

function describeErrors(errors: ErrorObject[]): string {
  return errors
    .slice(0, 5)
    .map((e) => {
      const where = e.instancePath ? `argument ${e.instancePath.slice(1).replace(/\//g, ".")}` : "arguments";
      if (e.keyword === "required") return `${where}: missing required property "${(e.params as { missingProperty: string }).missingProperty}"`;
      if (e.keyword === "additionalProperties")
        return `${where}: unexpected property "${(e.params as { additionalProperty: string }).additionalProperty}"`;
      if (e.keyword === "enum") return `${where}: must be one of ${JSON.stringify((e.params as { allowedValues: unknown[] }).allowedValues)}`;
      return `${where}: ${e.message ?? e.keyword}`;
    })
    .join("; ");
}

/** A one-line call signature of a tool, for error messages: `name({a: string, b?: integer})`, at most ~300 characters. */
export function signature(name: string, schema: JsonSchema): string {
  const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set(Array.isArray(schema.required) ? (schema.required as string[]) : []);
  const parts = Object.entries(props).map(([k, s]) => `${k}${required.has(k) ? "" : "?"}: ${typeText(s)}`);
  const text = `${name}({${parts.join(", ")}})`;
  return text.length <= 300 ? text : `${text.slice(0, 297)}...`;
}

function typeText(s: JsonSchema | undefined): string {
  if (!s || typeof s !== "object") return "any";
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (Array.isArray(s.type)) return s.type.join(" | ");
  if (s.type === "array") return `${typeText(s.items as JsonSchema)}[]`;
  if (typeof s.type === "string") return s.type;
  for (const k of ["anyOf", "oneOf"]) if (Array.isArray(s[k])) return (s[k] as JsonSchema[]).map(typeText).join(" | ");
  return "any";
}
