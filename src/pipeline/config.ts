/**
 * The training configuration: one validated file (YAML or JSON) for the SFT -> GRPO -> evaluation
 * pipeline. Unknown fields and unsupported combinations are errors that name the field and the allowed
 * values; nothing is silently ignored.
 *
 * A config file may declare a `scale` section (a recipe's rule for how its counts grow with a longer time
 * budget and with bf16 products; configs/demo.yaml has one): it is applied when the file is loaded
 * (`scaleRecipe`) and is never part of the validated config a run saves.
 *
 * Named configs: "reference" (the paper's defaults for real models: lr 5e-6, batch 32 tasks, group 8,
 * KL 0.04, 3 epochs, `referenceGrpo`). The demo's recipe is a file, configs/demo.yaml. This file is not
 * the pipeline itself (train.ts) nor any recipe's values.
 */
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import type { AgentFunction } from "../gateway/index.js";
import { ATTENTION_INITS, TOOL_FORMATS } from "../model/index.js";
import { LORA_TARGETS, type LoraTarget } from "../engine/index.js";
import { ATTENTION_MODES, SAMPLING_WEIGHTS, WEIGHT_DTYPES } from "../model/index.js";
import { MATMUL_PRECISIONS, type MatmulPrecision } from "../kernels/index.js";
import { ADVANTAGE_ESTIMATORS } from "../rl/index.js";
import { resolveModule } from "./user-modules.js";

const positiveInt = z.number("must be a number").int("must be a whole number").min(1, "must be at least 1");
/** Every count has an upper bound, so that a typo (1e12 steps) is refused here rather than failing mid-run. */
const atMost = (max: number) => `must be at most ${max}`;

const JudgeEntry = z
  .object({
    weight: z.number().positive(),
    /** e.g. http://127.0.0.1:8000/v1 */
    baseUrl: z.string().url("a URL like http://127.0.0.1:8000/v1"),
    model: z.string().min(1),
    /** What a good trajectory is, in words. */
    rubric: z.string().min(1),
    /** The name of an environment variable that holds the API key (keys stay out of config files). */
    apiKeyEnv: z.string().optional(),
    concurrency: positiveInt.max(1024, atMost(1024)).default(4),
    requestsPerSecond: z.number().min(0).default(0),
    timeoutMs: positiveInt.max(3600000, atMost(3600000)).default(30_000),
    retries: z.number().int().min(0).max(100, atMost(100)).default(2),
    /** A JSONL file that keeps the judge's answers across runs. */
    cacheFile: z.string().optional(),
  })
  .strict();

/**
 * An agent of the user's own playing a suite's GRPO episodes (src/pipeline/stages/agent-rollouts.ts):
 * exactly one of `command` (a shell command, run from the working folder) and `run` (a function, for
 * configs built in code; it is not kept in the run folder's config.json). `reward`: "verifier" (the
 * suite's reward on the env the agent drove through the session's tools) or "agent" (what the agent
 * posts to its session's /reward).
 */
const AgentEntry = z
  .object({
    command: z.string().min(1, "give the command that starts the agent, e.g. node my-agent.mjs").optional(),
    run: z.custom<AgentFunction>((v) => typeof v === "function", "must be a function (ctx) => Promise<void>").optional(),
    /** An episode still running after this is ended (its process killed) and recorded as failed. */
    timeoutMs: z.number().int().min(100).max(3_600_000, atMost(3_600_000)).default(120_000),
    reward: z.enum(["verifier", "agent"]).default("verifier"),
  })
  .strict()
  .refine((a) => (a.command === undefined) !== (a.run === undefined), { message: "give exactly one of command (a program) and run (a function)" });

