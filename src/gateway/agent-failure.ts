/**
 * What a failed agent episode is recorded as: the agent's own error (its message and the chain of its
 * causes) told apart from a connection error on the way to the gateway (the agent could not reach its
 * session's chat or tool endpoints: refused, reset or closed connections). A function agent's thrown
 * error is read through its `cause` chain; a program's is read from the end of its stderr, where Node
 * prints an uncaught error's message and its `[cause]` lines among the stack frames.
 *
 * This file only words the reason; the trainer decides when an episode failed (agent-rollouts.ts).
 */

/** Codes and messages of connection errors (Node's sockets, undici's fetch, the `openai` package). */
const CONNECTION =
  /\b(ECONNREFUSED|ECONNRESET|ECONNABORTED|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|UND_ERR_SOCKET|UND_ERR_CONNECT_TIMEOUT|UND_ERR_CLOSED|APIConnectionError|APIConnectionTimeoutError)\b|fetch failed|other side closed|socket hang up/;

/** The most links of a cause chain that are read. */
const MAX_CAUSES = 6;

/** An error's class name (a subclass that leaves `name` as "Error", as the `openai` package's do, by its constructor). */
function nameOf(e: Error): string {
  return e.name !== "Error" ? e.name : (e.constructor?.name ?? "Error");
}

/** An error and its causes, each `Name: message` (with its code where it has one). */
function causeChain(err: unknown): string[] {
  const out: string[] = [];
  let e: unknown = err;
  for (let i = 0; i < MAX_CAUSES && e !== undefined && e !== null; i++) {
    if (e instanceof Error) {
      const code = (e as { code?: unknown }).code;
      const name = nameOf(e);
      const named = name !== "Error" ? `${name}: ${e.message}` : e.message;
      out.push(typeof code === "string" && !named.includes(code) ? `${named} [${code}]` : named);
      e = e.cause;
    } else {
      out.push(String(e));
      break;
    }
  }
  return out;
}

const GATEWAY = "could not reach the gateway (a connection error to its session's endpoints, not an error of the agent's own)";

/** The reason for a function agent that threw `err`. */
export function thrownReason(err: unknown): string {
  const [first, ...causes] = causeChain(err);
  const text = `${first ?? "(nothing)"}${causes.map((c) => `; cause: ${c}`).join("")}`;
  return CONNECTION.test(text) || isConnectionError(err) ? `the agent ${GATEWAY}: ${text}` : `the agent threw: ${text}`;
}

/** Whether an error or one of its causes is a connection error (by its name or code). */
function isConnectionError(err: unknown): boolean {
  let e: unknown = err;
  for (let i = 0; i < MAX_CAUSES && e instanceof Error; i++) {
    const code = (e as { code?: unknown }).code;
    if (CONNECTION.test(nameOf(e)) || (typeof code === "string" && CONNECTION.test(code))) return true;
    e = e.cause;
  }
  return false;
}

/** An error line as Node prints an uncaught error: `TypeError: ...`, `  [cause]: Error: ...`, `  cause: TypeError: ...`. */
const ERROR_LINE = /^\s*(?:\[cause\]:\s*|cause:\s*)?(?:[A-Za-z_$][\w$]*)?(?:Error|Exception)(?:\s*\[[A-Z0-9_]+\])?:\s/;

/**
 * The end of a program's stderr, shortened to what says why it failed: the uncaught error's lines (its
 * message and causes, without stack frames) where Node printed one, else the last lines.
 */
export function stderrSummary(stderr: string): string {
  const lines = stderr.split("\n").map((l) => l.trimEnd());
  const errors = lines.filter((l) => ERROR_LINE.test(l)).map((l) => l.trim());
  const kept = errors.length > 0 ? errors : lines.filter((l) => l.trim() !== "").slice(-5).map((l) => l.trim());
  const text = kept.join(" | ");
  return text.length > 600 ? `…${text.slice(-600)}` : text;
}

/** The reason for an agent program that exited with `code` (or was ended by `signal`), from its stderr. */
export function exitReason(code: number | null, signal: NodeJS.Signals | null, stderr: string): string {
  const how = code === null ? `signal ${signal}` : `code ${code}`;
  const said = stderrSummary(stderr);
  const tail = said ? `: ${said}` : "";
  return CONNECTION.test(said) ? `the agent exited with ${how}: it ${GATEWAY}${tail}` : `the agent exited with ${how}${tail}`;
}
