/**
 * The remote env protocol's shared vocabulary: the JSON bodies exchanged over HTTP and WebSocket,
 * and the error codes. The server (server.ts) and the client (client.ts) both import it; it does no
 * I/O. The wire format is documented in docs/remote-protocol.md.
 */
import type { EnvMetadata, Info } from "../env.js";

/** What a new session says about its env: enough for a client to declare the same spaces. */
export interface SessionInfo {
  sessionId: string;
  envId: string;
  /** The env as printed, its wrapper stack included. */
  env: string;
  observationSpace: Record<string, unknown>;
  actionSpace: Record<string, unknown>;
  metadata: EnvMetadata;
}

export interface ResetRequest {
  seed?: number;
  options?: Record<string, unknown>;
}

export interface ResetResponse<Obs = unknown> {
  observation: Obs;
  info: Info;
  /** Always false after a reset (OpenEnv's shape). */
  done: false;
}

export interface StepRequest<Act = unknown> {
  action: Act;
}

export interface StepResponse<Obs = unknown> {
  observation: Obs;
  reward: number;
  terminated: boolean;
  truncated: boolean;
  /** terminated || truncated (OpenEnv's shape). */
  done: boolean;
  info: Info;
}

export interface StateResponse {
  sessionId: string;
  envId: string;
  /** Counts resets in this session: 0 before the first one. */
  episodeId: number;
  /** Steps in the current episode. */
  stepCount: number;
  done: boolean;
  /** The env's own `render()` text. */
  render: string;
}

export type ErrorCode =
  | "bad_json"
  | "bad_request"
  | "bad_option"
  | "unauthorized"
  | "not_found"
  | "method_not_allowed"
  | "payload_too_large"
  | "session_limit"
  | "session_expired"
  | "contract"
  | "env_error"
  /** The server is shutting down (or draining): it takes no new sessions; use another server. */
  | "shutting_down";

export interface ErrorBody {
  error: { code: ErrorCode; message: string };
}

/** WebSocket frames from the client. `id` is echoed in the reply, to match replies to requests. */
export type ClientFrame =
  | { type: "reset"; id?: unknown; data?: ResetRequest }
  | { type: "step"; id?: unknown; data: StepRequest }
  | { type: "state"; id?: unknown }
  | { type: "close"; id?: unknown };

/** WebSocket frames from the server: the first is always `session`. */
export type ServerFrame =
  | { type: "session"; data: SessionInfo }
  | { type: "reset"; id?: unknown; data: ResetResponse }
  | { type: "step"; id?: unknown; data: StepResponse }
  | { type: "state"; id?: unknown; data: StateResponse }
  | { type: "close"; id?: unknown; data: { closed: true } }
  | { type: "error"; id?: unknown; error: ErrorBody["error"] };

/** WebSocket close code for a session closed by the server's idle timeout. */
export const WS_CLOSE_IDLE = 4000;
/** WebSocket close code for a session whose env could not be made. */
export const WS_CLOSE_ENV_ERROR = 4001;