const RemoteEntry = z
  .object({
    /** The servers, http://host:port each, all serving the suite's env id. */
    urls: z
      .array(
        z
          .string()
          .url("a URL like http://127.0.0.1:8765")
          .refine((u) => /^https?:\/\//i.test(u), "must be an http:// or https:// URL of a `sinkflex envs serve` (the pool adds /ws itself)"),
      )
      .min(1, "list at least one server")
      .max(1024, atMost(1024))
      .refine((us) => new Set(us).size === us.length, "lists a server twice; list each server once (raise sessionsPerServer for more sessions on it)"),
    /** The name of an environment variable that holds the servers' API key (keys stay out of config files). */
    apiKeyEnv: z.string().optional(),
    /** Sessions opened on one server at most (at or below its --max-sessions). */
    sessionsPerServer: positiveInt.max(100000, atMost(100000)).default(16),
    transport: z.enum(["ws", "http"]).default("ws"),
    stepTimeoutMs: positiveInt.max(3600000, atMost(3600000)).default(60_000),
    episodeTimeoutMs: positiveInt.max(86400000, atMost(86400000)).default(600_000),
    /** Moves of one episode to another server before it counts as an infrastructure failure. */
    maxRetries: z.number().int().min(0).max(100, atMost(100)).default(3),
  })
  .strict();

const SuiteEntry = z
  .object({
    env: z.string().regex(/^[a-z0-9][a-z0-9_.-]*\/[a-z0-9][a-z0-9_.-]*-v\d+$/, "an env id like sinkflex/arith-v0"),
    /** Options passed to `make` (task set, difficulty, ...). */
    options: z.record(z.string(), z.unknown()).default({}),
    /** Options for the held-out evaluation tasks (defaults to `options`). */
    evalOptions: z.record(z.string(), z.unknown()).optional(),
    /** Held-out tasks of this suite (default eval.tasksPerSuite): more where episodes are cheap, for narrower intervals. */
    evalTasks: positiveInt.max(1000000, atMost(1000000)).optional(),
    /** Expert episodes of this suite for SFT (default sft.expertEpisodes): more for a suite that needs more to learn. */
    sftEpisodes: z.number().int().min(0).max(1000000, atMost(1000000)).optional(),
    /**
     * false: SFT's context-loss phase (sft.contextLossFraction) leaves this suite's episodes on the
     * assistant's tokens alone, for a suite whose user and tool text is mostly what no model can predict
     * (random values and the API's results) and which learns to copy without it. Default true.
     */
    sftContextLoss: z.boolean().optional(),
    /**
     * The fraction of this suite's SFT batches trained first, before the shuffled mix of every suite's
     * (evenly spaced among its batches, so the ones left stay spread over the mix; the first epoch; with
     * sft.batchBy "prefix"; default 0). For a suite whose skill forms when it is trained alone and not
     * among the other suites' batches.
     */
    sftLead: z.number().min(0).max(1).optional(),
    /**
     * Distinct training tasks kept for GRPO alone: SFT never sees them, and GRPO draws only from them,
     * so RL learns on tasks as new to the policy as the held-out ones (default: GRPO draws from the
     * tasks SFT trained on). At most half of the suite's training contents.
     */
    rlTasks: positiveInt.max(1000000, atMost(1000000)).optional(),
    /**
     * The chance, before each turn of an expert episode, that the expert first makes a typical mistake
     * (which changes nothing and is never trained on) and then recovers: SFT data that shows what to do
     * after a wrong command. Only suites whose expert makes mistakes (household); default 0.
     */
    sftMistakes: z.number().min(0).max(0.5, "must be at most 0.5: an expert episode should be mostly the expert's own turns").optional(),
    weight: z.number().positive().default(1),
    /**
     * The reward GRPO learns from on this suite: the weights of a rubric over the env's verifier, its
     * partial progress (envs that report `info.progress`) and well-formed tool calls. Success
     * (metrics, evaluation) is always the verifier's.
     */
    reward: z
      .object({
        verifier: z.number().min(0).default(1),
        progress: z.number().min(0).default(0),
        format: z.number().min(0).default(0),
        /** An LLM judge through an OpenAI-compatible endpoint (`sinkflex serve`, vLLM, a hosted model). */
        judge: JudgeEntry.optional(),
      })
      .strict()
      .refine((r) => r.verifier + r.progress + r.format + (r.judge?.weight ?? 0) > 0, { message: "at least one reward weight must be above 0" })
      .optional(),
    /**
     * Play this suite's GRPO episodes with an agent of your own instead of the built-in agent loop, through
     * the recording gateway (docs/gateway.md): `command` (a program started per episode with
     * OPENAI_BASE_URL, OPENAI_API_KEY and SINKFLEX_TASK) or, in code, `run` (a TypeScript function).
     */
    agent: AgentEntry.optional(),
    /**
     * Play this suite's GRPO episodes on `sinkflex envs serve` servers (an env pool, docs/remote-protocol.md)
     * instead of in this process; task and seed assignment stay those of a local run. The id must also be
     * installed here: planning, SFT's expert episodes and evaluation use the local env.
     */
    remote: RemoteEntry.optional(),
  })
  .strict();

const ModelSection = z
  .object({
    /** A Hugging Face checkpoint folder to start from. */
    checkpoint: z.string().optional(),
    /** Or a fresh random model of this shape (a trimmed-vocabulary model is built from the suites' text). */
    init: z
      .object({
        family: z.enum(["qwen2", "llama"]).default("qwen2"),
        hiddenSize: positiveInt.max(65536, atMost(65536)).default(128),
        layers: positiveInt.max(1024, atMost(1024)).default(4),
        heads: positiveInt.max(1024, atMost(1024)).default(4),
        kvHeads: positiveInt.max(1024, atMost(1024)).default(2),
        intermediateSize: positiveInt.max(262144, atMost(262144)).default(384),
        maxPositions: positiveInt.max(1000000, atMost(1000000)).default(4096),
        /** How the attention weights start: "random" (N(0, 0.02)) or "mimetic" (query-key and value-output products near a projection; src/model/mimetic.ts). */
        attentionInit: z.enum(ATTENTION_INITS).default("random"),
      })
      .strict()
      .optional(),
    /**
     * How matrix products compute: "fp32", or "bf16" (operands rounded to bfloat16, fp32 accumulation, on
     * the CPU's AMX tile unit, 2.5-2.8x the training speed, or with its AVX512-BF16 dot products, 1.7-1.9x;
     * elsewhere the products stay fp32 and the log says so). Weights, gradients, optimizer state and every
     * other operation stay fp32.
     */
    matmul: z.enum(MATMUL_PRECISIONS).default("fp32"),
    /**
     * How the weights are held in memory: "fp32", or "bf16" (the weight matrices only as bf16, half the
     * memory; products read bf16 and accumulate in fp32). With "bf16", model.lora trains an fp32 adapter
     * beside the frozen weights; without it every weight trains through an fp32 master copy the engine
     * rounds into them after each step (docs/model.md). The reference policy is held in bf16 too.
     */
    dtype: z.enum(WEIGHT_DTYPES).default("fp32"),
    /**
     * Train a LoRA adapter (rank r on the listed projections, scaled alpha / r; alpha defaults to r) on the
     * frozen checkpoint instead of every weight; checkpoints are then PEFT adapter folders (docs/model.md).
     */
    lora: z
      .object({
        rank: positiveInt.max(4096, atMost(4096)),
        alpha: z.number().positive().optional(),
        // short names or the module names (q or q_proj; Phi-3's fused qkv_proj and gate_up_proj)
        targets: z
          .array(z.enum([...LORA_TARGETS, ...LORA_TARGETS.map((t) => `${t}_proj` as const)]).transform((t) => t.replace(/_proj$/, "") as LoraTarget))
          .min(1, `list at least one of ${LORA_TARGETS.join(", ")} (the model family's modules)`),
        dropout: z.literal(0, "only 0 (LoRA dropout is not implemented)").default(0),
      })
      .strict()
      .optional(),
  })
  .strict()
  .refine((m) => (m.checkpoint ? !m.init : !!m.init), { message: "set exactly one of model.checkpoint or model.init" })
  .refine((m) => !m.lora || !!m.checkpoint, { message: "model.lora trains an adapter on a pretrained model: set model.checkpoint", path: ["lora"] })
  .refine((m) => m.dtype !== "bf16" || !!m.checkpoint, {
    message: "model.dtype bf16 holds a checkpoint's weights in bf16, and a model.init policy starts in fp32: set model.checkpoint, or leave model.dtype at fp32",
    path: ["dtype"],
  });

/**
 * The policy's attention (docs/attention.md): "full", "sink-window" (K = `sinks` leading slots + a window),
 * or "profile": before SFT the policy is probed on a sample of the run's own conversations (or
 * `profile` names a saved SinkProfile) and its sink slots cover that model's own position sinks, up to
 * `pinBudget` slots beyond `sinks`; GRPO probes again every `reprobeEvery` steps (0 = never) and logs
 * what moved. `sinkLogit` adds the learnable per-head sink logit, initialized so outputs are unchanged.
 */
const AttentionSection = z
  .object({
    mode: z.enum(ATTENTION_MODES).default("full"),
    sinks: z.number().int().min(0).max(1024, atMost(1024)).default(4),
    window: positiveInt.max(1000000, atMost(1000000)).default(1024),
    profile: z.string().min(1, "name a SinkProfile JSON file (sinkflex sinks probe --out FILE)").optional(),
    pinBudget: z.number().int().min(0).max(1024, atMost(1024)).default(4),
    reprobeEvery: z.number().int().min(0).max(1000000, atMost(1000000)).default(0),
    probeSequences: positiveInt.max(4096, atMost(4096)).default(16),
    sinkLogit: z.boolean().default(false),
  })
  .strict();

/**
 * Which engine computes the policy and the reference: "embedded" (in this process, CPU; the default) or
 * "torch" (a PyTorch worker, python/; docs/backends.md). For torch: `url` connects to a running worker
 * (`unix:/path.sock` or `tcp://host:port`; checkpoint paths must then be readable by the worker as written
 * here), else one worker per engine is started with `python` (default $SINKFLEX_TORCH_PYTHON, else
 * python3) on `device`; `tokenEnv` names the environment variable holding the worker's token.
 */
const EngineSection = z
  .object({
    backend: z.enum(["embedded", "torch"]).default("embedded"),
    url: z.string().regex(/^(unix:.+|tcp:\/\/.+:\d+)$/, "a worker address like unix:/tmp/w.sock or tcp://127.0.0.1:7000").optional(),
    device: z.enum(["cpu", "cuda"]).optional(),
    python: z.string().min(1).optional(),
    tokenEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "an environment variable name like SINKFLEX_WORKER_TOKEN").optional(),
    /** torch CPU threads of a started worker (0 = torch's default). */
    threads: z.number().int().min(0).max(1024, atMost(1024)).default(0),
    /**
     * What the embedded engine's sampling sessions multiply by: "same" (the weights) or "int8" (copies
     * quantized in blocks of 32, re-made after every step; about half the memory traffic of bf16 per
     * decoded token). Training and scoring keep the weights; truncated IS corrects the gap. Default "same".
     */
    samplingWeights: z.enum(SAMPLING_WEIGHTS).optional(),
  })
  .strict();
