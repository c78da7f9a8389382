/**
 * Stage 1, prepare: the data and the starting policy. Plans the suites (training / held-out tasks),
 * plays the experts' episodes into SFT conversations (plus imported chat JSONL), and builds the policy:
 * from the run's latest checkpoint when it continues, from `model.checkpoint`, or a fresh model over
 * the data's vocabulary, on the configured engine (`engine.backend`: a fresh model is made by the
 * embedded engine and handed to a torch worker through the folder "initial-model" of the run). Then tokenizes the conversations into SFT examples (with the copy drill's).
 *
 * It trains nothing. Its output on disk is the checkpoint "sft-00000" (the policy SFT starts from);
 * its output in memory is handed to the SFT stage, which rebuilds it when run on its own.
 */
import { COPY_DRILL_SOURCE, copyDrillExamples } from "../../recipes/index.js";
import type { LeadExtension, SftExample } from "../../rl/index.js";
import { setMatmulPrecision } from "../../kernels/index.js";
import { drillLossSteps, drillMaxExamples, type EngineConfig } from "../config.js";
import { join } from "node:path";
import { createLoraAdapter, EmbeddedEngine } from "../../engine/index.js";
import { createPolicy, onBackend, openPolicy, type Policy } from "../policy.js";
import type { PrepPool } from "../prep-pool.js";
import { Progress } from "../progress.js";
import { readSftData, type Conversation } from "../sft-data.js";
import { expertEpisodeCount, noSftDataError, planSuites, type SuitePlan } from "../tasks.js";
import { suiteRubric } from "../suite-reward.js";
import { setUpAttention } from "./attention-profile.js";
import { attentionOf, initialState, loadMaskOf, saveCheckpoint, type RunContext, type TrainerState } from "./context.js";

/** At most this many conversations are read to build a new model's trimmed vocabulary. */
const VOCAB_SAMPLE = 6000;

/** The suites and the SFT conversations, each with its source and whether the context-loss phase covers it. */
export interface RunData {
  plans: SuitePlan[];
  rubrics: Map<string, ReturnType<typeof suiteRubric>>;
  conversations: Conversation[];
  /** Each conversation's source (its suite's name, or the data file as the config names it), for the SFT loss per source. */
  sources: string[];
  /** Whether the context-loss phase covers it (a suite can opt out with sftContextLoss: false). */
  contextLoss: boolean[];
}

/** The policy and the trainer's state the run goes on with. */
export interface Start {
  policy: Policy;
  state: TrainerState;
  /** The checkpoint it was loaded from, when the run continues one. */
  from?: string;
}

/**
 * Plans the suites and plays the expert episodes (on the prep pool's worker threads); `episodes: false`
 * plans the suites only (what GRPO and the evaluations need).
 */
export async function prepareData(ctx: RunContext, prep: PrepPool, what: { episodes: boolean } = { episodes: true }): Promise<RunData> {
  const { cfg } = ctx;
  const plans = await planSuites(cfg, { contents: prep.taskContents });
  const rubrics = new Map(plans.map((p) => [p.name, suiteRubric(p.reward)]));
  ctx.log(`suites: ${plans.map((p) => `${p.name} (${p.trainTasks.length} train${p.rlTasks ? ` + ${p.rlTasks.length} GRPO-only` : ""} / ${p.evalTasks.length} eval tasks)`).join(", ")}`);

  const data: RunData = { plans, rubrics, conversations: [], sources: [], contextLoss: [] };
  const add = (c: Conversation, source: string, inContextLoss = true) => {
    data.conversations.push(c);
    data.sources.push(source);
    data.contextLoss.push(inContextLoss);
  };
  if (what.episodes && (cfg.sft.enabled || cfg.model.init)) {
    const progress = new Progress("expert episodes", plans.reduce((n, p) => n + expertEpisodeCount(p, cfg.sft.expertEpisodes), 0), "eps", ctx.options.quiet);
    const perSuite = await prep.expertConversations(plans, cfg.sft.expertEpisodes, cfg.seed, (n) => progress.tick(n));
    perSuite.forEach(({ kept, failed }, i) => {
      if (failed > 0) ctx.log(`  ${plans[i]!.name}: the expert failed ${failed} of ${kept.length + failed} episodes (left out of the SFT data)`);
      for (const c of kept) add(c, plans[i]!.name, cfg.suites[i]!.sftContextLoss ?? true);
    });
    progress.finish();
    // Demonstrations, checked against the suites' envs (problems are errors naming file and line).
    for (const { file, conversations } of await readSftData(cfg.sft.data, plans, (m) => process.stderr.write(`warning: ${m}\n`))) {
      for (const c of conversations) add(c, file);
    }
    if (cfg.sft.enabled && data.conversations.length === 0) throw noSftDataError(plans);
  }
  return data;
}

