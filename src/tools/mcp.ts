/**
 * MCP as a tool source: the tools of a Model Context Protocol server, as `Tool`s.
 *
 * `McpToolSource.connect` reaches a server in one of three ways: a command started as a subprocess and
 * spoken to over stdio, a streamable-HTTP URL, or an in-process server object linked by an in-memory
 * transport. Each listed MCP tool becomes a `Tool` whose parameters are the tool's `inputSchema`; a
 * call returns the text of the result's content (other content kinds are described in words), and a
 * result flagged `isError` is thrown, so `ToolEnv` turns it into an error observation. `close` ends the
 * connection and, for stdio, the subprocess. This file does not implement servers.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { JsonSchema } from "../gym/index.js";
import type { Tool } from "./tool.js";

/** Anything with `connect(transport)`: an `McpServer` or a low-level `Server` from the SDK. */
export interface InProcessMcpServer {
  connect(transport: Transport): Promise<void>;
  close(): Promise<void>;
}

export type McpConnection =
  /** A server started as a subprocess, spoken to over stdin/stdout. */
  | { kind: "stdio"; command: string; args?: string[]; env?: Record<string, string>; cwd?: string; stderr?: "inherit" | "ignore" | "pipe" }
  /** A server reached over streamable HTTP. */
  | { kind: "http"; url: string | URL; headers?: Record<string, string> }
  /** A server object in this process. */
  | { kind: "in-process"; server: InProcessMcpServer };

export interface McpToolSourceOptions {
  /** Per-call timeout (ms); 30,000 by default. */
  callTimeoutMs?: number;
  /** Prefixed to every tool name (e.g. "memory_"), to keep tools of several servers apart. */
  namePrefix?: string;
  /** Keeps only the MCP tools this returns true for. */
  include?(name: string): boolean;
}

interface McpContentItem {
  type: string;
  text?: string;
  mimeType?: string;
  data?: string;
  uri?: string;
  name?: string;
  resource?: { uri?: string; text?: string; mimeType?: string };
}

export class McpToolSource {
  private closed = false;

  private constructor(
    private readonly client: Client,
    private readonly transport: Transport,
    private readonly describe: string,
    private readonly options: McpToolSourceOptions,
    private readonly onClose: () => Promise<void>,
    /** The tools the server listed when the source connected. */
    public tools: Tool<Record<string, unknown>>[] = [],
  ) {}