export type EngineConfig = z.infer<typeof EngineSection>;

/**
 * GRPO's rollouts sampled by OpenAI-compatible policy servers instead of the engine (docs/backends.md,
 * "vLLM sampling"): vLLM replicas on GPUs, or `sinkflex serve --allow-reload`. Each of `urls` (ending in
 * /v1) serves `model`; rollouts go to the least-loaded replica, token ids in and out, with the server's
 * log-probs recorded as the behaviour policy's. The engine trains; after every update the policy is
 * saved to `weightsDir` (default: the run folder's sampler-weights/; it must be readable by every
 * replica at the same absolute path) and every replica loads it — `sync` "reload" (full weights, vLLM's
 * weight-transfer routes with the disk backend) or "lora" (the PEFT adapter model.lora trains, vLLM's
 * runtime LoRA loading) — before the next step samples. `apiKeyEnv` names the environment variable
 * holding the servers' API key.
 */
const SamplerSection = z
  .object({
    kind: z.literal("openai"),
    urls: z
      .array(z.string().regex(/^https?:\/\/[^\s/]+.*\/v1\/?$/, "a server's base URL ending in /v1, like http://127.0.0.1:8000/v1"))
      .min(1, "list at least one server")
      .max(1024, atMost(1024))
      .refine((us) => new Set(us).size === us.length, "lists a server twice; list each replica once"),
    /** The model name the servers serve (vLLM's --served-model-name, sinkflex serve's --model-name). */
    model: z.string().min(1, "the model name the servers serve (vLLM's --served-model-name)"),
    sync: z.enum(["reload", "lora"]),
    apiKeyEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "an environment variable name like SINKFLEX_SAMPLER_KEY").optional(),
    weightsDir: z.string().min(1).optional(),
    /** One sample request's limit. */
    timeoutMs: positiveInt.max(3600000, atMost(3600000)).default(120_000),
    /** One replica's weight update's limit (loading a large checkpoint). */
    syncTimeoutMs: positiveInt.max(3600000, atMost(3600000)).default(600_000),
    /** Requests in flight per replica at most. */
    maxConcurrency: positiveInt.max(65536, atMost(65536)).default(64),
  })
  .strict();
