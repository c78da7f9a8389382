/**
 * `sinkflex serve <checkpoint> --port P`: serves a checkpoint folder as an OpenAI-compatible API
 * (chat completions with tools, completions, streaming, log-probs, token ids, the model list).
 *
 * It loads the weights into the embedded engine, the tokenizer and chat template from the same folder,
 * and the trimmed vocabulary when the folder has one. `openServer` does the same for tests and other
 * commands. The HTTP side is src/serve/openai-server.ts.
 */
import { existsSync } from "node:fs";
import { basename, resolve } from "node:path";
import type { Command } from "commander";
import { loadEngine } from "../../engine/embedded.js";
import { ChatTemplate } from "../../model/chat-template.js";
import { Tokenizer } from "../../model/tokenizer.js";
import { tokenCodec, TrimmedVocab } from "../../model/vocab.js";
import { OpenAIServer, type ServeOptions } from "../../serve/openai-server.js";
import { UsageError } from "../usage-error.js";

export interface OpenServerOptions extends Partial<Omit<ServeOptions, "sampler" | "codec" | "template">> {
  port?: number;
  host?: string;
}

/** Loads a checkpoint folder and starts serving it; returns the server, its base URL and a closer. */
export async function openServer(checkpoint: string, opts: OpenServerOptions = {}): Promise<{ server: OpenAIServer; url: string; close: () => Promise<void> }> {
  const dir = resolve(checkpoint);
  if (!existsSync(dir)) throw new UsageError(`no checkpoint folder at ${dir}; pass a folder with config.json, safetensors and tokenizer files`);
  if (!existsSync(resolve(dir, "tokenizer.json"))) {
    throw new UsageError(`${dir} has no tokenizer.json; copy the model's tokenizer.json and tokenizer_config.json into the checkpoint folder`);
  }
  const engine = loadEngine(dir);
  const tokenizer = Tokenizer.fromDir(dir);
  const vocab = TrimmedVocab.load(dir);
  const codec = tokenCodec(tokenizer, vocab);
  if (codec.size !== engine.config.vocabSize) {
    engine.dispose();
    throw new UsageError(
      `the model has ${engine.config.vocabSize} embedding rows but the tokenizer${vocab ? " (trimmed)" : ""} has ${codec.size} ids; the checkpoint's tokenizer files do not belong to its weights`,
    );
  }
  const server = new OpenAIServer({ sampler: engine, codec, template: ChatTemplate.fromTokenizer(tokenizer), ...opts, modelName: opts.modelName ?? basename(dir) });
  const url = await server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1");
  return {
    server,
    url,
    close: async () => {
      await server.close();
      engine.dispose();
    },
  };
}

function positiveInt(name: string) {
  return (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new UsageError(`${name} must be a non-negative integer, got "${v}"`);
    return n;
  };
}

export function registerServeCommands(program: Command): void {
  program
    .command("serve")
    .description("Serve a checkpoint as an OpenAI-compatible API (chat completions with tools, completions, streaming, log-probs, token ids).")
    .argument("<checkpoint>", "checkpoint folder (config.json, safetensors, tokenizer.json, tokenizer_config.json)")
    .option("--port <port>", "TCP port (0 picks a free one)", positiveInt("--port"), 8000)
    .option("--host <host>", "address to listen on", "127.0.0.1")
    .option("--model-name <name>", "model id clients send and /v1/models lists (default: the folder name)")
    .option("--api-key <key>", "require Authorization: Bearer <key> (default: $SINKFLEX_API_KEY, else no key)")
    .option("--max-tokens <n>", "largest max_tokens a request may ask for", positiveInt("--max-tokens"), 4096)
    .option("--max-context <n>", "largest prompt + completion in tokens", positiveInt("--max-context"), 32768)
    .option("--max-body <bytes>", "largest request body in bytes", positiveInt("--max-body"), 4 * 1024 * 1024)
    .action(async (checkpoint: string, o: { port: number; host: string; modelName?: string; apiKey?: string; maxTokens: number; maxContext: number; maxBody: number }) => {
      const { url, close } = await openServer(checkpoint, {
        port: o.port,
        host: o.host,
        modelName: o.modelName,
        apiKey: o.apiKey ?? process.env.SINKFLEX_API_KEY,
        maxTokens: o.maxTokens,
        maxContextTokens: o.maxContext,
        maxBodyBytes: o.maxBody,
      });
      console.log(`sinkflex serve: ${checkpoint} at ${url} (POST ${url}/chat/completions, ${url}/completions; GET ${url}/models). Ctrl-C stops.`);
      await new Promise<void>((r) => {
        process.once("SIGINT", r);
        process.once("SIGTERM", r);
      });
      await close();
    });
}