const EMBEDDED: EngineConfig = { backend: "embedded", threads: 0 };

/**
 * The policy: resumed from `resumed` (a checkpoint and its state), loaded from `model.checkpoint`, or a
 * fresh model over the data's vocabulary. Sets the process's matrix precision first.
 */
export async function preparePolicy(ctx: RunContext, data: RunData, resumed: { dir: string; state: TrainerState } | undefined): Promise<Start> {
  const { cfg } = ctx;
  // Matrix products in bf16 where the config asks and the CPU has a bf16 unit (AMX or AVX512-BF16); a
  // process-wide setting, so it is set (to fp32 as well) at every start.
  const matmul = setMatmulPrecision(cfg.model.matmul);
  if (matmul !== cfg.model.matmul) ctx.log(`model.matmul is "${cfg.model.matmul}", but this CPU (or OS) has no bf16 unit for it (AMX or AVX512-BF16): matrix products stay ${matmul}`);
  let start: Start;
  // On the torch backend a new run sets its attention up (the profile, the sink logit) on the embedded
  // engine, which measures the policy, and then hands the policy to the worker; a resumed run's checkpoint has it.
  const setUpFirst = !resumed && cfg.engine.backend !== "embedded" && (cfg.attention.mode === "profile" || cfg.attention.sinkLogit);
  if (resumed) {
    start = { policy: await openPolicy(resumed.dir, cfg.engine, loadMaskOf(ctx)), state: resumed.state, from: resumed.dir };
    ctx.log(`resuming from ${resumed.dir} (${resumed.state.stage} step ${resumed.state.step})`);
  } else if (cfg.model.checkpoint) {
    start = { policy: await openPolicy(cfg.model.checkpoint, setUpFirst ? EMBEDDED : cfg.engine, loadMaskOf(ctx)), state: initialState() };
    const { lora } = cfg.model;
    // A LoRA run trains a fresh adapter (B = 0: the policy starts as the checkpoint); its checkpoints are adapter folders.
    const engine = start.policy.engine;
    if (lora && engine instanceof EmbeddedEngine) {
      engine.enableLora(createLoraAdapter(engine.config, { ...lora, alpha: lora.alpha ?? lora.rank }, cfg.seed));
      ctx.log(`LoRA: rank ${lora.rank}, alpha ${lora.alpha ?? lora.rank} on ${lora.targets.join(", ")}: ${(engine.lora!.data.length / 1e6).toFixed(3)}M trainable parameters`);
    } else if (lora && !(engine instanceof EmbeddedEngine)) {
      // On the torch worker peft adds the adapter (its own initialization; B = 0 all the same).
      await engine.enableLora({ rank: lora.rank, alpha: lora.alpha ?? lora.rank, targets: lora.targets });
      ctx.log(`LoRA: rank ${lora.rank}, alpha ${lora.alpha ?? lora.rank} on ${lora.targets.join(", ")}: ${(engine.lora!.trainable / 1e6).toFixed(3)}M trainable parameters (peft, in the torch worker)`);
    }
  } else {
    // The vocabulary is read off an even sample of the conversations (ids the sample lacks are spelled
    // with smaller pieces, down to bytes): rendering all of them would cost as much again as the SFT data.
    const step = Math.max(1, Math.ceil(data.conversations.length / VOCAB_SAMPLE));
    const fresh = createPolicy(cfg.model.init!, data.conversations.filter((_, i) => i % step === 0), cfg.seed, attentionOf(cfg));
    start = { policy: setUpFirst ? fresh : await onBackend(fresh, cfg.engine, join(ctx.run.path, "initial-model")), state: initialState() };
  }
  // attention.mode profile / attention.sinkLogit: the policy's own sinks and sink logit (attention-profile.ts).
  setUpAttention(ctx, data, start, resumed?.dir ?? cfg.model.checkpoint);
  if (setUpFirst) start.policy = await onBackend(start.policy, cfg.engine, join(ctx.run.path, "initial-model"));
  const { engine } = start.policy;
  if (cfg.engine.samplingWeights === "int8" && engine instanceof EmbeddedEngine) {
    engine.useSamplingWeights("int8");
    ctx.log("sampling from int8 copies of the weights (engine.samplingWeights), re-made after every step; training and scoring use the weights");
  }
  const params = engine instanceof EmbeddedEngine ? (engine.weights.data16 ?? engine.weights.data).length : engine.parameters;
  const runsOn = engine instanceof EmbeddedEngine
    ? `kernels ${engine.kernels.describe()}`
    : `torch worker pid ${engine.workerPid} (${engine.architecture}, torch ${engine.info.torch}, ${engine.info.device})`;
  ctx.log(`policy: ${engine instanceof EmbeddedEngine ? engine.config.arch : engine.architecture}, ${(params / 1e6).toFixed(2)}M parameters, vocabulary ${start.policy.codec.size}, ${runsOn}`);
  if (!resumed) ctx.metrics({ stage: "setup", step: 0, parameters: params, vocabulary: start.policy.codec.size, sftConversations: data.conversations.length });
  return start;
}