export type SamplerConfig = z.infer<typeof SamplerSection>;

/** The learning-rate schedule's fields, shared by SFT and GRPO (src/rl/lr-schedule.ts). */
const LrScheduleFields = {
  lrSchedule: z.enum(["constant", "cosine"]).default("constant"),
  /** The cosine schedule's final learning rate as a fraction of lr (default 0.1). */
  minLrRatio: z.number().min(0).max(1).optional(),
};

const SftSection = z
  .object({
    enabled: z.boolean().default(true),
    /** Expert episodes generated per suite as training data. */
    expertEpisodes: z.number().int().min(0).max(1000000, atMost(1000000)).default(64),
    /** Extra OpenAI-chat JSONL files (with tools and tool_calls). */
    data: z.array(z.string()).default([]),
    epochs: positiveInt.max(1000, atMost(1000)).default(2),
    lr: z.number().positive().default(1e-3),
    batchSize: positiveInt.max(65536, atMost(65536)).default(8),
    weightDecay: z.number().min(0).default(0.0),
    /** Steps of linear learning-rate warm-up. */
    warmupSteps: z.number().int().min(0).max(1000000, atMost(1000000)).default(0),
    /** Save a checkpoint every N SFT steps: a run killed during SFT loses at most N steps (--resume). */
    checkpointEvery: positiveInt.max(1000000, atMost(1000000)).default(250),
    /** "constant", or "cosine" decay to minLrRatio x lr at the last planned step. */
    ...LrScheduleFields,
    /**
     * Fraction of the SFT steps (the first ones) whose loss also covers the user and tool tokens: it
     * teaches a model trained from scratch to read its context. 0 for pretrained models.
     */
    contextLossFraction: z.number().min(0).lt(1, "must be below 1: the last SFT steps train on the assistant's tokens only").default(0),
    /**
     * The copy drill (src/recipes/copy-drill.ts): synthetic examples, each a row of spans cut from the SFT
     * examples' context and written twice, the loss on the second copy; their batches lead the first
     * epoch. It teaches a model trained from scratch to copy from its context before it learns the
     * suites' episodes. Needs batchBy "prefix". Off by default.
     */
    copyDrill: z
      .object({
        /** How many drill examples (batchSize of them a step). */
        examples: z.number().int().min(1).max(1000000, atMost(1000000)),
        /** The shortest and the longest span, in tokens (default [8, 47]). */
        spanTokens: z.tuple([z.number().int().min(2).max(65536, atMost(65536)), z.number().int().min(2).max(65536, atMost(65536))]).default([8, 47]),
        /** An example grows by doubled spans until it has at least this many tokens (default 200). */
        tokens: positiveInt.max(1000000, atMost(1000000)).default(200),
        /** The share of examples whose spans are written once each, then again in a shuffled order (default 0). */
        recall: z.number().min(0).max(1).optional(),
        /**
         * Drill on past `examples` while the drill's mean loss over its last `lossSteps` steps is at or above
         * this (checked after its last leading batch, then after each further one), up to `maxExamples` in
         * all. Off by default: the drill is `examples` long.
         */
        untilLoss: z.number().positive().optional(),
        /** The steps untilLoss's mean is taken over (default 100; `drillLossSteps`). */
        lossSteps: positiveInt.max(1000000, atMost(1000000)).optional(),
        /** The most drill examples with untilLoss (default twice `examples`; `drillMaxExamples`). */
        maxExamples: positiveInt.max(1000000, atMost(1000000)).optional(),
      })
      .strict()
      .refine((d) => d.spanTokens[0] <= d.spanTokens[1], { path: ["spanTokens"], message: "the shortest span (first) must not be longer than the longest (second)" })
      .refine((d) => d.untilLoss !== undefined || d.maxExamples === undefined, { path: ["maxExamples"], message: "only applies with untilLoss (without it the drill is `examples` long)" })
      .refine((d) => d.untilLoss !== undefined || d.lossSteps === undefined, { path: ["lossSteps"], message: "only applies with untilLoss" })
      .refine((d) => d.maxExamples === undefined || d.maxExamples >= d.examples, { path: ["maxExamples"], message: "must be at least `examples` (the drill's length before untilLoss is checked)" })
      .optional(),
    /** "shuffle": batches drawn at random; "prefix": each batch from the examples of one system prompt (suite). */
    batchBy: z.enum(["shuffle", "prefix"]).default("shuffle"),
    /** Pack examples sharing a prefix into one sequence with one copy of it (same loss, fewer tokens). */
    packPrefixes: z.boolean().default(true),
    /**
     * Which training tasks the expert plays: "task", the training tasks in their seeded order (a content
     * the generator repeats is played as often as it repeats); "content", one task per distinct training
     * content in turn, the distribution the held-out tasks are drawn from.
     */
    taskSampling: z.enum(["task", "content"]).default("task"),
  })
  .strict();

