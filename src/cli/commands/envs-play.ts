/**
 * `sinkflex envs play <id>`: a person plays one episode of any registered env as the agent, in the
 * terminal. It shows exactly what an agent sees (the opening messages, the tools, each observation)
 * and reads turns: a plain line is a message (a turn without tool calls), `/call name {json}` is a
 * tool call, `/tools` lists the tools with their parameters, `/quit` leaves. The episode's reward and
 * evidence are printed at the end. `playInteractive` takes any streams, so tests drive it directly.
 */
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import type { Command } from "commander";
import type { AgentTurn, ChatMessage, ChatObservation, ToolSpec } from "../../gym/index.js";
import type { Env } from "../../gym/index.js";
import { make, registeredIds } from "../../gym/index.js";
import { registerBundledEnvs } from "../../envs/index.js";
import { UsageError } from "../usage-error.js";
import { envsCommand } from "./envs.js";

const HELP = "Type a message to the user, or `/call tool_name {json arguments}`; `/tools` lists the tools, `/help` shows this, `/quit` leaves.";

function formatMessage(m: ChatMessage): string {
  if (m.role === "tool") return `[tool ${m.name}${m.isError ? " error" : ""}] ${m.content}`;
  if (m.role === "assistant") {
    const calls = (m.toolCalls ?? []).map((c) => `\n  -> ${c.name}(${c.arguments})`).join("");
    return `[assistant] ${m.content}${calls}`;
  }
  return `[${m.role}] ${m.content}`;
}

function toolSummary(tool: ToolSpec): string {
  const props = (tool.parameters?.properties ?? {}) as Record<string, { type?: string }>;
  const required = new Set((tool.parameters?.required as string[] | undefined) ?? []);
  const params = Object.entries(props).map(([name, p]) => `${name}${required.has(name) ? "" : "?"}: ${p.type ?? "any"}`);
  return `${tool.name}(${params.join(", ")})`;
}

function toolDetails(tool: ToolSpec): string {
  return `${toolSummary(tool)}\n    ${tool.description.replace(/\n/g, "\n    ")}\n    parameters: ${JSON.stringify(tool.parameters)}`;
}

/** Parses one typed line into a turn, a command, or an error to show. */
export function parseLine(line: string, callNumber: number): { turn: AgentTurn } | { command: "tools" | "quit" | "help" } | { error: string } | undefined {
  const text = line.trim();
  if (text === "") return undefined;
  if (text === "/quit" || text === "/exit") return { command: "quit" };
  if (text === "/tools") return { command: "tools" };
  if (text === "/help") return { command: "help" };
  if (text.startsWith("/call")) {
    const m = /^\/call\s+([A-Za-z0-9_.-]+)\s*(.*)$/s.exec(text);
    if (!m) return { error: "usage: /call tool_name {json arguments}, e.g. /call get_order_details {\"order_id\": \"#W0000000\"}" };
    return { turn: { content: "", toolCalls: [{ id: `call_${callNumber}`, name: m[1]!, arguments: m[2]!.trim() || "{}" }] } };
  }
  if (text.startsWith("/")) return { error: `unknown command "${text.split(/\s/)[0]}". ${HELP}` };
  return { turn: { content: text, toolCalls: [] } };
}

export interface PlayResult {
  reward: number;
  ended: boolean;
  steps: number;
}

/** Plays one episode with a person typing the agent's turns on `input`; everything shown goes to `output`. */
export async function playInteractive(
  env: Env<ChatObservation, AgentTurn>,
  io: { input: Readable; output: Writable },
  options: { taskIndex?: number; seed?: number } = {},
): Promise<PlayResult> {
  const write = (s: string) => io.output.write(`${s}\n`);
  const resetOptions = options.taskIndex !== undefined ? { taskIndex: options.taskIndex } : {};
  const [first, info] = await env.reset({ seed: options.seed ?? 0, options: resetOptions });
  const tools = first.tools ?? [];
  write(`== ${env} (task ${String(info.taskIndex ?? "?")}) ==`);
  for (const m of first.messages) write(formatMessage(m));
  write(`\nTools: ${tools.map(toolSummary).join("; ")}`);
  write(HELP);
  const rl = createInterface({ input: io.input, terminal: false });
  let steps = 0;
  let reward = 0;
  let ended = false;
  io.output.write("> ");
  try {
    for await (const line of rl) {
      const parsed = parseLine(line, steps + 1);
      if (parsed === undefined) {
        io.output.write("> ");
        continue;
      }
      if ("error" in parsed) write(parsed.error);
      else if ("command" in parsed) {
        if (parsed.command === "quit") break;
        if (parsed.command === "tools") for (const t of tools) write(toolDetails(t));
        else write(HELP);
      } else {
        const [obs, r, terminated, truncated, stepInfo] = await env.step(parsed.turn);
        steps++;
        for (const m of obs.messages) write(formatMessage(m));
        if (terminated || truncated) {
          reward = r;
          ended = true;
          write(`\n== episode ${terminated ? "ended" : "cut off"} after ${steps} turns: reward ${r}${stepInfo.finishReason ? ` (${String(stepInfo.finishReason)})` : ""} ==`);
          if (stepInfo.evidence) write(`evidence: ${JSON.stringify(stepInfo.evidence)}`);
          if (stepInfo.rewardError) write(`reward error: ${String(stepInfo.rewardError)}`);
          break;
        }
      }
      io.output.write("> ");
    }
  } finally {
    rl.close();
  }
  if (!ended) write(`\n== left after ${steps} turns; the episode did not end ==`);
  return { reward, ended, steps };
}

/** Adds `play` to the `envs` command group of `program`. */
export function registerEnvsPlayCommand(program: Command): void {
  const envs = envsCommand(program);
  envs
    .command("play <id>")
    .description("Play one episode of an env as the agent in the terminal: see the observations and tools, type messages or /call tool_name {json}")
    .option("--task <n>", "the task index to play (random when absent)")
    .option("--seed <n>", "the episode seed", "0")
    .option("--options <json>", "env options as JSON, e.g. '{\"taskSet\":\"dev\"}'")
    .action(async (id: string, opts: { task?: string; seed: string; options?: string }) => {
      registerBundledEnvs();
      if (!registeredIds().includes(id)) throw new UsageError(`unknown env id "${id}". Registered ids: ${registeredIds().join(", ")}.`);
      const taskIndex = opts.task === undefined ? undefined : Number(opts.task);
      if (taskIndex !== undefined && (!Number.isInteger(taskIndex) || taskIndex < 0)) throw new UsageError(`--task must be a task index (0, 1, ...), got "${opts.task}"`);
      const seed = Number(opts.seed);
      if (!Number.isInteger(seed)) throw new UsageError(`--seed must be an integer, got "${opts.seed}"`);
      let envOptions: Record<string, unknown> = {};
      if (opts.options !== undefined) {
        try {
          envOptions = JSON.parse(opts.options);
        } catch {
          throw new UsageError(`--options must be a JSON object, got ${opts.options}`);
        }
      }
      const env = await make<ChatObservation, AgentTurn>(id, envOptions);
      try {
        await playInteractive(env, { input: process.stdin, output: process.stdout }, { taskIndex, seed });
      } finally {
        await env.close();
      }
    });
}
