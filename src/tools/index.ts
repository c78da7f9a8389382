/**
 * The public API of `tools/`: tools, ToolEnv, and the tool sources (functions, OpenAPI, MCP, SQL).
 * Re-exports only.
 */
export { functionTool, toolSpec, type Tool, type ToolContext } from "./tool.js";
export { validateArguments, signature, type ValidationResult } from "./validate.js";
export { ToolEnv, arrayTasks, formatResult, type Episode, type Score, type TaskSet, type ToolEnvHooks, type ToolError, type Expert } from "./tool-env.js";
export { openApiTools, loadOpenApiDocument, type OpenApiDocument, type OpenApiToolsOptions } from "./openapi.js";
export { McpToolSource, routeMcpTools, type McpConnection, type McpToolSourceOptions, type InProcessMcpServer } from "./mcp.js";
export * from "./sql/index.js";
