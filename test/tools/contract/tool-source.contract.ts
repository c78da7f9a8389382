/**
 * The tool-source contract: behaviour every tool source (plain functions, an OpenAPI server, an MCP
 * server, a SQL database) must show, written against the `Tool` shape and `ToolEnv` only. Each
 * source's test file calls `toolSourceContract` with a factory that builds a fresh source over a real
 * service. Where a source legitimately promises less (no per-episode isolation, no argument checks of
 * its own), the factory says so in its capabilities; the contract then checks what is promised instead.
 * This file starts no service itself.
 */
import { Ajv } from "ajv";
import { describe, expect, it } from "vitest";
import type { ChatMessage, ToolMessage } from "../../../src/core/index.js";
import type { Tool, ToolContext } from "../../../src/tools/tool.js";
import { ToolEnv, arrayTasks, formatResult, type ToolError } from "../../../src/tools/tool-env.js";
import { validateArguments } from "../../../src/tools/validate.js";

/** One tool call: the tool's name, its arguments, and optionally what its result (or error) says. */
export interface ToolCallCase {
  tool: string;
  args: Record<string, unknown>;
  expect?: RegExp;
}

export interface ToolSourceSubject<State = any> {
  /** The tools the source lists. */
  tools: Tool<any, State>[];
  /** A fresh per-episode state (a SQL session, an MCP connection), when the source's tools need one. */
  openState?(): Promise<State>;
  disposeState?(state: State): Promise<void> | void;
  /** Valid calls, run in this order; each returns a result (not an error). */
  script: ToolCallCase[];
  /** A call whose arguments fail the tool's JSON Schema. */
  invalid: ToolCallCase;
  /** A valid call that the service itself fails; `expect` matches the service's error. */
  failing: ToolCallCase & { expect: RegExp };
  /** Makes the service go away (stops the server, ends the process, closes the database). */
  stopService(): Promise<void>;
  /** What every call says once the service is gone. */
  stoppedError: RegExp;
  /** The source's own close, for sources that hold a connection; must be safe twice. */
  close?(): Promise<void>;
  /**
   * Whether the tools' calls go through the connection `close` ends (default true). False for tools
   * routed to a per-episode connection: the source that listed them can close while episodes go on.
   */
  closeEndsCalls?: boolean;
  /** Calls a tool by its name on the source itself, for sources that offer that (MCP). */
  callByName?(name: string, args: Record<string, unknown>): Promise<unknown>;
  /** Tears the fixture down; safe after anything above. */
  dispose(): Promise<void>;
}

export interface ToolSourceCapabilities {
  /** The same script on a fresh source gives the same results. */
  deterministic: boolean;
  /** Each episode gets its own state: replaying the script after `reset` gives the same results. */
  isolatesEpisodes: boolean;
  /** `execute` itself refuses arguments that fail the schema (not only ToolEnv's check in front of it). */
  checksArgumentsItself: boolean;
}

/** A ToolEnv of one task over the subject's tools, with a short default timeout. */
function envOf<State>(subject: ToolSourceSubject<State>): ToolEnv<null, State> {
  return new ToolEnv<null, State>({
    name: "ToolSourceContractEnv",
    tasks: arrayTasks([null]),
    tools: subject.tools,
    open: async () => ({ state: (await subject.openState?.()) as State, messages: [{ role: "user", content: "Use the tools." }] }),
    score: async () => ({ reward: 0, evidence: {} }),
    dispose: (state) => subject.disposeState?.(state),
    toolTimeoutMs: 10_000,
  });
}

interface CallOutcome {
  message: ToolMessage;
  errors: ToolError[];
  terminated: boolean;
  ms: number;
}

async function callIn(env: ToolEnv<null, any>, name: string, rawArgs: string): Promise<CallOutcome> {
  const t0 = Date.now();
  const [obs, , terminated, , info] = await env.step({ content: "", toolCalls: [{ id: "c1", name, arguments: rawArgs }] });
  expect(obs.messages).toHaveLength(1);
  const message = obs.messages[0] as ChatMessage;
  expect(message.role).toBe("tool");
  return { message: message as ToolMessage, errors: (info.toolErrors as ToolError[] | undefined) ?? [], terminated, ms: Date.now() - t0 };
}

const call = (env: ToolEnv<null, any>, c: ToolCallCase) => callIn(env, c.tool, JSON.stringify(c.args));

function expectOk(out: CallOutcome, c: ToolCallCase): void {
  expect(out.message.isError, `${c.tool}: ${out.message.content}`).toBeFalsy();
  expect(out.errors).toEqual([]);
  expect(out.terminated).toBe(false);
  if (c.expect) expect(out.message.content).toMatch(c.expect);
}

