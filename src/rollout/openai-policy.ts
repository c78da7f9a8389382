/**
 * A policy served by an OpenAI-compatible server (vLLM, SGLang, `sinkflex serve`), as a `Sampler`.
 *
 * Sessions live on the client as token ids; each sample is one `/v1/completions` request whose prompt
 * is those ids, asking for the sampled token ids (`return_token_ids`, or `return_tokens_as_token_ids`
 * in the log-probs) and their log-probs, with `stop_token_ids` for the stop tokens asked for and
 * `ignore_eos` so that the model's EOS token stops a sample only when it is one of them. Prefix
 * reuse is the server's business (vLLM and SGLang cache prefixes). Note that vLLM reports the model's
 * raw log-probs unless started with `--logprobs-mode processed_logprobs`; at temperature 1 without
 * top-p/top-k they are the same. This file knows no chat template: the rollout renders and parses.
 */
import type { EngineSession, SampleParams, SampleResult } from "../engine/index.js";
import type { Sampler } from "./batch-decoder.js";

export interface OpenAIPolicyOptions {
  /** Base URL up to and including `/v1`, e.g. `http://127.0.0.1:8000/v1`. */
  baseURL: string;
  model: string;
  apiKey?: string;
  /** Per-request timeout. Default 120 s. */
  timeoutMs?: number;
  /** Concurrent requests per `sampleBatch`. Default 64. */
  maxConcurrency?: number;
}

export class OpenAIPolicyError extends Error {
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = "OpenAIPolicyError";
  }
}

/**
 * A client-side session: the token ids; a server computes them on each request, through `complete`.
 * `home` is what the sampler keeps with the session (a replica pool: the server holding its prefix in
 * its cache); a fork starts with its parent's.
 */
export class ClientSession<Home = undefined> implements EngineSession {
  home: Home | undefined;
  constructor(
    private readonly complete: (session: ClientSession<Home>, ids: number[], params: SampleParams) => Promise<SampleResult>,
    private ids: number[],
    home?: Home,
  ) {
    this.home = home;
  }
  get length(): number {
    return this.ids.length;
  }
  tokens(): number[] {
    return [...this.ids];
  }
  async append(tokens: number[]): Promise<void> {
    this.ids.push(...tokens);
  }
  async sample(params: SampleParams): Promise<SampleResult> {
    const r = await this.complete(this, this.ids, params);
    this.ids.push(...r.tokens);
    return r;
  }
  fork(): EngineSession {
    return new ClientSession(this.complete, [...this.ids], this.home);
  }
  truncate(n: number): void {
    this.ids.length = Math.min(this.ids.length, n);
  }
  close(): void {}
}

interface CompletionChoice {
  text?: string;
  finish_reason?: string | null;
  stop_reason?: number | string | null;
  token_ids?: number[];
  logprobs?: { tokens?: string[]; token_logprobs?: (number | null)[] } | null;
}

export class OpenAIPolicy implements Sampler {
  /** The policy version of the server's weights; set it when the server is synced. */
  policyVersion = 0;
  /** Prompt tokens sent and tokens received, for benchmarks. */
  readonly stats = { requests: 0, promptTokens: 0, completionTokens: 0 };
  /** The model requests name: `options.model`, or the LoRA adapter a weight sync loaded (remote-sampler.ts). */
  model: string;

  constructor(readonly options: OpenAIPolicyOptions) {
    if (!/^https?:\/\//.test(options.baseURL)) throw new Error(`baseURL must be an http(s) URL ending in /v1, got ${JSON.stringify(options.baseURL)}`);
    this.model = options.model;
  }

  async session(prefix: number[] = []): Promise<EngineSession> {
    return new ClientSession((_, ids, params) => this.complete(ids, params), [...prefix]);
  }

  async sampleBatch(sessions: EngineSession[], params: SampleParams[]): Promise<SampleResult[]> {
    const limit = this.options.maxConcurrency ?? 64;
    const out: SampleResult[] = new Array(sessions.length);
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < sessions.length; i = next++) out[i] = await sessions[i]!.sample(params[i]!);
    };
    await Promise.all(Array.from({ length: Math.min(limit, sessions.length) }, worker));
    return out;
  }

  /** One `/v1/completions` request with a token-id prompt. */
  async complete(prompt: number[], params: SampleParams): Promise<SampleResult> {
    // A budget of 0 samples nothing, as in the embedded engine (servers refuse max_tokens 0).
    if (params.maxTokens === 0) return { tokens: [], logprobs: [], finishReason: "length" };
    const body: Record<string, unknown> = {
      model: this.model,
      prompt,
      max_tokens: params.maxTokens,
      temperature: params.temperature ?? 1,
      top_p: params.topP ?? 1,
      logprobs: 0,
      return_token_ids: true,
      return_tokens_as_token_ids: true,
      skip_special_tokens: false,
      include_stop_str_in_output: true,
      // Only the stop tokens asked for end a sample: servers stop at the model's EOS token by default.
      ignore_eos: true,
    };
    if (params.topK) body.top_k = params.topK;
    if (params.seed !== undefined) body.seed = params.seed;
    if (params.stopTokens?.length) body.stop_token_ids = params.stopTokens;
    const json = (await this.post("/completions", body)) as { choices?: CompletionChoice[] };
    const choice = json.choices?.[0];
    if (!choice) throw new OpenAIPolicyError("the server's completion has no choices");
    const lp = choice.logprobs;
    let tokens = choice.token_ids;
    if (!tokens && lp?.tokens) {
      tokens = lp.tokens.map((t) => {
        const m = /^token_id:(\d+)$/.exec(t);
        if (!m) throw new OpenAIPolicyError(`the server returned token ${JSON.stringify(t)} instead of "token_id:N"; it must support return_tokens_as_token_ids or return_token_ids`);
        return Number(m[1]);
      });
    }
    if (!tokens) throw new OpenAIPolicyError("the server returned no token ids; use a server that supports return_token_ids (vLLM >= 0.10, sinkflex serve)");
    const logprobs = lp?.token_logprobs?.map((x) => x ?? 0) ?? [];
    if (logprobs.length !== tokens.length) {
      throw new OpenAIPolicyError(`the server returned ${tokens.length} tokens but ${logprobs.length} log-probs; ask for logprobs and return the stop token`);
    }
    this.stats.requests++;
    this.stats.promptTokens += prompt.length;
    this.stats.completionTokens += tokens.length;
    return { tokens, logprobs, finishReason: choice.finish_reason === "length" ? "length" : "stop" };
  }

  private async post(path: string, body: unknown): Promise<unknown> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.options.apiKey) headers.authorization = `Bearer ${this.options.apiKey}`;
    let res: Response;
    try {
      res = await fetch(this.options.baseURL.replace(/\/$/, "") + path, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.options.timeoutMs ?? 120_000),
      });
    } catch (err) {
      throw new OpenAIPolicyError(`cannot reach the policy server at ${this.options.baseURL}: ${(err as Error).message}`);
    }
    const text = await res.text();
    if (!res.ok) {
      let message = text;
      try {
        message = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? text;
      } catch {}
      throw new OpenAIPolicyError(`the policy server answered ${res.status}: ${message}`, res.status);
    }
    return JSON.parse(text) as unknown;
  }
}
