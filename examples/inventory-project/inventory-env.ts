/**
 * An inventory service's tools as a sinkflex env: three function tools (list_items, get_stock, reserve)
 * with zod schemas in a ToolEnv registered under this project's own id, acme/inventory-v0, with a scripted
 * expert (the demonstrations SFT learns from) and a score. sinkflex imports this module when a command or
 * a config names it (`--import ./inventory-env.ts`, or `modules:` in configs/*.yaml). It is an example of a
 * user's project, not part of sinkflex.
 */
import { z } from "zod";
import { arrayTasks, functionTool, register, ToolEnv, type Tool } from "sinkflex";

export const INVENTORY_ENV_ID = "acme/inventory-v0";
export const ITEMS = ["widget", "gadget", "sprocket"] as const;

/** One task: reserve `want` units of `item`; the stock levels are hidden until the agent asks. */
export interface Task {
  item: (typeof ITEMS)[number];
  want: number;
  stock: Record<string, number>;
}
export interface State {
  stock: Record<string, number>;
  reserved?: { item: string; qty: number };
}

/** 400 tasks: 9 distinct requests (3 items x 3 amounts), each over its own hidden stock. */
export const TASKS: Task[] = Array.from({ length: 400 }, (_, i) => ({
  item: ITEMS[i % 3]!,
  want: 1 + (Math.floor(i / 3) % 3),
  stock: { widget: (i * 7) % 5, gadget: (i * 11) % 6, sprocket: (i * 13) % 4 },
}));

export const listItems = functionTool({ name: "list_items", description: "List the item names.", parameters: z.object({}), execute: () => ITEMS.join(", ") });
export const getStock = functionTool({
  name: "get_stock",
  description: "Units of an item in stock.",
  parameters: z.object({ item: z.string().describe("an item name from list_items") }),
  execute: ({ item }, ctx) => {
    const n = (ctx.state as State).stock[item];
    if (n === undefined) throw new Error(`no item ${item}; list_items names them`);
    return String(n);
  },
});
export const reserve = functionTool({
  name: "reserve",
  description: "Reserve units of an item (at most what is in stock) and finish.",
  parameters: z.object({ item: z.string(), qty: z.number().int().min(0) }),
  execute: ({ item, qty }, ctx) => {
    (ctx.state as State).reserved = { item, qty };
    ctx.finish("reserved");
    return "ok";
  },
});

/** The reward: 1 when the agent reserved the right item, min(want, stock) of it. */
export function scoreReservation(task: Task, reserved: State["reserved"]): number {
  const want = Math.min(task.want, task.stock[task.item] ?? 0);
  return reserved?.item === task.item && reserved.qty === want ? 1 : 0;
}

register(
  INVENTORY_ENV_ID,
  () =>
    new ToolEnv<Task, State>({
      name: "InventoryEnv",
      tasks: arrayTasks(TASKS),
      tools: [listItems, getStock, reserve],
      open: async (task) => ({
        state: { stock: { ...task.stock } },
        messages: [
          { role: "system", content: "You manage the inventory." },
          { role: "user", content: `Reserve ${task.want} ${task.item}, or as many as are in stock.` },
        ],
      }),
      score: async (ep) => ({ reward: scoreReservation(ep.task, ep.state.reserved), evidence: { got: ep.state.reserved } }),
      // The expert: asks for the stock, then reserves what it can.
      expert: (task) => {
        let turn = 0;
        return {
          act: (obs) => {
            turn++;
            if (turn === 1) return { content: "", toolCalls: [{ id: "c1", name: "get_stock", arguments: JSON.stringify({ item: task.item }) }] };
            const stock = Number(obs.messages[0]?.content ?? 0);
            return { content: "", toolCalls: [{ id: "c2", name: "reserve", arguments: JSON.stringify({ item: task.item, qty: Math.min(task.want, stock) }) }] };
          },
        };
      },
      // Tasks with the same request differ only in hidden state: GRPO groups them by this key.
      taskKey: (task) => task,
    }),
  { suite: "inventory", description: "Reserve items from a small inventory service.", maxEpisodeSteps: 6 },
);

/** A SKU per item: "SKU-<n>-<first letter>". */
export const SKUS: Record<string, string> = Object.fromEntries(ITEMS.map((item, i) => [`SKU-${i + 1}-${item[0]!.toUpperCase()}`, item]));
export const skuOf = (item: string) => Object.keys(SKUS).find((sku) => SKUS[sku] === item)!;

/**
 * Registers a variant whose requests name catalog SKUs: the agent looks the item up with `lookup` (one of
 * `catalogTools`, from wherever the catalog lives), then checks the stock and reserves. `itemOf` reads
 * the item name from the lookup's answer, for the expert.
 */
export function registerSkuVariant(
  id: string,
  v: { name: string; suite: string; description: string; catalogTools: Tool[]; lookup: string; itemOf: (answer: string) => string },
): void {
  register(
    id,
    () =>
      new ToolEnv<Task, State>({
        name: v.name,
        tasks: arrayTasks(TASKS),
        tools: [...v.catalogTools, getStock, reserve],
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
              if (turn === 1) return { content: "", toolCalls: [{ id: "c1", name: v.lookup, arguments: JSON.stringify({ sku: skuOf(task.item) }) }] };
              if (turn === 2) return { content: "", toolCalls: [{ id: "c2", name: "get_stock", arguments: JSON.stringify({ item: v.itemOf(obs.messages[0]?.content ?? "") }) }] };
              const stock = Number(obs.messages[0]?.content ?? 0);
              return { content: "", toolCalls: [{ id: "c3", name: "reserve", arguments: JSON.stringify({ item: task.item, qty: Math.min(task.want, stock) }) }] };
            },
          };
        },
        taskKey: (task) => task,
      }),
    { suite: v.suite, description: v.description, maxEpisodeSteps: 8 },
  );
}
