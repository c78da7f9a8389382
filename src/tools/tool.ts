/**
 * A tool: a name, a description, a parameter schema and an execute function.
 *
 * Parameters are a JSON Schema (what the agent sees); arguments are validated against it before
 * `execute` runs, so `execute` receives well-formed arguments. Tools built from zod schemas, OpenAPI
 * documents, MCP servers and SQL databases all end up in this one shape. This file does not run tools:
 * `ToolEnv` does, with timeouts and error observations.
 */
import { z } from "zod";
import type { JsonSchema, ToolSpec } from "../gym/chat.js";

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

/** A tool whose parameters are a zod object schema; its JSON Schema is derived from it. */
export function functionTool<Shape extends z.ZodRawShape, State = unknown>(def: {
  name: string;
  description: string;
  parameters: z.ZodObject<Shape>;
  timeoutMs?: number;
  execute(args: z.infer<z.ZodObject<Shape>>, ctx: ToolContext<State>): unknown | Promise<unknown>;
}): Tool<z.infer<z.ZodObject<Shape>>, State> {
  const schema = z.toJSONSchema(def.parameters, { target: "draft-2020-12" }) as JsonSchema;
  delete schema.$schema;
  return {
    name: def.name,
    description: def.description,
    parameters: schema,
    timeoutMs: def.timeoutMs,
    execute: (args, ctx) => {
      // The JSON Schema was checked already; this catches what it cannot express (refinements, transforms).
      const parsed = def.parameters.safeParse(args);
      if (!parsed.success) throw new Error(`invalid arguments: ${z.prettifyError(parsed.error).replace(/\n/g, "; ")}`);
      return def.execute(parsed.data, ctx);
    },
  };
}
