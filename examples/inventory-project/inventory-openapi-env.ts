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
import { openApiTools } from "sinkflex";
import { registerSkuVariant, SKUS } from "./inventory-env.js";

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

registerSkuVariant("acme/inventory-openapi-v0", {
  name: "InventoryOpenApiEnv",
  suite: "inventory-openapi",
  description: "Reserve items named by catalog SKUs (the catalog is an HTTP service with an OpenAPI document).",
  catalogTools: openApiTools(document, { baseUrl }),
  lookup: "lookupSku",
  itemOf: (answer) => (JSON.parse(answer || "{}") as { item?: string }).item ?? "",
});