const GrpoSection = z
  .object({
    enabled: z.boolean().default(true),
    steps: z.number().int().min(0).max(1000000, atMost(1000000)).default(10),
    batchTasks: positiveInt.max(65536, atMost(65536)).default(32),
    groupSize: positiveInt.max(1024, atMost(1024)).default(8),
    lr: z.number().positive().default(5e-6),
    /**
     * Steps of linear learning-rate warm-up. RL starts a fresh AdamW, whose first updates move every
     * weight by about lr whatever its gradient's size; a warm-up keeps those first moves small.
     */
    warmupSteps: z.number().int().min(0).max(1000000, atMost(1000000)).default(0),
    /**
     * "constant", or "cosine" decay to minLrRatio x lr at the last planned step (grpo.steps; a time budget
     * that ends GRPO sooner does not re-plan it).
     */
    ...LrScheduleFields,
    epochs: positiveInt.max(1000, atMost(1000)).default(3),
    klCoef: z.number().min(0).default(0.04),
    klEstimator: z.enum(["k3"]).default("k3"),
    estimator: z.enum(ADVANTAGE_ESTIMATORS as unknown as ["grpo", "dr-grpo", "rloo"]).default("grpo"),
    clipLow: z.number().min(0).max(1).default(0.2),
    clipHigh: z.number().min(0).default(0.28),
    aggregation: z.enum(["token", "sequence"]).default("token"),
    /** Cap of the truncated importance weight against the behaviour policy; 0 disables the correction. */
    tisCap: z.number().min(0).default(2),
    filterDegenerateGroups: z.boolean().default(true),
    /**
     * Weight every suite's policy-gradient term equally (the configured aggregation within a suite, then
     * the mean over the suites in the batch), so that a suite with many mixed-reward groups does not
     * outweigh the others. Default false: every token (or sequence) of the batch weighs the same.
     */
    balanceSuites: z.boolean().default(false),
    /**
     * Scale of the negative advantages (those of the sequences that did worse than their group), in
     * (0, 1]. Below 1 the update leans on reinforcing what worked: pushing a failed sequence down spreads
     * its tokens' probability over every other token, while pushing a success up concentrates it.
     * Default 1: positive and negative advantages weigh the same.
     */
    negativeAdvantageScale: z.number().gt(0).max(1).default(1),
    /**
     * How a step draws each suite's tasks: "task", uniformly over the training tasks (a generator that
     * repeats some contents more often, such as a template with few distinct questions, is drawn more
     * often), or "content", uniformly over the distinct training contents, as the held-out tasks are
     * chosen. Default "task".
     */
    taskSampling: z.enum(["task", "content"]).default("task"),
    maxStaleness: z.number().int().min(0).max(1000000, atMost(1000000)).default(0),
    maxGradNorm: z.number().min(0).default(1),
    weightDecay: z.number().min(0).default(0),
    temperature: z.number().positive().default(1),
    topP: z.number().gt(0).max(1).default(1),
    maxTurns: positiveInt.max(10000, atMost(10000)).default(20),
    maxTokensPerTurn: positiveInt.max(1000000, atMost(1000000)).default(256),
    maxContextTokens: positiveInt.max(1000000, atMost(1000000)).default(8192),
    /** Trajectories in flight at once. */
    concurrency: positiveInt.max(65536, atMost(65536)).default(16),
    /** Pack a group's sequences into one with one copy of their shared prompt (same loss, fewer tokens). */
    packPrefixes: z.boolean().default(true),
  })
  .strict();

/**
 * The agent loop's reading of sampled turns: `toolFormat` names the tool-call format whose parser reads
 * them ("hermes": Qwen's <tool_call> blocks, "llama3-json": Llama 3.1's JSON calls, "phi3-hermes": the
 * Hermes blocks in Phi-3's plain turns). Default: the chat template's, which is the checkpoint family's
 * (docs/model.md, "Families and tool formats").
 */
const RolloutSection = z
  .object({
    toolFormat: z.enum(TOOL_FORMATS).optional(),
  })
  .strict();

const EvalSection = z
  .object({
    tasksPerSuite: positiveInt.max(1000000, atMost(1000000)).default(50),
    /** Samples per task for pass@k (k <= samples). */
    samples: positiveInt.max(1024, atMost(1024)).default(1),
    temperature: z.number().min(0).default(0),
  })
  .strict();

/** The copy drill's untilLoss window (default 100 steps) and its most examples (default twice `examples`). */
export function drillLossSteps(drill: { lossSteps?: number }): number {
  return drill.lossSteps ?? 100;
}
export function drillMaxExamples(drill: { examples: number; maxExamples?: number }): number {
  return drill.maxExamples ?? 2 * drill.examples;
}

