/**
 * A tool: a name, a description, a parameter schema and an execute function.
 *
 * Parameters are a JSON Schema (what the agent sees); arguments are validated against it before
 * `execute` runs, so `execute` receives well-formed arguments. Tools built from zod schemas, OpenAPI
 * documents, MCP servers and SQL databases all end up in this one shape. This file does not run tools:
 * `ToolEnv` does, with timeouts and error observations.
 */
import { z } from "zod";
import type { JsonSchema, ToolSpec } from "../gym/index.js";

export interface ToolContext<State = unknown> {
  /** The episode's own state (a database handle, a sandbox, ...), as created by the env's `open` hook. */
  state: State;
  /** Aborted when the tool's timeout passes or the episode closes. */
  signal: AbortSignal;
  /** Ends the episode after this turn (a `submit` or `transfer_to_human_agents` tool calls it). */
  finish(reason: string): void;
}

export interface Tool<Args = any, State = any> {
  name: string;
  description: string;
  parameters: JsonSchema;
  /** Per-call timeout in milliseconds; the ToolEnv default applies when absent. */
  timeoutMs?: number;
  /**
   * Runs the tool. The result is shown to the agent: a string as is, anything else as JSON.
   * Throwing is fine: the error becomes an error observation.
   */
  execute(args: Args, ctx: ToolContext<State>): unknown | Promise<unknown>;
}

export function toolSpec(tool: Tool): ToolSpec {
  return { name: tool.name, description: tool.description, parameters: tool.parameters };
}

/**
 * A zod 3 schema, as far as `functionTool` uses it: its definition (`_def.typeName`), its parse, and the
 * type it parses to. zod 4 schemas carry `_zod` instead and take the other overload.
 */
export interface Zod3Schema<Out = unknown> {
  readonly _def: { typeName: string; description?: string };
  readonly _output: Out;
  safeParse(data: unknown): { success: true; data: Out } | { success: false; error: { issues: { path: (string | number)[]; message: string }[] } };
}

/**
 * A tool whose parameters are a zod object schema; its JSON Schema is derived from it. zod 4 schemas go
 * through zod's own `toJSONSchema`; zod 3 schemas (a project still on zod 3) through `zod3JsonSchema`,
 * which knows zod 3's common types and names any it does not.
 */
export function functionTool<Shape extends z.ZodRawShape, State = unknown>(def: {
  name: string;
  description: string;
  parameters: z.ZodObject<Shape>;
  timeoutMs?: number;
  execute(args: z.infer<z.ZodObject<Shape>>, ctx: ToolContext<State>): unknown | Promise<unknown>;
}): Tool<z.infer<z.ZodObject<Shape>>, State>;
export function functionTool<P extends Zod3Schema, State = unknown>(def: {
  name: string;
  description: string;
  parameters: P;
  timeoutMs?: number;
  execute(args: P["_output"], ctx: ToolContext<State>): unknown | Promise<unknown>;
}): Tool<P["_output"], State>;
export function functionTool(def: {
  name: string;
  description: string;
  parameters: unknown;
  timeoutMs?: number;
  execute(args: unknown, ctx: ToolContext<unknown>): unknown;
}): Tool {
  const params = def.parameters as { _zod?: unknown; _def?: { typeName?: unknown } } | null;
  const where = `functionTool "${def.name}"`;
  if (params !== null && typeof params === "object" && "_zod" in params) {
    const v4 = def.parameters as z.ZodType;
    const schema = z.toJSONSchema(v4, { target: "draft-2020-12" }) as JsonSchema;
    delete schema.$schema;
    if (schema.type !== "object") throw new Error(`${where}: parameters must be a zod object schema (z.object({...})), got a schema of type ${JSON.stringify(schema.type)}`);
    return {
      name: def.name,
      description: def.description,
      parameters: schema,
      timeoutMs: def.timeoutMs,
      execute: (args, ctx) => {
        // The JSON Schema was checked already; this catches what it cannot express (refinements, transforms).
        const parsed = v4.safeParse(args);
        if (!parsed.success) throw new Error(`invalid arguments: ${z.prettifyError(parsed.error).replace(/\n/g, "; ")}`);
        return def.execute(parsed.data, ctx);
      },
    };
  }
  if (params !== null && typeof params === "object" && typeof params._def?.typeName === "string") {
    const v3 = def.parameters as Zod3Schema;
    if (v3._def.typeName !== "ZodObject") throw new Error(`${where}: parameters must be a zod object schema (z.object({...})), got a zod 3 ${v3._def.typeName}`);
    const schema = zod3JsonSchema(v3, where);
    return {
      name: def.name,
      description: def.description,
      parameters: schema,
      timeoutMs: def.timeoutMs,
      execute: (args, ctx) => {
        const parsed = v3.safeParse(args);
        if (!parsed.success) {
          const issues = parsed.error.issues.map((i) => (i.path.length > 0 ? `${i.path.join(".")}: ${i.message}` : i.message));
          throw new Error(`invalid arguments: ${issues.join("; ")}`);
        }
        return def.execute(parsed.data, ctx);
      },
    };
  }
  throw new Error(`${where}: parameters must be a zod schema (z.object({...}) from zod 3 or zod 4), got ${params === null ? "null" : typeof params}`);
}

