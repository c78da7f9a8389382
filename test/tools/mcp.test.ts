/**
 * The MCP tool source against real servers: the published reference memory server
 * (@modelcontextprotocol/server-memory) started as a subprocess over stdio, a streamable-HTTP server on
 * 127.0.0.1 and an in-process server, both built with the SDK's server classes.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { McpToolSource, routeMcpTools } from "../../src/tools/mcp.js";
import { ToolEnv, arrayTasks } from "../../src/tools/tool-env.js";
import { notesServer, startHttpMcpServer, type NotesStore } from "./fixtures/mcp-servers.js";

const dir = mkdtempSync(join(tmpdir(), "sinkflex-mcp-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const ctx = () => ({ state: undefined, signal: new AbortController().signal, finish: () => undefined });

const require = createRequire(import.meta.url);
const memoryServer = join(dirname(require.resolve("@modelcontextprotocol/server-memory/package.json")), "dist", "index.js");

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("MCP over stdio: the reference memory server as a subprocess", () => {
  it("lists its tools, calls them, reports its errors, and ends the process on close", async () => {
    const memoryFile = join(dir, "memory.jsonl");
    const source = await McpToolSource.connect({ kind: "stdio", command: process.execPath, args: [memoryServer], env: { MEMORY_FILE_PATH: memoryFile } });
    const pid = source.pid!;
    expect(alive(pid)).toBe(true);
    try {
      const tools = new Map(source.tools.map((t) => [t.name, t]));
      expect([...tools.keys()]).toEqual(expect.arrayContaining(["create_entities", "create_relations", "add_observations", "read_graph", "search_nodes", "open_nodes"]));
      const create = tools.get("create_entities")!;
      expect(create.parameters).toMatchObject({ type: "object", required: ["entities"] });
      expect(create.parameters.$schema).toBeUndefined();
      const created = await create.execute({ entities: [{ name: "Ada", entityType: "person", observations: ["wrote the first program"] }] }, ctx());
      expect(created).toContain("Ada");
      const found = (await tools.get("search_nodes")!.execute({ query: "first program" }, ctx())) as string;
      expect(JSON.parse(found).entities[0]).toMatchObject({ name: "Ada", entityType: "person" });
      // The server really wrote its file.
      expect(readFileSync(memoryFile, "utf8")).toContain("wrote the first program");
      // A call the server rejects comes back as an error with the server's own message.
      await expect(tools.get("add_observations")!.execute({ observations: [{ entityName: "Nobody", contents: ["x"] }] }, ctx())).rejects.toThrow(/Nobody/);
    } finally {
      await source.close();
    }
    await new Promise((r) => setTimeout(r, 100));
    expect(alive(pid)).toBe(false);
    await expect(source.call("read_graph", {})).rejects.toThrow(/is closed/);
  });

  it("says clearly when the command does not start", async () => {
    await expect(McpToolSource.connect({ kind: "stdio", command: join(dir, "no-such-server") })).rejects.toThrow(/cannot connect to the MCP server `.*no-such-server`/);
  });
});

describe("MCP over streamable HTTP", () => {
  it("calls the tools of a server on 127.0.0.1, and reports a server that went down", async () => {
    const store: NotesStore = { notes: [] };
    const http = await startHttpMcpServer(store);
    const source = await McpToolSource.connect({ kind: "http", url: http.url }, { namePrefix: "notes_" });
    try {
      expect(source.tools.map((t) => t.name)).toEqual(["notes_add_note", "notes_list_notes", "notes_fail", "notes_slow"]);
      const add = source.tools[0]!;
      expect((add.parameters as any).properties.priority).toEqual({ type: "string", enum: ["low", "high"] });
      expect(await add.execute({ text: "buy milk", priority: "high" }, ctx())).toBe("added note 1");
      expect(store.notes).toEqual(["buy milk (high)"]);
      expect(await source.tools[1]!.execute({}, ctx())).toBe("1. buy milk (high)");
      await expect(source.tools[2]!.execute({ reason: "no" }, ctx())).rejects.toThrow("refused: no");
      await http.close();
      await expect(source.tools[1]!.execute({}, ctx())).rejects.toThrow(/cannot reach the MCP server at http:\/\/127\.0\.0\.1:\d+\/mcp/);
    } finally {
      await source.close();
      await http.close().catch(() => undefined);
    }
  });

  it("says clearly when nothing listens at the URL", async () => {
    const http = await startHttpMcpServer();
    await http.close();
    await expect(McpToolSource.connect({ kind: "http", url: http.url })).rejects.toThrow(/cannot connect to the MCP server at http:\/\/127\.0\.0\.1/);
  });
});

describe("MCP in-process", () => {
  it("serves the tools in a ToolEnv: results, isError, schema failures and timeouts become observations", async () => {
    const store: NotesStore = { notes: [] };
    const source = await McpToolSource.connect({ kind: "in-process", server: notesServer(store) }, { callTimeoutMs: 300 });
    const env = new ToolEnv({
      name: "NotesEnv",
      tasks: arrayTasks(["note things"]),
      tools: source.tools,
      open: async (task) => ({ state: null, messages: [{ role: "user" as const, content: task }] }),
      score: async () => ({ reward: store.notes.length, evidence: {} }),
    });
    try {
      await env.reset({ seed: 0 });
      const [obs, , , , info] = await env.step({
        content: "",
        toolCalls: [
          { id: "1", name: "add_note", arguments: '{"text": "hello"}' },
          { id: "2", name: "add_note", arguments: '{"text": ""}' },
          { id: "3", name: "fail", arguments: '{"reason": "because"}' },
          { id: "4", name: "slow", arguments: '{"ms": 5000}' },
          { id: "5", name: "list_notes", arguments: "" },
        ],
      });
      expect(obs.messages.map((m) => m.content)).toEqual([
        "added note 1",
        expect.stringMatching(/^Error: invalid arguments for "add_note": argument text: must NOT have fewer than 1 characters/),
        'Error: "fail" failed: refused: because',
        'Error: "slow" failed: slow on the in-process MCP server did not answer within 300 ms.',
        "1. hello",
      ]);
      expect((info.toolErrors as { kind: string }[]).map((e) => e.kind)).toEqual(["invalid_arguments", "tool_error", "tool_error"]);
    } finally {
      await env.close();
      await source.close();
    }
  });
});

describe("MCP with one server per episode", () => {
  it("routes each call to the episode's own server, so nothing leaks between episodes", async () => {
    const template = await McpToolSource.connect({ kind: "in-process", server: notesServer() }, { namePrefix: "n_" });
    await template.close();
    const env = new ToolEnv<string, McpToolSource>({
      name: "NotesPerEpisodeEnv",
      tasks: arrayTasks(["note"]),
      tools: routeMcpTools(template.tools, (source: McpToolSource) => source),
      open: async (task) => ({ state: await McpToolSource.connect({ kind: "in-process", server: notesServer() }), messages: [{ role: "user" as const, content: task }] }),
      dispose: (source) => source.close(),
      score: async () => ({ reward: 0, evidence: {} }),
    });
    try {
      const call = (name: string, args: string) => env.step({ content: "", toolCalls: [{ id: "x", name, arguments: args }] });
      await env.reset({ seed: 1 });
      expect((await call("n_add_note", '{"text": "first episode"}'))[0].messages[0]!.content).toBe("added note 1");
      expect((await call("n_list_notes", "{}"))[0].messages[0]!.content).toBe("1. first episode");
      await env.reset({ seed: 2 });
      expect((await call("n_list_notes", "{}"))[0].messages[0]!.content).toBe("no notes");
    } finally {
      await env.close();
    }
    expect(() => routeMcpTools([{ name: "f", description: "", parameters: {}, execute: () => 1 }], () => template)).toThrow(/was not made by an McpToolSource/);
  });
});