  /** Connects, lists the server's tools and returns the source. Throws a readable error when the server cannot be reached. */
  static async connect(connection: McpConnection, options: McpToolSourceOptions = {}): Promise<McpToolSource> {
    const client = new Client({ name: "sinkflex", version: "0.1.0" });
    let transport: Transport;
    let describe: string;
    let onClose: () => Promise<void> = async () => undefined;
    if (connection.kind === "stdio") {
      transport = new StdioClientTransport({ command: connection.command, args: connection.args, env: connection.env, cwd: connection.cwd, stderr: connection.stderr ?? "ignore" });
      describe = `the MCP server \`${[connection.command, ...(connection.args ?? [])].join(" ")}\``;
    } else if (connection.kind === "http") {
      const url = new URL(connection.url);
      transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: connection.headers } });
      describe = `the MCP server at ${url.href}`;
    } else {
      const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
      await connection.server.connect(serverSide);
      transport = clientSide;
      describe = "the in-process MCP server";
      onClose = () => connection.server.close();
    }
    try {
      await client.connect(transport);
    } catch (err) {
      await transport.close().catch(() => undefined);
      await onClose().catch(() => undefined);
      throw new Error(`cannot connect to ${describe}: ${(err as Error).message}. Check that it starts (or runs) and speaks MCP.`);
    }
    const source = new McpToolSource(client, transport, describe, options, onClose);
    try {
      await source.refreshTools();
    } catch (err) {
      await source.close();
      throw err;
    }
    return source;
  }

  /** The subprocess id of a stdio server (null for other kinds or once closed). */
  get pid(): number | null {
    return this.transport instanceof StdioClientTransport ? this.transport.pid : null;
  }

  /** Lists the server's tools again (they may change), updating `tools`. */
  async refreshTools(): Promise<Tool<Record<string, unknown>>[]> {
    const tools: Tool<Record<string, unknown>>[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.client.listTools(cursor ? { cursor } : undefined);
      for (const t of page.tools) {
        if (this.options.include && !this.options.include(t.name)) continue;
        tools.push(this.toTool(t.name, t.description ?? t.title ?? "", t.inputSchema as JsonSchema));
      }
      cursor = page.nextCursor;
    } while (cursor);
    this.tools = tools;
    return tools;
  }

  private toTool(mcpName: string, description: string, inputSchema: JsonSchema): Tool<Record<string, unknown>> {
    const { $schema: _ignored, ...parameters } = inputSchema ?? {};
    if (parameters.type === undefined) parameters.type = "object";
    const timeoutMs = this.options.callTimeoutMs ?? 30_000;
    const tool: Tool<Record<string, unknown>> = {
      name: `${this.options.namePrefix ?? ""}${mcpName}`,
      description,
      parameters,
      // The MCP request's own timeout fires first, with the clearer message.
      timeoutMs: timeoutMs + 2_000,
      execute: (args, ctx) => this.call(mcpName, args, ctx.signal),
    };
    mcpNames.set(tool, mcpName);
    return tool;
  }

  /** Calls one MCP tool; returns its text, or throws its error text. */
  async call(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<string> {
    if (this.closed) throw new Error(`${this.describe} is closed.`);
    const timeout = this.options.callTimeoutMs ?? 30_000;
    let result: { content?: McpContentItem[]; isError?: boolean; structuredContent?: unknown };
    try {
      result = (await this.client.callTool({ name, arguments: args }, undefined, { signal, timeout })) as typeof result;
    } catch (err) {
      const message = (err as Error).message;
      if (/timed out|timeout/i.test(message)) throw new Error(`${name} on ${this.describe} did not answer within ${timeout} ms.`);
      if (/closed|not connected|ECONNREFUSED|fetch failed/i.test(message)) {
        throw new Error(`cannot reach ${this.describe} (${message}); the call to ${name} was not made. The server may be down.`);
      }
      throw new Error(`${name} failed on ${this.describe}: ${message}`);
    }
    const text = contentText(result.content ?? []) || (result.structuredContent !== undefined ? JSON.stringify(result.structuredContent) : "");
    if (result.isError) throw new Error(text || `${name} reported an error without a message.`);
    return text;
  }

  /** Ends the connection; a stdio server's process is ended too. Safe to call more than once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.transport instanceof StreamableHTTPClientTransport) await this.transport.terminateSession().catch(() => undefined);
    await this.client.close().catch(() => undefined);
    await this.onClose().catch(() => undefined);
  }
}

/** The MCP-side name of each tool a source made (its `name` may carry a prefix). */
const mcpNames = new WeakMap<Tool, string>();

/**
 * The same tools, each call sent to the MCP server held in the episode's state instead of the source
 * that listed them: start one server per episode in `open` (and close it in `dispose`), and no state
 * of the server leaks from one episode to the next.
 */
export function routeMcpTools<State>(tools: Tool<Record<string, unknown>>[], source: (state: State) => McpToolSource): Tool<Record<string, unknown>, State>[] {
  return tools.map((t) => {
    const mcpName = mcpNames.get(t);
    if (mcpName === undefined) throw new Error(`routeMcpTools: "${t.name}" was not made by an McpToolSource.`);
    return { ...t, execute: (args, ctx) => source(ctx.state).call(mcpName, args, ctx.signal) };
  });
}

function contentText(items: McpContentItem[]): string {
  return items
    .map((c) => {
      if (c.type === "text") return c.text ?? "";
      if (c.type === "image" || c.type === "audio") return `[${c.type} ${c.mimeType ?? ""}, ${Math.floor(((c.data?.length ?? 0) * 3) / 4)} bytes]`;
      if (c.type === "resource") return c.resource?.text ?? `[resource ${c.resource?.uri ?? ""}]`;
      if (c.type === "resource_link") return `[resource ${c.name ?? ""} ${c.uri ?? ""}]`;
      return `[${c.type} content]`;
    })
    .join("\n");
}