export const TrainConfigSchema = z
  .object({
    name: z.string().default("run"),
    seed: z.number().int().default(0),
    runsDir: z.string().default("runs"),
    /**
     * The user's modules (TypeScript or JavaScript files, or package names) that register envs when
     * imported: `suites[].env` may then name their ids. A config file's relative paths are resolved from
     * its folder (user-modules.ts imports them in every thread).
     */
    modules: z.array(z.string().min(1, "name a module file (./my-env.ts) or package")).default([]),
    suites: z.array(SuiteEntry).min(1, "list at least one suite"),
    model: ModelSection,
    engine: EngineSection.prefault({}),
    attention: AttentionSection.prefault({}),
    sft: SftSection.prefault({}),
    grpo: GrpoSection.prefault({}),
    rollout: RolloutSection.prefault({}),
    eval: EvalSection.prefault({}),
    /** GRPO's rollouts from policy servers kept in step with the trainer (absent: the engine samples). */
    sampler: SamplerSection.optional(),
    /** Save a checkpoint every N GRPO steps (and at the end of each stage). */
    checkpointEvery: positiveInt.max(1000000, atMost(1000000)).default(5),
    /** Keep the last N checkpoints. */
    keepCheckpoints: positiveInt.max(1000, atMost(1000)).default(2),
  })
  .strict()
  .superRefine((cfg, ctx) => {
    const g = cfg.grpo;
    if (g.enabled && g.groupSize < 2) {
      ctx.addIssue({ code: "custom", path: ["grpo", "groupSize"], message: "group-relative advantages need groupSize >= 2" });
    }
    if (g.estimator === "dr-grpo" && g.aggregation === "sequence") {
      ctx.addIssue({
        code: "custom",
        path: ["grpo", "aggregation"],
        message: 'Dr. GRPO removes the per-sequence length normalization: use aggregation "token" with estimator "dr-grpo"',
      });
    }
    if (cfg.eval.samples > 1 && cfg.eval.temperature === 0) {
      ctx.addIssue({ code: "custom", path: ["eval", "temperature"], message: "pass@k with samples > 1 needs temperature > 0 (greedy samples are identical)" });
    }
    if (cfg.attention.mode !== "full" && cfg.attention.window <= cfg.attention.sinks) {
      ctx.addIssue({ code: "custom", path: ["attention", "window"], message: `the window (${cfg.attention.window}) must be larger than the number of sink slots (${cfg.attention.sinks})` });
    }
    if (cfg.attention.mode !== "profile" && (cfg.attention.profile !== undefined || cfg.attention.reprobeEvery > 0)) {
      ctx.addIssue({ code: "custom", path: ["attention", "mode"], message: 'attention.profile and attention.reprobeEvery apply to mode "profile"; set the mode, or drop them' });
    }
    for (const stage of ["sft", "grpo"] as const) {
      if (cfg[stage].lrSchedule === "constant" && cfg[stage].minLrRatio !== undefined) {
        ctx.addIssue({ code: "custom", path: [stage, "minLrRatio"], message: 'minLrRatio only applies to lrSchedule "cosine"' });
      }
    }
    const drill = cfg.sft.copyDrill;
    if (drill?.untilLoss !== undefined && drillLossSteps(drill) * cfg.sft.batchSize > drill.examples) {
      ctx.addIssue({ code: "custom", path: ["sft", "copyDrill", "lossSteps"], message: `the drill's first ${drill.examples} examples make ${Math.floor(drill.examples / cfg.sft.batchSize)} steps of batchSize ${cfg.sft.batchSize}, fewer than lossSteps (${drillLossSteps(drill)}): lower lossSteps or raise examples` });
    }
    if (cfg.sft.copyDrill && cfg.sft.batchBy !== "prefix") {
      ctx.addIssue({ code: "custom", path: ["sft", "copyDrill"], message: 'needs sft.batchBy "prefix" (the drill\'s batches lead the first epoch, each of drill examples only); set it, or drop copyDrill' });
    }
    cfg.suites.forEach((s, i) => {
      if (s.sftContextLoss === false && !(cfg.sft.contextLossFraction > 0)) {
        ctx.addIssue({ code: "custom", path: ["suites", i, "sftContextLoss"], message: "false only applies with sft.contextLossFraction above 0 (there is no context-loss phase to leave out)" });
      }
      if ((s.sftLead ?? 0) > 0 && cfg.sft.batchBy !== "prefix") {
        ctx.addIssue({ code: "custom", path: ["suites", i, "sftLead"], message: 'needs sft.batchBy "prefix" (the leading batches are each from one suite); set it, or drop sftLead' });
      }
    });
    if (cfg.engine.backend === "embedded") {
      for (const k of ["url", "device", "python", "tokenEnv"] as const) {
        if (cfg.engine[k] !== undefined) ctx.addIssue({ code: "custom", path: ["engine", k], message: 'only applies to engine.backend "torch"; set the backend, or drop it' });
      }
      if (cfg.engine.samplingWeights === "int8" && g.enabled && g.tisCap === 0) {
        ctx.addIssue({ code: "custom", path: ["grpo", "tisCap"], message: 'engine.samplingWeights "int8" samples with other weights than the trainer scores with: truncated importance sampling must correct for it; set grpo.tisCap above 0 (default 2)' });
      }
    } else {
      if ((cfg.engine.samplingWeights ?? "same") !== "same") ctx.addIssue({ code: "custom", path: ["engine", "samplingWeights"], message: 'int8 sampling copies are the embedded engine\'s; the torch worker samples with its own weights: drop engine.samplingWeights with engine.backend "torch"' });
      // LoRA trains through peft in the worker; the weights' dtype is the embedded engine's setting.
      if (cfg.model.dtype !== "fp32") ctx.addIssue({ code: "custom", path: ["model", "dtype"], message: 'holds the embedded engine\'s weights in bf16; the torch worker holds fp32 weights (bf16 autocast on CUDA): drop model.dtype with engine.backend "torch"' });
      // The torch worker runs the embedded engine's mask (sink window, packed documents, pinned positions,
      // sink logits) and evicts as it does; the profile and the sink logit are set up on the embedded
      // engine before the policy goes to the worker (stages/prepare.ts). Re-probing during GRPO reads the
      // policy's attention scores, which only the embedded engine exposes.
      if (cfg.attention.reprobeEvery > 0) {
        ctx.addIssue({ code: "custom", path: ["attention", "reprobeEvery"], message: 're-probing reads the policy\'s attention scores during GRPO, which the torch worker does not expose: set 0 with engine.backend "torch" (the profile measured before training stays), or use the embedded engine' });
      }
      if (cfg.engine.url && (cfg.engine.python || cfg.engine.device || cfg.engine.threads)) {
        ctx.addIssue({ code: "custom", path: ["engine", "url"], message: "python, device and threads choose how a worker is started; with url the worker is already running: drop them" });
      }
    }
    const sampler = cfg.sampler;
    if (sampler) {
      if (sampler.sync === "lora" && !cfg.model.lora) {
        ctx.addIssue({ code: "custom", path: ["sampler", "sync"], message: 'sync "lora" sends the servers the adapter model.lora trains: set model.lora, or use sync "reload" (full weights)' });
      }
      if (sampler.sync === "reload" && cfg.model.lora) {
        ctx.addIssue({ code: "custom", path: ["sampler", "sync"], message: 'with model.lora the trainer saves an adapter, not full weights: use sync "lora" (start the servers on the base checkpoint with LoRA enabled)' });
      }
      if (g.tisCap === 0) {
        ctx.addIssue({ code: "custom", path: ["grpo", "tisCap"], message: "a remote sampler's log-probs differ from the trainer's (other kernels, dtypes): truncated importance sampling must correct for it; set grpo.tisCap above 0 (default 2)" });
      }
    }
    if (!g.enabled && !cfg.sft.enabled) {
      ctx.addIssue({ code: "custom", path: ["grpo", "enabled"], message: "both sft and grpo are disabled: nothing to train" });
    }
  });

