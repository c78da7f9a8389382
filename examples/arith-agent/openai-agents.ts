/**
 * The arith agent written with the OpenAI Agents SDK (`@openai/agents`) in chat-completions mode: an
 * `Agent` whose model is `OpenAIChatCompletionsModel` over an `openai` client pointed at the session
 * (the SDK's default, the Responses API, is not served by the gateway), with the task's tools as
 * function tools; tracing is off (it would export to OpenAI). It stops when the env ends the task, at a
 * reply without tool calls, or after MAX_TURNS turns.
 *
 *   suites: [{ env: sinkflex/arith-v0, agent: { command: "npx tsx examples/arith-agent/openai-agents.ts" } }]
 *
 * An example, not part of the library.
 */
import { Agent, MaxTurnsExceededError, OpenAIChatCompletionsModel, run, setTracingDisabled, tool } from "@openai/agents";
import OpenAI from "openai";
import { callTool, contextFromEnvironment, MAX_TURNS, type AgentCtx } from "./common.js";

setTracingDisabled(true);

export async function openaiAgentsArithAgent(ctx: AgentCtx): Promise<void> {
  const client = new OpenAI({ baseURL: ctx.baseURL, apiKey: ctx.apiKey, maxRetries: 0 });
  let ended = false;
  const agent = new Agent({
    name: "arith",
    instructions: ctx.task.messages.find((m) => m.role === "system")?.content ?? "",
    // The SDK bundles its own copy of the openai package; the client is the same API.
    model: new OpenAIChatCompletionsModel(client as never, "policy"),
    tools: ctx.task.tools.map(({ function: f }) =>
      tool({
        name: f.name,
        description: f.description,
        parameters: f.parameters as never,
        strict: false,
        execute: async (input: unknown) => {
          const r = await callTool(ctx, f.name, typeof input === "string" ? input : JSON.stringify(input));
          ended ||= r.terminated;
          return r.content;
        },
      }),
    ),
    toolUseBehavior: () => ({ isFinalOutput: ended, isInterrupted: undefined, finalOutput: "" }) as never,
  });
  const user = ctx.task.messages.filter((m) => m.role === "user").map((m) => m.content).join("\n");
  try {
    await run(agent, user, { maxTurns: MAX_TURNS });
  } catch (err) {
    if (!(err instanceof MaxTurnsExceededError)) throw err;
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await openaiAgentsArithAgent(contextFromEnvironment());
