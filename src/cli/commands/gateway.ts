/**
 * `sinkflex gateway <checkpoint> --port P`: serves a checkpoint through the recording gateway, so that
 * an agent written against the OpenAI API runs unchanged against `POST /sessions`' baseURL while every
 * call is recorded as a token-exact trajectory (docs/gateway.md).
 *
 * It loads the weights into the embedded engine and the tokenizer, chat template and trimmed vocabulary
 * from the same folder, with the same checks as `sinkflex serve`. `openGateway` does the same for tests.
 * The HTTP side and the assembly are src/gateway.
 */
import { basename } from "node:path";
import type { Command } from "commander";
import type { EmbeddedEngine } from "../../engine/index.js";
import type { ToolFormat, WeightDtype } from "../../model/index.js";
import { GatewayServer, type GatewayOptions } from "../../gateway/index.js";
import { DTYPE_HELP, exposure, intAtLeast, loadServedCheckpoint, parseDtype, parseToolFormat, TOOL_FORMAT_HELP } from "./served-checkpoint.js";

export interface OpenGatewayOptions extends Partial<Omit<GatewayOptions, "sampler" | "codec" | "template">> {
  /** How the weights are held in memory (default fp32). */
  dtype?: WeightDtype;
  port?: number;
  host?: string;
}


/** Loads a checkpoint folder and starts the gateway; returns it, its origin (http://HOST:PORT), the engine and a closer. */
export async function openGateway(checkpoint: string, opts: OpenGatewayOptions = {}): Promise<{ gateway: GatewayServer; url: string; engine: EmbeddedEngine; close: () => Promise<void> }> {
  const host = opts.host ?? "127.0.0.1";
  exposure(host, opts.apiKey, opts.insecure);
  const { dir, engine, codec, template, maxContextTokens } = loadServedCheckpoint(checkpoint, opts.maxContextTokens, opts.dtype);
  let gateway: GatewayServer;
  let url: string;
  try {
    // building the gateway (its options, the tool format's parser) fails as listening does: the engine goes
    gateway = new GatewayServer({ sampler: engine, codec, template, ...opts, maxContextTokens, modelName: opts.modelName ?? basename(dir) });
    url = await gateway.listen(opts.port ?? 0, host);
  } catch (err) {
    engine.dispose();
    throw err;
  }
  return {
    gateway,
    url,
    engine,
    close: async () => {
      await gateway.close();
      engine.dispose();
    },
  };
}


export function registerGatewayCommands(program: Command): void {
  program
    .command("gateway")
    .description("Serve a checkpoint as a recording OpenAI-compatible gateway: POST /sessions gives an agent a baseURL; every call is recorded as a token-exact trajectory.")
    .argument("<checkpoint>", "checkpoint folder (config.json, safetensors, tokenizer.json, tokenizer_config.json)")
    .option("--port <port>", "TCP port (0 picks a free one)", intAtLeast("--port", 0), 8100)
    .option("--host <host>", "address to listen on; beyond loopback (127.0.0.0/8, ::1, localhost) an API key is required unless --insecure", "127.0.0.1")
    .option("--model-name <name>", "model id /v1/models lists (default: the folder name); requests may name any model")
    .option("--api-key <key>", "require Authorization: Bearer <key> on every route (default: $SINKFLEX_API_KEY, else no key)")
    .option("--insecure", "serve beyond loopback without an API key (anyone who reaches the address can use the model)", false)
    .option("--max-sessions <n>", "open sessions at once; more are refused with 429 until some are deleted", intAtLeast("--max-sessions", 1), 256)
    .option("--max-calls <n>", "chat calls recorded per session", intAtLeast("--max-calls", 1), 512)
    .option("--max-tokens <n>", "largest max_tokens a call may ask for", intAtLeast("--max-tokens", 1), 4096)
    .option("--max-context <n>", "largest prompt + completion per call in tokens (default and maximum: the model's max_position_embeddings)", intAtLeast("--max-context", 1))
    .option("--max-body <bytes>", "largest request body in bytes (default: 64 KiB + 32 bytes per context token, at most 4 MiB)", intAtLeast("--max-body", 1))
    .option("--dtype <dtype>", DTYPE_HELP, parseDtype, "fp32")
    .option("--tool-format <format>", TOOL_FORMAT_HELP, parseToolFormat)
    .action(
      async (
        checkpoint: string,
        o: { port: number; host: string; modelName?: string; apiKey?: string; insecure: boolean; maxSessions: number; maxCalls: number; maxTokens: number; maxContext?: number; maxBody?: number; dtype: WeightDtype; toolFormat?: ToolFormat },
      ) => {
        const apiKey = o.apiKey ?? (process.env.SINKFLEX_API_KEY || undefined);
        const warning = exposure(o.host, apiKey, o.insecure);
        if (warning) console.error(`sinkflex gateway: ${warning}`);
        const { url, close } = await openGateway(checkpoint, {
          port: o.port,
          host: o.host,
          modelName: o.modelName,
          apiKey,
          insecure: o.insecure,
          maxSessions: o.maxSessions,
          maxCallsPerSession: o.maxCalls,
          maxTokens: o.maxTokens,
          maxContextTokens: o.maxContext,
          dtype: o.dtype,
          maxBodyBytes: o.maxBody,
          toolFormat: o.toolFormat,
        });
        console.log(`sinkflex gateway: ${checkpoint} at ${url} (POST ${url}/sessions opens a session and returns its baseURL). Ctrl-C stops.`);
        await new Promise<void>((r) => {
          process.once("SIGINT", r);
          process.once("SIGTERM", r);
        });
        await close();
      },
    );
}
