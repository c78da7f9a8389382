/**
 * An agent written against the OpenAI API, trained unchanged through the sinkflex gateway: it asks the
 * model, runs the `lookup` tool the model calls, sends the result back, and stops at the first reply
 * without a tool call. Only the base URL points at the gateway (docs/gateway.md).
 *
 *   GATEWAY_URL=http://127.0.0.1:8100 SINKFLEX_API_KEY=... npx tsx examples/openai-agent/agent.ts
 *
 * It opens a session, runs the agent, posts a reward and prints the trajectory's summary as one JSON line.
 * It is an example, not part of the library.
 */
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";

const tools: ChatCompletionTool[] = [
  { type: "function", function: { name: "lookup", description: "Stock count of an item.", parameters: { type: "object", properties: { item: { type: "string" } }, required: ["item"] } } },
];
const stock: Record<string, number> = { "red chair": 9, "blue lamp": 0 };

/** The agent: plain OpenAI tool calling, up to `maxTurns` model calls. Returns the final answer. */
export async function runAgent(client: OpenAI, question: string, maxTurns = 4): Promise<string> {
  const messages: ChatCompletionMessageParam[] = [
    { role: "system", content: "You are a warehouse agent. Use the tools to look up stock, then answer the user." },
    { role: "user", content: question },
  ];
  for (let turn = 0; turn < maxTurns; turn++) {
    const r = await client.chat.completions.create({ model: "policy", messages, tools, max_tokens: 48, seed: turn + 1 });
    const msg = r.choices[0]!.message;
    messages.push(msg);
    if (!msg.tool_calls?.length) return msg.content ?? "";
    for (const call of msg.tool_calls) {
      if (call.type !== "function") continue;
      let item = "";
      try {
        item = String((JSON.parse(call.function.arguments) as { item?: unknown }).item ?? "");
      } catch {
        item = "";
      }
      const content = item in stock ? JSON.stringify({ item, count: stock[item] }) : JSON.stringify({ error: `unknown item ${item}` });
      messages.push({ role: "tool", tool_call_id: call.id, content });
    }
  }
  return "";
}

async function main(): Promise<void> {
  const gateway = process.env.GATEWAY_URL ?? "http://127.0.0.1:8100";
  const apiKey = process.env.SINKFLEX_API_KEY ?? "none";
  const headers = { authorization: `Bearer ${apiKey}`, "content-type": "application/json" };
  const question = "How many red chairs are left?";
  const session = (await (await fetch(`${gateway}/sessions`, { method: "POST", headers, body: JSON.stringify({ task: { question } }) })).json()) as { id: string; baseURL: string };
  const answer = await runAgent(new OpenAI({ baseURL: session.baseURL, apiKey }), question);
  const reward = answer.includes("9") ? 1 : 0;
  await fetch(`${gateway}/sessions/${session.id}/reward`, { method: "POST", headers, body: JSON.stringify({ reward }) });
  const t = (await (await fetch(`${gateway}/sessions/${session.id}/trajectory`, { headers })).json()) as {
    splits: number;
    calls: unknown[];
    trajectory: { segments: { tokens: number[]; lossMask: number[] }[] };
  };
  const segments = t.trajectory.segments.map((s) => ({ tokens: s.tokens.length, sampled: s.lossMask.filter((m) => m === 1).length }));
  console.log(JSON.stringify({ session: session.id, answer, reward, calls: t.calls.length, splits: t.splits, segments }));
  await fetch(`${gateway}/sessions/${session.id}`, { method: "DELETE", headers });
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