/** The SFT examples (drifted ones left out, the copy drill's added) and the drill's extension, if any. */
export interface SftData {
  examples: SftExample[];
  extendDrill?: LeadExtension;
}

/**
 * Tokenizes the conversations with the policy's codec (on the prep pool) into SFT examples, and adds
 * the copy drill's. The drill's loss history lives in `state` (created here when the drill can extend).
 */
export async function sftExamples(ctx: RunContext, prep: PrepPool, data: RunData, start: Start): Promise<SftData> {
  const { cfg } = ctx;
  const examples: SftExample[] = (await prep.examples(start.policy, data.conversations))
    .map((e, i) => ({ ...e, source: data.sources[i], ...(data.contextLoss[i] ? {} : { contextLoss: false }) }))
    .filter((e) => !e.drifted);
  const drillCfg = cfg.sft.enabled ? cfg.sft.copyDrill : undefined;
  if (!drillCfg) return { examples };
  // With untilLoss, the examples past `examples` are the drill's extension (the first `examples` are
  // the same either way: the drill draws its examples in turn from one seeded stream).
  const all = copyDrillExamples(examples, { ...drillCfg, examples: drillCfg.untilLoss === undefined ? drillCfg.examples : drillMaxExamples(drillCfg) }, cfg.seed);
  examples.push(...all.slice(0, drillCfg.examples));
  const steps = (n: number) => Math.ceil(n / cfg.sft.batchSize);
  ctx.log(`copy drill: ${drillCfg.examples} examples of spans from the SFT data, each written twice${drillCfg.recall ? ` (the second time in a shuffled order in ${Math.round(100 * drillCfg.recall)}% of them)` : ""}; ${steps(drillCfg.examples)} steps, leading the first epoch` +
    (drillCfg.untilLoss === undefined ? "" : `, and up to ${steps(all.length - drillCfg.examples)} more steps while its loss over its last ${drillLossSteps(drillCfg)} steps is ${drillCfg.untilLoss} or more`));
  if (drillCfg.untilLoss === undefined) return { examples };
  const drill = (start.state.drill ??= { losses: [], extended: 0 });
  return {
    examples,
    extendDrill: {
      source: COPY_DRILL_SOURCE,
      examples: all.slice(drillCfg.examples),
      meanLoss: drillCfg.untilLoss,
      window: drillLossSteps(drillCfg),
      pastLosses: drill.losses.slice(),
      onEnd: ({ meanLoss, batches, ranOut }) =>
        ctx.log(`copy drill: loss ${meanLoss.toFixed(4)} over its last ${drillLossSteps(drillCfg)} steps after ${batches} more steps` +
          (ranOut ? ` (its maxExamples, ${all.length}; still at or above ${drillCfg.untilLoss})` : ` (below ${drillCfg.untilLoss})`)),
    },
  };
}

/** The prepare stage's checkpoint: the policy SFT starts from (written once, by a run that starts fresh). */
export async function savePrepared(ctx: RunContext, start: Start): Promise<void> {
  if (!start.from) await saveCheckpoint(ctx, start.policy, start.state);
}
