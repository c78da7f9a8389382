/** The public API of `serve/`: the OpenAI-compatible server over a policy. Re-exports only. */
export { OpenAIServer, type ServeOptions } from "./openai-server.js";
