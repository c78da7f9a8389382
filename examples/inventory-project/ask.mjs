/**
 * Asks a served checkpoint (`npm run serve`) one of the env's requests, as any OpenAI client would: the
 * system and user messages and the tools of the first conversation in a JSONL file written by `sinkflex
 * envs export-sft` (the env's own tool specs, as the model saw them in training), sent to
 * POST /v1/chat/completions; prints the request and the assistant's reply (its tool calls). Only the
 * first turn: the tool results are the env's to give. `npm run ask` writes the file and runs this.
 * It is an example of a client, not part of sinkflex.
 *
 * node ask.mjs <file.jsonl> [base URL, default http://127.0.0.1:8000/v1]
 */
import { readFileSync } from "node:fs";

const [file, base = "http://127.0.0.1:8000/v1"] = process.argv.slice(2);
if (!file) {
  console.error("usage: node ask.mjs <file.jsonl> [base URL]; write the file with sinkflex envs export-sft (npm run ask does both)");
  process.exit(2);
}
const first = JSON.parse(readFileSync(file, "utf8").split("\n")[0] ?? "");
const messages = first.messages.filter((m) => m.role === "system" || m.role === "user").slice(0, 2);
const models = await fetch(`${base}/models`).catch((err) => {
  console.error(`no server at ${base} (${err.cause?.code ?? err.message}): start one with npm run serve, or give its URL`);
  process.exit(1);
});
const model = (await models.json()).data[0].id;
const res = await fetch(`${base}/chat/completions`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ model, messages, tools: first.tools, max_tokens: 64, temperature: 0 }),
});
const reply = await res.json();
if (!res.ok) {
  console.error(`the server answered ${res.status}: ${JSON.stringify(reply)}`);
  process.exit(1);
}
console.log(`user: ${messages.at(-1).content}`);
console.log(`assistant: ${JSON.stringify(reply.choices[0].message)}`);
