/**
 * The policy-sampler contract (policy-sampler.contract.ts) for `OpenAIPolicy` talking to a real
 * `sinkflex serve` server on 127.0.0.1 that serves the same checkpoint folder.
 */
import { openServer } from "../../../src/cli/commands/serve.js";
import { OpenAIPolicy } from "../../../src/rollout/openai-policy.js";
import { policySamplerContract } from "./policy-sampler.contract.js";

const limits = { maxTokens: 64, maxContextTokens: 1024 };

policySamplerContract("OpenAIPolicy against sinkflex serve", async (checkpoint) => {
  const { url, close } = await openServer(checkpoint, { modelName: "tiny", apiKey: "contract-key", maxTokens: limits.maxTokens, maxContextTokens: limits.maxContextTokens });
  return { sampler: new OpenAIPolicy({ baseURL: url, model: "tiny", apiKey: "contract-key", timeoutMs: 30_000 }), limits, close };
});