export type TrainConfig = z.infer<typeof TrainConfigSchema>;

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** One line per issue: its field path and what is wrong. */
function issueLines(issues: readonly z.core.$ZodIssue[], prefix: (string | number)[] = []): string[] {
  return issues.map((issue) => {
    const at = [...prefix, ...issue.path.map((p) => (typeof p === "symbol" ? String(p) : p))];
    const path = at.length ? at.join(".") : "(top level)";
    let message = issue.message;
    if (issue.code === "invalid_value" && "values" in issue) message = `must be one of ${(issue.values as unknown[]).map((v) => JSON.stringify(v)).join(", ")}`;
    if (issue.code === "unrecognized_keys") message = `unknown field(s) ${issue.keys.map((k) => `"${k}"`).join(", ")}`;
    // (zod leaves the input out of its issues; its own message says "received undefined" for a missing field)
    if (issue.code === "invalid_type" && / received undefined$/.test(issue.message)) message = `missing: this field is required (expected ${issue.expected})`;
    return `  ${path}: ${message}`;
  });
}

/** Validates a parsed config object; errors list every problem with its field path. */
export function validateConfig(raw: unknown, source = "config"): TrainConfig {
  const result = TrainConfigSchema.safeParse(raw);
  if (result.success) return result.data;
  const lines = issueLines(result.error.issues);
  if (raw && typeof raw === "object" && "scale" in raw) lines.push("  scale: a config file's scale section is applied when the file is loaded (loadConfigFile, scaleRecipe); drop it from a config object");
  throw new ConfigError(`${source} is not a valid training config:\n${lines.join("\n")}`);
}

/** The counts a recipe's `scale` section may name: "suites.*.sftEpisodes" is every suite's that sets it. */
export const SCALABLE_COUNTS = ["sft.expertEpisodes", "suites.*.sftEpisodes", "sft.copyDrill.examples"] as const;

/**
 * A recipe's time-scaling rule: the counts it names are those of a run of `baseMinutes` with fp32
 * products; a run of M minutes multiplies them by max(1, M / baseMinutes) (more distinct examples for a
 * longer run, never fewer for a shorter one), and bf16 products by `bf16Factor` as well (the steps
 * bf16's speed buys in the same time), rounded to whole numbers.
 */
export const ScaleSchema = z
  .object({
    baseMinutes: z.number().positive(),
    bf16Factor: z.number().min(1, "must be at least 1: bf16 products are not slower than fp32's").default(1),
    counts: z.array(z.enum(SCALABLE_COUNTS)).min(1, "name at least one count to scale, or drop the scale section"),
    /**
     * For a run planned to a time budget (`sinkflex demo`, planBudgetRun): the most share of the steps
     * that fit each part may take, so that a fixed count never eats them all: the copy drill of SFT's
     * steps, and each stage's warm-up of its own. A part keeps its count where that is within its share.
     */
    shares: z
      .object({
        copyDrill: z.number().gt(0).lt(1, "must be below 1: the suites' episodes need some of SFT's steps"),
        sftWarmup: z.number().gt(0).lt(1, "must be below 1"),
        grpoWarmup: z.number().gt(0).lt(1, "must be below 1"),
      })
      .partial()
      .strict()
      .default({}),
    /** The fewest GRPO steps a planned run gives GRPO before SFT gets its time (default 1). */
    grpoMinSteps: positiveInt.max(1000000, atMost(1000000)).default(1),
    /**
     * The widest 95% interval (its half-width, in points, at a 50% success rate) a planned run's held-out
     * evaluation may shrink to where the suites' evalTasks do not fit (default 5: 385 tasks).
     */
    evalHalfWidthPoints: z.number().gt(0).max(50).default(5),
  })
  .strict();