/** The zod 3 definition fields `zod3JsonSchema` reads (zod 3's `_def`, by type name). */
interface Zod3Def {
  typeName: string;
  description?: string;
  checks?: { kind: string; value?: number; inclusive?: boolean; regex?: RegExp }[];
  values?: unknown;
  value?: unknown;
  type?: Zod3Schema;
  innerType?: Zod3Schema;
  schema?: Zod3Schema;
  in?: Zod3Schema;
  valueType?: Zod3Schema;
  items?: Zod3Schema[];
  options?: Zod3Schema[] | Map<unknown, Zod3Schema>;
  shape?: () => Record<string, Zod3Schema>;
  unknownKeys?: string;
  catchall?: Zod3Schema;
  minLength?: { value: number } | null;
  maxLength?: { value: number } | null;
  defaultValue?: () => unknown;
}

/** Whether a zod 3 object field may be left out (optional; a field with a default is listed as required, as zod 4's output schema lists it). */
function zod3Optional(schema: Zod3Schema): boolean {
  const d = schema._def as Zod3Def;
  if (d.typeName === "ZodOptional") return true;
  if (d.typeName === "ZodEffects" && d.schema) return zod3Optional(d.schema);
  return false;
}

/**
 * The JSON Schema (draft 2020-12) of a zod 3 schema: objects, strings, numbers, booleans, enums, literals,
 * arrays, tuples, records, unions, optional, nullable, default, refinements (as their base type) and
 * descriptions, laid out as zod 4's `toJSONSchema` lays out the same schema (its output side, as
 * `functionTool` asks for zod 4). A zod 3 type it does not know is an error that names it and says how to go on.
 */
export function zod3JsonSchema(schema: Zod3Schema, where = "functionTool"): JsonSchema {
  const d = schema._def as Zod3Def;
  const out = zod3Body(d, where);
  if (d.description !== undefined) out.description = d.description;
  return out;
}

