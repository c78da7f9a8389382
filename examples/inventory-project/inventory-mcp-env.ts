/**
 * The MCP variant of the inventory env: requests name a catalog SKU ("SKU-2-W"), and the agent must look
 * the item up with the catalog's `lookup_sku` tool, served by an MCP server, before it checks the stock and
 * reserves. The catalog server here is an McpServer (from @modelcontextprotocol/sdk) run in this process;
 * a server of your own connects the same way over stdio (`{ kind: "stdio", command: "node", args:
 * ["my-server.mjs"] }`) or HTTP (`{ kind: "http", url }`), see sinkflex's docs/tools.md. Registered as
 * acme/inventory-mcp-v0. An example of a user's project, not part of sinkflex.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { arrayTasks, McpToolSource, register, ToolEnv } from "sinkflex";
import { z } from "zod";
import { getStock, ITEMS, reserve, scoreReservation, TASKS, type State, type Task } from "./inventory-env.js";

/** A SKU per item: "SKU-<n>-<first letter>". */
const SKUS: Record<string, string> = Object.fromEntries(ITEMS.map((item, i) => [`SKU-${i + 1}-${item[0]!.toUpperCase()}`, item]));
const skuOf = (item: string) => Object.keys(SKUS).find((sku) => SKUS[sku] === item)!;

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

register(
  "acme/inventory-mcp-v0",
  () =>
    new ToolEnv<Task, State>({
      name: "InventoryMcpEnv",
      tasks: arrayTasks(TASKS),
      tools: [...source.tools, getStock, reserve],
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
            if (turn === 1) return { content: "", toolCalls: [{ id: "c1", name: "lookup_sku", arguments: JSON.stringify({ sku: skuOf(task.item) }) }] };
            if (turn === 2) return { content: "", toolCalls: [{ id: "c2", name: "get_stock", arguments: JSON.stringify({ item: obs.messages[0]?.content ?? "" }) }] };
            const stock = Number(obs.messages[0]?.content ?? 0);
            return { content: "", toolCalls: [{ id: "c3", name: "reserve", arguments: JSON.stringify({ item: task.item, qty: Math.min(task.want, stock) }) }] };
          },
        };
      },
      taskKey: (task) => task,
    }),
  { suite: "inventory-mcp", description: "Reserve items named by catalog SKUs (the catalog is an MCP server).", maxEpisodeSteps: 8 },
);
