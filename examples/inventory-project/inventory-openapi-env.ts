/**
 * The OpenAPI variant of the inventory env: requests name a catalog SKU ("SKU-2-G"), and the agent must
 * look the item up with the catalog's `lookupSku` operation, an HTTP service described by an OpenAPI
 * document, before it checks the stock and reserves. The catalog service here is a small node:http
 * server started on 127.0.0.1 when this module is imported; a service of your own is named by its
 * document and base URL the same way (`openApiTools("openapi.yaml", { baseUrl })`, see sinkflex's
 * docs/tools.md). Registered as acme/inventory-openapi-v0. An example of a user's project, not part of
 * sinkflex.
 */
import { createServer } from "node:http";
import { arrayTasks, openApiTools, register, ToolEnv } from "sinkflex";
import { getStock, ITEMS, reserve, scoreReservation, TASKS, type State, type Task } from "./inventory-env.js";

/** A SKU per item: "SKU-<n>-<first letter>". */
const SKUS: Record<string, string> = Object.fromEntries(ITEMS.map((item, i) => [`SKU-${i + 1}-${item[0]!.toUpperCase()}`, item]));
const skuOf = (item: string) => Object.keys(SKUS).find((sku) => SKUS[sku] === item)!;

// The catalog service: GET /skus/{sku} answers {"sku", "item"}, or 404.
const catalog = createServer((req, res) => {
  const m = /^\/skus\/([^/?]+)$/.exec(req.url ?? "");
  const item = m ? SKUS[decodeURIComponent(m[1]!).trim().toUpperCase()] : undefined;
  res.writeHead(item ? 200 : 404, { "content-type": "application/json" });
  res.end(JSON.stringify(item ? { sku: decodeURIComponent(m![1]!), item } : { error: `no SKU ${m ? decodeURIComponent(m[1]!) : ""}` }));
});
await new Promise<void>((resolve) => catalog.listen(0, "127.0.0.1", resolve));
catalog.unref(); // the command that imported this module exits when its work is done
const baseUrl = `http://127.0.0.1:${(catalog.address() as { port: number }).port}`;

const document = {
  openapi: "3.0.3",
  info: { title: "acme catalog", version: "1.0.0" },
  paths: {
    "/skus/{sku}": {
      get: {
        operationId: "lookupSku",
        summary: "The item name of a catalog SKU.",
        parameters: [{ name: "sku", in: "path", required: true, description: "a SKU such as SKU-1-W", schema: { type: "string" } }],
        responses: { "200": { description: "the item", content: { "application/json": { schema: { type: "object", properties: { sku: { type: "string" }, item: { type: "string" } } } } } } },
      },
    },
  },
};
const catalogTools = openApiTools(document, { baseUrl });

register(
  "acme/inventory-openapi-v0",
  () =>
    new ToolEnv<Task, State>({
      name: "InventoryOpenApiEnv",
      tasks: arrayTasks(TASKS),
      tools: [...catalogTools, getStock, reserve],
      open: async (task) => ({
        state: { stock: { ...task.stock } },
        messages: [
          { role: "system", content: "You manage the inventory. Requests name catalog SKUs; look them up first." },
          { role: "user", content: `Reserve ${task.want} of ${skuOf(task.item)}, or as many as are in stock.` },
        ],
      }),
      score: async (ep) => ({ reward: scoreReservation(ep.task, ep.state.reserved), evidence: { got: ep.state.reserved } }),
      expert: (task) => {
        let turn = 0;
        return {
          act: (obs) => {
            turn++;
            if (turn === 1) return { content: "", toolCalls: [{ id: "c1", name: "lookupSku", arguments: JSON.stringify({ sku: skuOf(task.item) }) }] };
            if (turn === 2) {
              const item = (JSON.parse(obs.messages[0]?.content ?? "{}") as { item?: string }).item ?? "";
              return { content: "", toolCalls: [{ id: "c2", name: "get_stock", arguments: JSON.stringify({ item }) }] };
            }
            const stock = Number(obs.messages[0]?.content ?? 0);
            return { content: "", toolCalls: [{ id: "c3", name: "reserve", arguments: JSON.stringify({ item: task.item, qty: Math.min(task.want, stock) }) }] };
          },
        };
      },
      taskKey: (task) => task,
    }),
  { suite: "inventory-openapi", description: "Reserve items named by catalog SKUs (the catalog is an HTTP service with an OpenAPI document).", maxEpisodeSteps: 8 },
);