export type RecipeScale = z.infer<typeof ScaleSchema>;

/** A recipe file's `scale` section, validated (undefined where the file has none). */
export function recipeScale(raw: unknown, source: string): RecipeScale | undefined {
  if (!isRecord(raw) || raw.scale === undefined) return undefined;
  const parsed = ScaleSchema.safeParse(raw.scale);
  if (!parsed.success) throw new ConfigError(`${source} is not a valid training config:\n${issueLines(parsed.error.issues, ["scale"]).join("\n")}`);
  return parsed.data;
}

/** A count scaled for a run of `minutes` (default the base) with `matmul` products. */
export function scaledCount(n: number, scale: RecipeScale, run: { minutes?: number; matmul: MatmulPrecision }): number {
  return Math.round(n * Math.max(1, (run.minutes ?? scale.baseMinutes) / scale.baseMinutes) * (run.matmul === "bf16" ? scale.bf16Factor : 1));
}

const isRecord = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);

/**
 * A parsed config file made ready to validate: `model.matmul` set to `run.matmul` where given, and the
 * file's `scale` section (if any) applied for the run's minutes and matmul, then removed. The counts
 * `scale` names must be set in the file. Without `scale`, minutes change nothing. Not validated yet
 * (`validateConfig` does that).
 */
export function scaleRecipe(raw: unknown, source: string, run: { minutes?: number; matmul?: MatmulPrecision } = {}): unknown {
  if (!isRecord(raw)) return raw;
  const { scale: rawScale, ...rest } = raw;
  const out: Record<string, unknown> = structuredClone(rest);
  if (run.matmul !== undefined && isRecord(out.model)) out.model.matmul = run.matmul;
  if (rawScale === undefined) return out;
  const parsed = ScaleSchema.safeParse(rawScale);
  if (!parsed.success) throw new ConfigError(`${source} is not a valid training config:\n${issueLines(parsed.error.issues, ["scale"]).join("\n")}`);
  if (run.minutes !== undefined && !(run.minutes > 0)) throw new ConfigError(`a run's minutes must be a positive number, got ${run.minutes}`);
  const matmul = (isRecord(out.model) && (out.model.matmul as MatmulPrecision | undefined)) || "fp32";
  const scale = (n: unknown, path: string): number => {
    if (typeof n !== "number" || !Number.isInteger(n)) throw new ConfigError(`${source}: scale.counts names ${path}, which must be a whole number in the file, got ${JSON.stringify(n)}`);
    return scaledCount(n, parsed.data, { minutes: run.minutes, matmul });
  };
  const missing = (path: string) => new ConfigError(`${source}: scale.counts names ${path}, which the file does not set: set it, or drop it from scale.counts`);
  for (const count of new Set(parsed.data.counts)) {
    if (count === "suites.*.sftEpisodes") {
      const suites = Array.isArray(out.suites) ? out.suites.filter(isRecord).filter((s) => s.sftEpisodes !== undefined) : [];
      if (suites.length === 0) throw missing(count);
      for (const s of suites) s.sftEpisodes = scale(s.sftEpisodes, count);
    } else {
      const sft = out.sft;
      const holder = !isRecord(sft) ? undefined : count === "sft.expertEpisodes" ? sft : isRecord(sft.copyDrill) ? sft.copyDrill : undefined;
      const key = count === "sft.expertEpisodes" ? "expertEpisodes" : "examples";
      if (holder?.[key] === undefined) throw missing(count);
      holder[key] = scale(holder[key], count);
    }
  }
  return out;
}

/** A config file's text parsed (YAML, or JSON for .json), not yet scaled or validated. */
export function readConfigFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new ConfigError(`cannot read the config file ${path}: ${(err as Error).message}`);
  }
  try {
    return /\.json$/i.test(path) ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new ConfigError(`${path} is not valid ${/\.json$/i.test(path) ? "JSON" : "YAML"}: ${(err as Error).message}`);
  }
}

/**
 * A config file, validated; its `scale` section (if any) applied for `run` (default: the base minutes
 * and the file's own matmul, so a recipe trains as written).
 */
export function loadConfigFile(path: string, run: { minutes?: number; matmul?: MatmulPrecision } = {}): TrainConfig {
  const cfg = validateConfig(scaleRecipe(readConfigFile(path), path, run), path);
  // The modules as files, so that the run folder's copy of the config finds them from anywhere.
  try {
    return { ...cfg, modules: cfg.modules.map((m) => resolveModule(m, dirname(resolve(path)))) };
  } catch (err) {
    throw new ConfigError(`${path}: modules: ${(err as Error).message}`);
  }
}

/** The paper's reference hyperparameters, for real (>= 0.5B) models; suites and model are the user's. */
export function referenceGrpo(): Partial<TrainConfig["grpo"]> {
  return { lr: 5e-6, batchTasks: 32, groupSize: 8, klCoef: 0.04, epochs: 3 };
}
