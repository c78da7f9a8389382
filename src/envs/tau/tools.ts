/**
 * The tool table of each domain: the implementations, their schemas and descriptions from the
 * benchmark's `tools.json`, and `runAction`, which executes one `{name, kwargs}` action on a database
 * the way the benchmark's replay does. Turning them into agent-facing `Tool`s for a `ToolEnv` is here too.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { ToolSpec } from "../../core/index.js";
import type { Tool } from "../../tools/index.js";
import { AIRLINE_TOOLS, AIRLINE_WRITE_TOOLS } from "./airline-tools.js";
import { domainDir, type Domain, type TauDb } from "./db.js";
import { pyClone } from "./pyjson.js";
import { RETAIL_TOOLS, RETAIL_WRITE_TOOLS, type ToolImpl } from "./retail-tools.js";

export const TOOL_IMPLS: Record<Domain, Record<string, ToolImpl>> = { retail: RETAIL_TOOLS, airline: AIRLINE_TOOLS };
export const WRITE_TOOLS: Record<Domain, Set<string>> = { retail: RETAIL_WRITE_TOOLS, airline: AIRLINE_WRITE_TOOLS };

const specCache = new Map<string, ToolSpec[]>();

/** The tool schemas of a domain, as the benchmark publishes them (`tools.json`). */
export function toolSpecs(domain: Domain): ToolSpec[] {
  const path = join(domainDir(domain), "tools.json");
  let specs = specCache.get(path);
  if (!specs) {
    let raw: any[];
    try {
      raw = JSON.parse(readFileSync(path, "utf8"));
    } catch (err) {
      throw new Error(`cannot read the ${domain} tool schemas at ${path} (${(err as Error).message}); set SINKFLEX_DATA_DIR to the data folder`);
    }
    specs = raw.map((t) => {
      const f = t.function ?? t;
      return { name: f.name, description: f.description, parameters: f.parameters };
    });
    for (const s of specs) if (!TOOL_IMPLS[domain][s.name]) throw new Error(`${path}: tool "${s.name}" has no implementation in the ${domain} domain`);
    specCache.set(path, specs);
  }
  return specs;
}

/**
 * Runs one action as the benchmark's replay does: the tool's output string, or `null` for
 * `transfer_to_human_agents` (its output is not part of the record). Unknown tools are an error.
 */
export function runAction(domain: Domain, db: TauDb, name: string, kwargs: Record<string, any>): string {
  const impl = TOOL_IMPLS[domain][name];
  if (!impl) throw new Error(`unknown ${domain} tool "${name}"; known: ${Object.keys(TOOL_IMPLS[domain]).join(", ")}`);
  return impl(db, pyClone(kwargs));
}

/** The episode state the agent-facing tools act on. */
export interface TauState {
  db: TauDb;
  /** Every tool call the agent made, in order, with its output (for evidence). */
  calls: { name: string; kwargs: Record<string, any>; output: string }[];
}

/** The domain's tools for a `ToolEnv`; `transfer_to_human_agents` ends the episode. */
export function agentTools(domain: Domain): Tool<Record<string, any>, TauState>[] {
  return toolSpecs(domain).map((spec) => ({
    name: spec.name,
    description: spec.description,
    parameters: spec.parameters,
    execute: (args, ctx) => {
      const output = runAction(domain, ctx.state.db, spec.name, args);
      ctx.state.calls.push({ name: spec.name, kwargs: args, output });
      if (spec.name === "transfer_to_human_agents") ctx.finish("transfer_to_human_agents");
      return output;
    },
  }));
}
