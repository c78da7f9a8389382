/**
 * The tool-source contract for plain function tools (`functionTool`): tools over a small in-process
 * inventory service, one fresh inventory per episode, that can be taken down.
 */
import { z } from "zod";
import { functionTool } from "../../../src/tools/tool.js";
import { toolSourceContract, type ToolSourceSubject } from "./tool-source.contract.js";

/** The service behind the tools: stock counts, and a switch that takes it down. */
class Inventory {
  static up = true;
  private readonly stock = new Map([["chair", 4], ["lamp", 0]]);
  private check(): void {
    if (!Inventory.up) throw new Error("the inventory service is down; try again later");
  }
  count(item: string): number {
    this.check();
    const n = this.stock.get(item);
    if (n === undefined) throw new Error(`no item "${item}" in stock records; known items: ${[...this.stock.keys()].join(", ")}`);
    return n;
  }
  add(item: string, n: number): number {
    this.check();
    this.stock.set(item, (this.stock.get(item) ?? 0) + n);
    return this.stock.get(item)!;
  }
}

function subject(): ToolSourceSubject<Inventory> {
  Inventory.up = true;
  return {
    tools: [
      functionTool({
        name: "count_stock",
        description: "How many of an item are in stock.",
        parameters: z.object({ item: z.string().min(1) }),
        execute: ({ item }, ctx) => ({ item, count: (ctx.state as Inventory).count(item) }),
      }),
      functionTool({
        name: "add_stock",
        description: "Add items to the stock; returns the new count.",
        parameters: z.object({ item: z.string().min(1), n: z.number().int().min(1).max(100) }),
        execute: ({ item, n }, ctx) => `now ${(ctx.state as Inventory).add(item, n)} ${item}`,
      }),
    ],
    openState: async () => new Inventory(),
    script: [
      { tool: "count_stock", args: { item: "chair" }, expect: /"count":4/ },
      { tool: "add_stock", args: { item: "chair", n: 3 }, expect: /^now 7 chair$/ },
      { tool: "count_stock", args: { item: "chair" }, expect: /"count":7/ },
    ],
    invalid: { tool: "add_stock", args: { item: "chair", n: 0 } },
    failing: { tool: "count_stock", args: { item: "sofa" }, expect: /no item "sofa" in stock records/ },
    stopService: async () => {
      Inventory.up = false;
    },
    stoppedError: /the inventory service is down/,
    dispose: async () => {
      Inventory.up = true;
    },
  };
}

toolSourceContract("plain function tools", { deterministic: true, isolatesEpisodes: true, checksArgumentsItself: true }, async () => subject());
