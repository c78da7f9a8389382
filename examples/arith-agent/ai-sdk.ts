/**
 * The arith agent written with the AI SDK: `generateText` with the task's tools through
 * `@ai-sdk/openai-compatible` (chat completions), the SDK running the tool loop; it stops when a reply
 * has no tool call, the env ends the task, or after MAX_TURNS steps.
 *
 *   suites: [{ env: sinkflex/arith-v0, agent: { command: "npx tsx examples/arith-agent/ai-sdk.ts" } }]
 *
 * An example, not part of the library.
 */
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, jsonSchema, stepCountIs, tool, type ModelMessage, type ToolSet } from "ai";
import { callTool, contextFromEnvironment, MAX_TURNS, type AgentCtx } from "./common.js";

export async function aiSdkArithAgent(ctx: AgentCtx): Promise<void> {
  const provider = createOpenAICompatible({ name: "sinkflex", baseURL: ctx.baseURL, apiKey: ctx.apiKey });
  let ended = false;
  const tools: ToolSet = Object.fromEntries(
    ctx.task.tools.map(({ function: f }) => [
      f.name,
      tool({
        description: f.description,
        inputSchema: jsonSchema(f.parameters),
        execute: async (input: unknown) => {
          const r = await callTool(ctx, f.name, JSON.stringify(input));
          ended ||= r.terminated;
          return r.content;
        },
      }),
    ]),
  );
  await generateText({
    model: provider.chatModel("policy"),
    messages: ctx.task.messages as ModelMessage[],
    tools,
    maxRetries: 0,
    stopWhen: [stepCountIs(MAX_TURNS), () => ended],
  });
}

if (import.meta.url === `file://${process.argv[1]}`) await aiSdkArithAgent(contextFromEnvironment());
