/** A scripted OpenAI-compatible chat endpoint on 127.0.0.1, for the judge's tests. */
import { createServer, type IncomingMessage, type Server } from "node:http";

/** An OpenAI-compatible endpoint on loopback whose answers the test scripts per request. */
export async function startEndpoint(answer: (body: any, n: number) => { status?: number; content?: string; delayMs?: number }) {
  let n = 0;
  let inFlight = 0;
  let maxInFlight = 0;
  const server: Server = createServer(async (req: IncomingMessage, res) => {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const body = JSON.parse(raw);
    const a = answer(body, n++);
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    await new Promise((r) => setTimeout(r, a.delayMs ?? 5));
    inFlight--;
    res.writeHead(a.status ?? 200, { "content-type": "application/json" });
    res.end(JSON.stringify({ choices: [{ message: { role: "assistant", content: a.content ?? "" } }] }));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return { baseUrl: `http://127.0.0.1:${port}/v1`, server, calls: () => n, maxInFlight: () => maxInFlight };
}
