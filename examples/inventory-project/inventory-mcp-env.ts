/**
 * The MCP variant of the inventory env: requests name a catalog SKU ("SKU-2-W"), and the agent must look
 * the item up with the catalog's `lookup_sku` tool, served by an MCP server, before it checks the stock and
 * reserves. The catalog server here is an McpServer (from @modelcontextprotocol/sdk) run in this process;
 * a server of your own connects the same way over stdio (`{ kind: "stdio", command: "node", args:
 * ["my-server.mjs"] }`) or HTTP (`{ kind: "http", url }`), see sinkflex's docs/tools.md. Registered as
 * acme/inventory-mcp-v0. An example of a user's project, not part of sinkflex.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { McpToolSource } from "sinkflex";
import { z } from "zod";
import { registerSkuVariant, SKUS } from "./inventory-env.js";

const catalog = new McpServer({ name: "acme-catalog", version: "1.0.0" });
catalog.registerTool(
  "lookup_sku",
  { description: "The item name of a catalog SKU.", inputSchema: { sku: z.string().describe("a SKU such as SKU-1-W") } },
  async ({ sku }) => {
    const item = SKUS[sku.trim().toUpperCase()];
    return item ? { content: [{ type: "text" as const, text: item }] } : { content: [{ type: "text" as const, text: `no SKU ${sku}` }], isError: true };
  },
);
// The server's tools, listed once when this module is imported; every episode calls the one server.
const source = await McpToolSource.connect({ kind: "in-process", server: catalog });

registerSkuVariant("acme/inventory-mcp-v0", {
  name: "InventoryMcpEnv",
  suite: "inventory-mcp",
  description: "Reserve items named by catalog SKUs (the catalog is an MCP server).",
  catalogTools: source.tools,
  lookup: "lookup_sku",
  itemOf: (answer) => answer,
});
