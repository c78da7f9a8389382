/**
 * Spaces: what values an environment's observations and actions may take.
 *
 * A space can test membership (`contains`), draw a random member (`sample`, for checkers and fuzzing)
 * and describe itself as JSON (for the remote protocol and `envs list`). It is not a validator with
 * error messages: tool argument validation lives in tools/.
 */
import type { AgentTurn, ChatObservation, Rng } from "../core/index.js";

export interface Space<T> {
  readonly kind: string;
  contains(value: unknown): value is T;
  sample(rng: Rng): T;
  toJSON(): Record<string, unknown>;
}

/** Unicode text of bounded length. */
export class TextSpace implements Space<string> {
  readonly kind = "text";
  constructor(
    readonly maxLength = 1_000_000,
    readonly minLength = 0,
  ) {}
  contains(value: unknown): value is string {
    return typeof value === "string" && value.length >= this.minLength && value.length <= this.maxLength;
  }
  sample(rng: Rng): string {
    const alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?{}[]\"'()\n";
    const n = this.minLength + rng.int(Math.min(64, this.maxLength - this.minLength) + 1);
    let s = "";
    for (let i = 0; i < n; i++) s += alphabet[rng.int(alphabet.length)];
    return s;
  }
  toJSON() {
    return { kind: this.kind, minLength: this.minLength, maxLength: this.maxLength };
  }
}

/** Integers 0..n-1. */
export class DiscreteSpace implements Space<number> {
  readonly kind = "discrete";
  constructor(readonly n: number) {}
  contains(value: unknown): value is number {
    return typeof value === "number" && Number.isInteger(value) && value >= 0 && value < this.n;
  }
  sample(rng: Rng): number {
    return rng.int(this.n);
  }
  toJSON() {
    return { kind: this.kind, n: this.n };
  }
}

/**
 * The action space of tool environments: one assistant turn (text plus tool calls). Membership checks
 * the shape only; whether a tool exists or its arguments are valid is the environment's business and
 * comes back as an error observation.
 */
export class ToolCallSpace implements Space<AgentTurn> {
  readonly kind = "tool-call";
  constructor(readonly toolNames: readonly string[]) {}
  contains(value: unknown): value is AgentTurn {
    if (typeof value !== "object" || value === null) return false;
    const v = value as Partial<AgentTurn>;
    if (typeof v.content !== "string" || !Array.isArray(v.toolCalls)) return false;
    return v.toolCalls.every(
      (c) =>
        typeof c === "object" &&
        c !== null &&
        typeof c.id === "string" &&
        typeof c.name === "string" &&
        typeof c.arguments === "string",
    );
  }
  sample(rng: Rng): AgentTurn {
    const n = rng.int(3);
    const toolCalls = [];
    for (let i = 0; i < n; i++) {
      const name = this.toolNames.length > 0 && rng.next() < 0.8 ? rng.pick(this.toolNames) : "no_such_tool";
      toolCalls.push({ id: `call_${i}`, name, arguments: rng.next() < 0.5 ? "{}" : "{\"x\": 1" });
    }
    return { content: rng.next() < 0.5 ? "" : "sampled text", toolCalls };
  }
  toJSON() {
    return { kind: this.kind, tools: [...this.toolNames] };
  }
}

/** Chat observations: lists of chat messages, optionally with the tool list. */
export class ChatSpace implements Space<ChatObservation> {
  readonly kind = "chat";
  contains(value: unknown): value is ChatObservation {
    if (typeof value !== "object" || value === null) return false;
    const v = value as Partial<ChatObservation>;
    if (!Array.isArray(v.messages)) return false;
    const roles = new Set(["system", "user", "assistant", "tool"]);
    return v.messages.every(
      (m) => typeof m === "object" && m !== null && roles.has(m.role) && typeof m.content === "string",
    );
  }
  sample(rng: Rng): ChatObservation {
    return { messages: [{ role: "user", content: new TextSpace(64).sample(rng) }] };
  }
  toJSON() {
    return { kind: this.kind };
  }
}

/**
 * Any JSON value: the space of a remote env whose declared space is of a kind this process does not
 * know. `sample` gives null; membership accepts any JSON-serializable value.
 */
export class JsonSpace implements Space<unknown> {
  readonly kind: string;
  constructor(readonly description: Record<string, unknown> = { kind: "json" }) {
    this.kind = typeof description.kind === "string" ? description.kind : "json";
  }
  contains(value: unknown): value is unknown {
    try {
      return value !== undefined && JSON.stringify(value) !== undefined;
    } catch {
      return false;
    }
  }
  sample(_rng: Rng): unknown {
    return null;
  }
  toJSON() {
    return { ...this.description };
  }
}

/**
 * Rebuilds a space from its `toJSON()` description (as sent by the remote protocol). Kinds this
 * file does not define become a `JsonSpace` that keeps the description.
 */
export function spaceFromJSON(json: Record<string, unknown>): Space<any> {
  const num = (key: string, fallback: number) => (typeof json[key] === "number" ? (json[key] as number) : fallback);
  switch (json.kind) {
    case "text":
      return new TextSpace(num("maxLength", 1_000_000), num("minLength", 0));
    case "discrete":
      return new DiscreteSpace(num("n", 1));
    case "tool-call":
      return new ToolCallSpace(Array.isArray(json.tools) ? json.tools.filter((t): t is string => typeof t === "string") : []);
    case "chat":
      return new ChatSpace();
    default:
      return new JsonSpace(json);
  }
}