function zod3Body(d: Zod3Def, where: string): JsonSchema {
  const inner = (s: Zod3Schema | undefined) => zod3JsonSchema(s!, where);
  switch (d.typeName) {
    case "ZodString": {
      const out: JsonSchema = { type: "string" };
      for (const c of d.checks ?? []) {
        if (c.kind === "min") out.minLength = c.value;
        else if (c.kind === "max") out.maxLength = c.value;
        else if (c.kind === "length") out.minLength = out.maxLength = c.value;
        else if (c.kind === "regex" && c.regex) out.pattern = c.regex.source;
        else if (c.kind === "email" || c.kind === "uuid" || c.kind === "url" || c.kind === "datetime" || c.kind === "date") out.format = c.kind === "url" ? "uri" : c.kind === "datetime" ? "date-time" : c.kind;
      }
      return out;
    }
    case "ZodNumber": {
      const out: JsonSchema = { type: "number" };
      for (const c of d.checks ?? []) {
        if (c.kind === "int") out.type = "integer";
        else if (c.kind === "min") out[c.inclusive === false ? "exclusiveMinimum" : "minimum"] = c.value;
        else if (c.kind === "max") out[c.inclusive === false ? "exclusiveMaximum" : "maximum"] = c.value;
      }
      return out;
    }
    case "ZodBoolean":
      return { type: "boolean" };
    case "ZodNull":
      return { type: "null" };
    case "ZodAny":
    case "ZodUnknown":
      return {};
    case "ZodLiteral":
      return { type: typeof d.value, const: d.value };
    case "ZodEnum":
      return { type: "string", enum: d.values as string[] };
    case "ZodNativeEnum": {
      const values = d.values as Record<string, string | number>;
      // A numeric TypeScript enum maps its values back to their names too; keep only the values.
      return { enum: Object.keys(values).filter((k) => typeof values[values[k] as string] !== "number").map((k) => values[k]) };
    }
    case "ZodArray": {
      const out: JsonSchema = { type: "array", items: inner(d.type) };
      if (d.minLength) out.minItems = d.minLength.value;
      if (d.maxLength) out.maxItems = d.maxLength.value;
      return out;
    }
    case "ZodTuple":
      return { type: "array", prefixItems: (d.items ?? []).map(inner), items: false, minItems: d.items?.length ?? 0, maxItems: d.items?.length ?? 0 };
    case "ZodRecord":
      return { type: "object", propertyNames: { type: "string" }, additionalProperties: inner(d.valueType) };
    case "ZodObject": {
      const shape = d.shape!();
      const properties: Record<string, JsonSchema> = {};
      const required: string[] = [];
      for (const [key, field] of Object.entries(shape)) {
        properties[key] = inner(field);
        if (!zod3Optional(field)) required.push(key);
      }
      const out: JsonSchema = { type: "object", properties };
      if (required.length > 0) out.required = required;
      const catchall = d.catchall && (d.catchall._def as Zod3Def).typeName !== "ZodNever" ? d.catchall : undefined;
      if (catchall) out.additionalProperties = inner(catchall);
      else if (d.unknownKeys !== "passthrough") out.additionalProperties = false;
      return out;
    }
    case "ZodUnion":
    case "ZodDiscriminatedUnion":
      return { anyOf: [...(d.options instanceof Map ? d.options.values() : (d.options ?? []))].map(inner) };
    case "ZodOptional":
      return inner(d.innerType);
    case "ZodNullable": {
      const base = inner(d.innerType);
      // A plain typed schema takes "null" into its type list; anything else becomes a choice.
      if (typeof base.type === "string" && base.enum === undefined && base.const === undefined) return { ...base, type: [base.type, "null"] };
      return { anyOf: [base, { type: "null" }] };
    }
    case "ZodDefault":
      return { ...inner(d.innerType), default: d.defaultValue!() };
    case "ZodEffects":
      return inner(d.schema);
    case "ZodBranded":
      return inner(d.type);
    case "ZodReadonly":
    case "ZodCatch":
      return inner(d.innerType);
    case "ZodPipeline":
      return inner(d.in);
    default:
      throw new Error(
        `${where}: the zod 3 type ${d.typeName} has no JSON Schema here; sinkflex converts zod 3's common types only. ` +
          `Use zod 4 (npm install zod@4, or import { z } from "zod/v4" with zod 3.25), whose toJSONSchema covers every type, or describe the parameter with a simpler type`,
      );
  }
}
