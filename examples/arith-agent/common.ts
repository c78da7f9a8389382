/**
 * What the three arith agent examples share: the episode's context (from the environment variables
 * the trainer starts a program with, or handed to a function) and a call of one of the session's tools
 * over HTTP. An example, not part of the library.
 */
export interface Task {
  messages: { role: string; content: string }[];
  tools: { type: "function"; function: { name: string; description: string; parameters: Record<string, unknown> } }[];
  toolsURL: string;
}
export interface AgentCtx {
  baseURL: string;
  apiKey: string;
  task: Task;
}
export const MAX_TURNS = 4;

/** The context of a program started by the trainer: OPENAI_BASE_URL, OPENAI_API_KEY, SINKFLEX_TASK. */
export function contextFromEnvironment(): AgentCtx {
  const { OPENAI_BASE_URL, OPENAI_API_KEY, SINKFLEX_TASK } = process.env;
  if (!OPENAI_BASE_URL || !SINKFLEX_TASK) throw new Error("start this agent from a sinkflex training run (suites[].agent.command): OPENAI_BASE_URL and SINKFLEX_TASK are not set");
  return { baseURL: OPENAI_BASE_URL, apiKey: OPENAI_API_KEY ?? "", task: JSON.parse(SINKFLEX_TASK) as Task };
}

/** Calls a tool of the session with the model's arguments text; arguments that are not JSON come back as an error to the model. */
export async function callTool(ctx: AgentCtx, name: string, args: string): Promise<{ content: string; terminated: boolean }> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(args);
  } catch {
    return { content: `Error: the arguments are not JSON: ${args}`, terminated: false };
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return { content: "Error: the arguments must be a JSON object", terminated: false };
  const r = await fetch(`${ctx.task.toolsURL}/${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { authorization: `Bearer ${ctx.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(parsed),
  });
  const body = (await r.json()) as { content: string; terminated: boolean; truncated: boolean; error?: { message: string } };
  if (!r.ok) throw new Error(`tool ${name}: ${r.status} ${body.error?.message}`);
  return { content: body.content, terminated: body.terminated || body.truncated };
}
