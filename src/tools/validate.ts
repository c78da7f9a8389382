/**
 * Argument validation against a tool's JSON Schema, with messages an agent can act on.
 * Validators are compiled once per schema and cached.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import type { JsonSchema } from "../gym/chat.js";

const ajv = new Ajv({ allErrors: true, strict: false, coerceTypes: false });
const cache = new WeakMap<JsonSchema, ValidateFunction>();

export type ValidationResult = { ok: true } | { ok: false; message: string };

export function validateArguments(schema: JsonSchema, args: unknown): ValidationResult {
  let validate = cache.get(schema);
  if (!validate) {
    validate = ajv.compile(schema);
    cache.set(schema, validate);
  }
  if (validate(args)) return { ok: true };
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
