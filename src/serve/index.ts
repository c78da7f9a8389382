/** The public API of `serve/`: the OpenAI-compatible server over a policy. Re-exports only. */
export { checkExposure, defaultMaxBodyBytes, isLoopbackHost, OpenAIServer, type ServeOptions } from "./openai-server.js";