function expectError(out: CallOutcome, kind: ToolError["kind"], text?: RegExp): void {
  expect(out.message.isError, out.message.content).toBe(true);
  expect(out.message.content).toMatch(/^Error: \S/);
  expect(out.errors.map((e) => e.kind)).toEqual([kind]);
  expect(out.terminated).toBe(false);
  if (text) expect(out.message.content).toMatch(text);
}

/** Runs the script through a fresh episode of `env` and returns what each call showed the agent. */
async function replay(env: ToolEnv<null, any>, subject: ToolSourceSubject, seed: number): Promise<string[]> {
  await env.reset({ seed });
  const shown: string[] = [];
  for (const c of subject.script) {
    const out = await call(env, c);
    expectOk(out, c);
    shown.push(out.message.content);
  }
  return shown;
}

function tool(subject: ToolSourceSubject, name: string): Tool {
  const t = subject.tools.find((x) => x.name === name);
  if (!t) throw new Error(`the subject has no tool "${name}"; it lists ${subject.tools.map((x) => x.name).join(", ")}`);
  return t;
}

function ctxOf<State>(state: State): ToolContext<State> {
  return { state, signal: new AbortController().signal, finish: () => undefined };
}

/** Registers the contract's tests for one tool source. */
export function toolSourceContract(label: string, caps: ToolSourceCapabilities, make: () => Promise<ToolSourceSubject>): void {
  const withSubject = async (fn: (s: ToolSourceSubject) => Promise<void>) => {
    const subject = await make();
    try {
      await fn(subject);
    } finally {
      await subject.dispose();
    }
  };

  describe(`tool-source contract: ${label}`, () => {
    it("lists its tools with unique names, descriptions and JSON Schemas that compile", () =>
      withSubject(async (s) => {
        expect(s.tools.length).toBeGreaterThan(0);
        const names = s.tools.map((t) => t.name);
        expect(new Set(names).size).toBe(names.length);
        const ajv = new Ajv({ strict: false });
        for (const t of s.tools) {
          // The function-name rule of the OpenAI and Anthropic tool APIs.
          expect(t.name).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
          expect(typeof t.description).toBe("string");
          expect(t.description.trim().length, `${t.name} has no description`).toBeGreaterThan(0);
          expect(t.parameters.type, `${t.name}'s parameters`).toBe("object");
          expect(t.parameters.$schema).toBeUndefined();
          expect(() => ajv.compile(t.parameters), `${t.name}'s parameters compile`).not.toThrow();
          const props = (t.parameters.properties ?? {}) as Record<string, unknown>;
          for (const r of (t.parameters.required as string[] | undefined) ?? []) expect(props, `${t.name} requires "${r}"`).toHaveProperty([r]);
          if (t.timeoutMs !== undefined) expect(t.timeoutMs).toBeGreaterThan(0);
        }
        // Every case names a listed tool, and the valid ones pass the schema.
        for (const c of [...s.script, s.failing]) expect(validateArguments(tool(s, c.tool).parameters, c.args), `${c.tool} ${JSON.stringify(c.args)}`).toEqual({ ok: true });
      }));

    it("a valid call returns a result, called directly and through ToolEnv", async () => {
      // Directly, on a source of its own (a source without per-episode state would remember the call).
      await withSubject(async (s) => {
        const state = await s.openState?.();
        try {
          const first = s.script[0]!;
          const result = await tool(s, first.tool).execute(first.args, ctxOf(state));
          expect(typeof formatResult(result)).toBe("string");
          if (first.expect) expect(formatResult(result)).toMatch(first.expect);
        } finally {
          if (state !== undefined) await s.disposeState?.(state);
        }
      });
      await withSubject(async (s) => {
        const env = envOf(s);
        try {
          const [obs] = await env.reset({ seed: 1 });
          expect(obs.tools!.map((t) => t.name)).toEqual(s.tools.map((t) => t.name));
          for (const c of s.script) expectOk(await call(env, c), c);
        } finally {
          await env.close();
        }
      });
    });

    it("arguments that fail the schema come back as an error the agent can read, and the episode goes on", () =>
      withSubject(async (s) => {
        const bad = s.invalid;
        const t = tool(s, bad.tool);
        expect(validateArguments(t.parameters, bad.args).ok).toBe(false);
        if (caps.checksArgumentsItself) {
          const state = await s.openState?.();
          try {
            const err = await Promise.resolve()
              .then(() => t.execute(bad.args, ctxOf(state)))
              .then(
                (r) => new Error(`execute accepted ${JSON.stringify(bad.args)} and returned ${formatResult(r)}`),
                (e: unknown) => e,
              );
            expect(err).toBeInstanceOf(Error);
            expect((err as Error).message).not.toMatch(/^execute accepted/);
            expect((err as Error).message.trim().length).toBeGreaterThan(0);
          } finally {
            if (state !== undefined) await s.disposeState?.(state);
          }
        }
        const env = envOf(s);
        try {
          await env.reset({ seed: 2 });
          expectError(await call(env, bad), "invalid_arguments", new RegExp(`invalid arguments for "${bad.tool}".*Expected: ${bad.tool}\\(\\{`));
          expectError(await callIn(env, bad.tool, "{not json"), "malformed_json", /not valid JSON/);
          expectError(await callIn(env, bad.tool, "[1, 2]"), "invalid_arguments", /must be a JSON object, got an array/);
          // The episode goes on: a valid call still works.
          expectOk(await call(env, s.script[0]!), s.script[0]!);
        } finally {
          await env.close();
        }
      }));

    it("an unknown tool comes back as an error that lists the tools there are", () =>
      withSubject(async (s) => {
        const env = envOf(s);
        try {
          await env.reset({ seed: 3 });
          const out = await callIn(env, "no_such_tool", "{}");
          expectError(out, "unknown_tool", /unknown tool "no_such_tool"/);
          for (const t of s.tools) expect(out.message.content).toContain(t.name);
          expectOk(await call(env, s.script[0]!), s.script[0]!);
        } finally {
          await env.close();
        }
        if (s.callByName) await expect(s.callByName("no_such_tool", {})).rejects.toThrow(/no_such_tool/);
      }));

    it("a call the service fails comes back as an error result with the service's reason", () =>
      withSubject(async (s) => {
        const state = await s.openState?.();
        try {
          await expect(Promise.resolve().then(() => tool(s, s.failing.tool).execute(s.failing.args, ctxOf(state)))).rejects.toThrow(s.failing.expect);
        } finally {
          if (state !== undefined) await s.disposeState?.(state);
        }
        const env = envOf(s);
        try {
          await env.reset({ seed: 4 });
          expectError(await call(env, s.failing), "tool_error", s.failing.expect);
          expectOk(await call(env, s.script[0]!), s.script[0]!);
        } finally {
          await env.close();
        }
      }));

    it("a service that went down gives readable errors at once, never a hang or a crash", () =>
      withSubject(async (s) => {
        const env = envOf(s);
        try {
          await env.reset({ seed: 5 });
          expectOk(await call(env, s.script[0]!), s.script[0]!);
          await s.stopService();
          for (const c of s.script) {
            const out = await call(env, c);
            expectError(out, "tool_error", s.stoppedError);
            // Told at once, not after a timeout.
            expect(out.ms, out.message.content).toBeLessThan(5_000);
          }
        } finally {
          await env.close();
        }
      }));

    if (caps.deterministic) {
      it("gives the same results for the same calls on a fresh source", async () => {
        const runs: string[][] = [];
        for (let i = 0; i < 2; i++) {
          await withSubject(async (s) => {
            const env = envOf(s);
            try {
              runs.push(await replay(env, s, 6));
            } finally {
              await env.close();
            }
          });
        }
        expect(runs[1]).toEqual(runs[0]);
      });
    }

    if (caps.isolatesEpisodes) {
      it("isolates episodes: the same calls after reset give the same results", () =>
        withSubject(async (s) => {
          const env = envOf(s);
          try {
            const first = await replay(env, s, 7);
            expect(await replay(env, s, 8)).toEqual(first);
          } finally {
            await env.close();
          }
        }));
    }

    it("closes safely twice; a call after close is a readable error", () =>
      withSubject(async (s) => {
        const env = envOf(s);
        await env.reset({ seed: 9 });
        expectOk(await call(env, s.script[0]!), s.script[0]!);
        await env.close();
        await env.close();
        if (s.close) {
          await s.close();
          await s.close();
          if (s.closeEndsCalls === false) return;
          const after = envOf(s);
          try {
            // A per-episode state may not open once the source is closed; that too must say why.
            const opened = await after.reset({ seed: 10 }).then(
              () => true,
              (e: unknown) => {
                expect((e as Error).message.trim().length).toBeGreaterThan(0);
                return false;
              },
            );
            if (opened) expectError(await call(after, s.script[0]!), "tool_error");
          } finally {
            await after.close();
          }
        }
      }));
  });
}
