/**
 * `sinkflex serve <checkpoint> --port P`: serves a checkpoint folder as an OpenAI-compatible API
 * (chat completions with tools, completions, streaming, log-probs, token ids, the model list).
 *
 * It loads the weights into the embedded engine, the tokenizer and chat template from the same folder,
 * and the trimmed vocabulary when the folder has one. The context limit defaults to the model's
 * positions and may not exceed them; beyond loopback it needs an API key (or `--insecure`). `openServer`
 * does the same for tests and other commands. The HTTP side is src/serve/openai-server.ts.
 */
import { basename } from "node:path";
import type { Command } from "commander";
import type { EmbeddedEngine } from "../../engine/index.js";
import type { SamplingWeights, ToolFormat, WeightDtype } from "../../model/index.js";
import { OpenAIServer, type ServeOptions } from "../../serve/index.js";
import { DTYPE_HELP, exposure, intAtLeast, loadServedCheckpoint, parseDtype, parseSamplingWeights, parseToolFormat, SAMPLING_WEIGHTS_HELP, TOOL_FORMAT_HELP } from "./served-checkpoint.js";

export interface OpenServerOptions extends Partial<Omit<ServeOptions, "sampler" | "codec" | "template">> {
  /** How the weights are held in memory (default fp32). */
  dtype?: WeightDtype;
  /** What completions sample from: the weights ("same", the default) or int8 copies ("int8"). */
  samplingWeights?: SamplingWeights;
  port?: number;
  host?: string;
  /** Answer vLLM's weight-update routes (load a checkpoint or a LoRA adapter folder named by a client): `--allow-reload`. */
  allowReload?: boolean;
}


/**
 * Loads a checkpoint folder and starts serving it; returns the server, its base URL, the engine (its
 * open sessions show what requests hold) and a closer.
 */
export async function openServer(checkpoint: string, opts: OpenServerOptions = {}): Promise<{ server: OpenAIServer; url: string; engine: EmbeddedEngine; close: () => Promise<void> }> {
  const host = opts.host ?? "127.0.0.1";
  exposure(host, opts.apiKey, opts.insecure);
  const { dir, engine, codec, template, maxContextTokens } = loadServedCheckpoint(checkpoint, opts.maxContextTokens, opts.dtype, opts.samplingWeights);
  let server: OpenAIServer;
  let url: string;
  try {
    // building the server (its options, the tool format's parser) fails as listening does: the engine goes
    server = new OpenAIServer({ sampler: engine, scorer: engine, codec, template, ...opts, maxContextTokens, modelName: opts.modelName ?? basename(dir), reload: opts.allowReload ? engine : undefined });
    url = await server.listen(opts.port ?? 0, host);
  } catch (err) {
    engine.dispose();
    throw err;
  }
  return {
    server,
    url,
    engine,
    close: async () => {
      await server.close();
      engine.dispose();
    },
  };
}


export function registerServeCommands(program: Command): void {
  program
    .command("serve")
    .description("Serve a checkpoint as an OpenAI-compatible API (chat completions with tools, completions, streaming, log-probs, token ids).")
    .argument("<checkpoint>", "checkpoint folder (config.json, safetensors, tokenizer.json, tokenizer_config.json)")
    .option("--port <port>", "TCP port (0 picks a free one)", intAtLeast("--port", 0), 8000)
    .option("--host <host>", "address to listen on; beyond loopback (127.0.0.0/8, ::1, localhost) an API key is required unless --insecure", "127.0.0.1")
    .option("--model-name <name>", "model id clients send and /v1/models lists (default: the folder name)")
    .option("--api-key <key>", "require Authorization: Bearer <key> (default: $SINKFLEX_API_KEY, else no key)")
    .option("--insecure", "serve beyond loopback without an API key (anyone who reaches the address can use the model)", false)
    .option("--max-tokens <n>", "largest max_tokens a request may ask for", intAtLeast("--max-tokens", 1), 4096)
    .option("--max-context <n>", "largest prompt + completion in tokens (default and maximum: the model's max_position_embeddings)", intAtLeast("--max-context", 1))
    .option("--max-body <bytes>", "largest request body in bytes (default: 64 KiB + 32 bytes per context token, at most 4 MiB)", intAtLeast("--max-body", 1))
    .option("--dtype <dtype>", DTYPE_HELP, parseDtype, "fp32")
    .option("--sampling-weights <kind>", SAMPLING_WEIGHTS_HELP, parseSamplingWeights, "same")
    .option("--tool-format <format>", TOOL_FORMAT_HELP, parseToolFormat)
    .option("--allow-reload", "accept weight updates from a trainer (vLLM's routes: /update_weights with a checkpoint folder, /v1/load_lora_adapter; docs/serve.md)", false)
    .action(
      async (
        checkpoint: string,
        o: { port: number; host: string; modelName?: string; apiKey?: string; insecure: boolean; maxTokens: number; maxContext?: number; maxBody?: number; dtype: WeightDtype; samplingWeights: SamplingWeights; allowReload: boolean; toolFormat?: ToolFormat },
      ) => {
        const apiKey = o.apiKey ?? (process.env.SINKFLEX_API_KEY || undefined);
        const warning = exposure(o.host, apiKey, o.insecure);
        if (warning) console.error(`sinkflex serve: ${warning}`);
        const { url, close } = await openServer(checkpoint, {
          port: o.port,
          host: o.host,
          modelName: o.modelName,
          apiKey,
          insecure: o.insecure,
          maxTokens: o.maxTokens,
          maxContextTokens: o.maxContext,
          dtype: o.dtype,
          samplingWeights: o.samplingWeights,
          maxBodyBytes: o.maxBody,
          allowReload: o.allowReload,
          toolFormat: o.toolFormat,
        });
        console.log(`sinkflex serve: ${checkpoint} at ${url} (POST ${url}/chat/completions, ${url}/completions; GET ${url}/models). Ctrl-C stops.`);
        await new Promise<void>((r) => {
          process.once("SIGINT", r);
          process.once("SIGTERM", r);
        });
        await close();
      },
    );
}
