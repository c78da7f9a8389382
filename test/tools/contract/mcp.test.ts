/**
 * The tool-source contract for MCP tools (`McpToolSource`): the published reference memory server
 * (@modelcontextprotocol/server-memory) as a subprocess over stdio, and the notes server of
 * test/tools/fixtures in-process, over streamable HTTP on 127.0.0.1, and one per episode
 * (`routeMcpTools`).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { McpToolSource, routeMcpTools } from "../../../src/tools/mcp.js";
import { notesServer, startHttpMcpServer, type NotesStore } from "../fixtures/mcp-servers.js";
import { toolSourceContract, type ToolCallCase, type ToolSourceSubject } from "./tool-source.contract.js";

const require = createRequire(import.meta.url);
const memoryServer = join(dirname(require.resolve("@modelcontextprotocol/server-memory/package.json")), "dist", "index.js");

const caps = { deterministic: true, checksArgumentsItself: true };

/** The notes server's calls. */
const notes = {
  script: [
    { tool: "add_note", args: { text: "buy milk", priority: "high" }, expect: /^added note 1$/ },
    { tool: "add_note", args: { text: "call Ann" }, expect: /^added note 2$/ },
    { tool: "list_notes", args: {}, expect: /^1\. buy milk \(high\)\n2\. call Ann$/ },
  ] as ToolCallCase[],
  invalid: { tool: "add_note", args: { text: "" } },
  failing: { tool: "fail", args: { reason: "no paper" }, expect: /refused: no paper/ },
};

/** The tools of one source, without the notes server's `slow` (it only waits). */
function sourceSubject(source: McpToolSource, stop: () => Promise<void>, stoppedError: RegExp, teardown: () => Promise<void>): ToolSourceSubject {
  return {
    ...notes,
    tools: source.tools.filter((t) => t.name !== "slow"),
    stopService: stop,
    stoppedError,
    close: () => source.close(),
    callByName: (name, args) => source.call(name, args),
    dispose: async () => {
      await source.close();
      await teardown();
    },
  };
}

toolSourceContract("MCP notes server in-process", { ...caps, isolatesEpisodes: false }, async () => {
  const server = notesServer({ notes: [] });
  const source = await McpToolSource.connect({ kind: "in-process", server });
  return sourceSubject(source, () => server.close(), /cannot reach the in-process MCP server/, async () => undefined);
});

toolSourceContract("MCP notes server over streamable HTTP", { ...caps, isolatesEpisodes: false }, async () => {
  const store: NotesStore = { notes: [] };
  const http = await startHttpMcpServer(store);
  const source = await McpToolSource.connect({ kind: "http", url: http.url });
  let stopped = false;
  const stop = async () => {
    stopped = true;
    await http.close();
  };
  return sourceSubject(source, stop, /cannot reach the MCP server at http:\/\/127\.0\.0\.1:\d+\/mcp/, async () => {
    if (!stopped) await http.close();
  });
});

toolSourceContract("MCP notes server, one per episode", { ...caps, isolatesEpisodes: true }, async () => {
  const listing = await McpToolSource.connect({ kind: "in-process", server: notesServer() });
  const episodes = new Set<{ source: McpToolSource; server: ReturnType<typeof notesServer> }>();
  const state = new WeakMap<McpToolSource, ReturnType<typeof notesServer>>();
  return {
    ...notes,
    tools: routeMcpTools(listing.tools.filter((t) => t.name !== "slow"), (s: McpToolSource) => s),
    openState: async () => {
      const server = notesServer();
      const source = await McpToolSource.connect({ kind: "in-process", server });
      episodes.add({ source, server });
      state.set(source, server);
      return source;
    },
    disposeState: (s: McpToolSource) => s.close(),
    // Every episode's server goes down.
    stopService: async () => {
      for (const e of episodes) await e.server.close();
    },
    stoppedError: /cannot reach the in-process MCP server/,
    close: () => listing.close(),
    closeEndsCalls: false,
    callByName: (name, args) => listing.call(name, args),
    dispose: async () => {
      await listing.close();
      for (const e of episodes) await e.source.close();
    },
  };
});

toolSourceContract("MCP reference memory server over stdio", { ...caps, isolatesEpisodes: false }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "sinkflex-mcp-contract-"));
  const source = await McpToolSource.connect({ kind: "stdio", command: process.execPath, args: [memoryServer], env: { MEMORY_FILE_PATH: join(dir, "memory.jsonl") } });
  const keep = new Set(["create_entities", "add_observations", "search_nodes", "open_nodes", "read_graph"]);
  return {
    tools: source.tools.filter((t) => keep.has(t.name)),
    script: [
      { tool: "create_entities", args: { entities: [{ name: "Ada", entityType: "person", observations: ["wrote the first program"] }] }, expect: /Ada/ },
      { tool: "add_observations", args: { observations: [{ entityName: "Ada", contents: ["born 1815"] }] }, expect: /born 1815/ },
      { tool: "open_nodes", args: { names: ["Ada"] }, expect: /wrote the first program[\s\S]*born 1815/ },
    ],
    invalid: { tool: "create_entities", args: { entities: [{ name: "Bob" }] } },
    failing: { tool: "add_observations", args: { observations: [{ entityName: "Nobody", contents: ["x"] }] }, expect: /Nobody/ },
    stopService: async () => {
      process.kill(source.pid!, "SIGKILL");
      await new Promise((r) => setTimeout(r, 100));
    },
    stoppedError: /cannot reach the MCP server `.*index\.js`/,
    close: () => source.close(),
    callByName: (name, args) => source.call(name, args),
    dispose: async () => {
      await source.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
