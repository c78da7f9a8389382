/** The public API of `serve/`: the OpenAI-compatible server over a policy, its weight-update routes and the OpenAI wire shapes it shares. Re-exports only. */
export { checkExposure, defaultMaxBodyBytes, isLoopbackHost, OpenAIServer, type ServeOptions } from "./openai-server.js";
export { WeightRoutes, type WeightLoader } from "./weight-routes.js";
export {
  ApiError, bearerAuthorized, ClientGone, endStream, isObject, maxBytesPerToken, now, num, readBody, sendError, sendJson, startStream,
  templateKwargs, textContent, toChatMessages, toToolCall, toToolSpecs, usage, writeEvent, type Json,
} from "./openai-shapes.js";
