/**
 * An arith agent written with the `openai` package: chat completions with the task's tools, each tool
 * call sent to the session's tool endpoint, until a reply without tool calls or the env ends the task.
 *
 *   suites: [{ env: sinkflex/arith-v0, agent: { command: "npx tsx examples/arith-agent/openai.ts" } }]
 *
 * or, in code, `agent: { run: openaiArithAgent }`. An example, not part of the library.
 */
import OpenAI from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { callTool, contextFromEnvironment, MAX_TURNS, type AgentCtx } from "./common.js";

export async function openaiArithAgent(ctx: AgentCtx): Promise<void> {
  const client = new OpenAI({ baseURL: ctx.baseURL, apiKey: ctx.apiKey, maxRetries: 0 });
  const messages = [...ctx.task.messages] as ChatCompletionMessageParam[];
  for (let turn = 0; turn < MAX_TURNS; turn++) {
    const r = await client.chat.completions.create({ model: "policy", messages, tools: ctx.task.tools });
    const msg = r.choices[0]!.message;
    messages.push(msg);
    if (!msg.tool_calls?.length) return;
    for (const call of msg.tool_calls) {
      if (call.type !== "function") continue;
      const result = await callTool(ctx, call.function.name, call.function.arguments);
      messages.push({ role: "tool", tool_call_id: call.id, content: result.content });
      if (result.terminated) return;
    }
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await openaiArithAgent(contextFromEnvironment());
