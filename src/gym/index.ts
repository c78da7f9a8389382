/**
 * The gym's public API: the env contract, spaces, chat types, the registry and `make`, wrappers, the
 * vector env, `checkEnv`, and the remote protocol. This file only re-exports.
 */
export * from "./env.js";
export * from "./spaces.js";
// The chat types and the seeded generator are the core's (src/core/), re-exported here for compatibility.
export type * from "../core/index.js";
export { Rng } from "../core/index.js";
export * from "./registry.js";
export * from "./wrappers/index.js";
export * from "./vector.js";
export * from "./check.js";
export { serveEnv, type EnvServer, type EnvServerStats, type ServeEnvOptions, type RemoteEnvFactory } from "./remote/server.js";
export { RemoteEnv, RemoteEnvError, type RemoteEnvOptions } from "./remote/client.js";
export type * from "./remote/protocol.js";
export { WS_CLOSE_IDLE, WS_CLOSE_ENV_ERROR } from "./remote/protocol.js";
export { EnvPool, PooledEnv, EnvInfrastructureError, isInfrastructureFailure, INFRA_FAILURE_PREFIX, type EnvPoolOptions, type PoolEvent, type PoolStats } from "./remote/pool.js";
export { serveEnvWorkers, isEnvWorker, type WorkersHandle } from "./remote/workers.js";
export { type ClientOptionRules, SEED_RULE, TASK_INDEX_RESET_OPTIONS } from "./remote/options.js";
