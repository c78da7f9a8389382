/**
 * A one-turn env for pipeline tests: its reward depends on what the model writes (an even-length
 * answer scores 1), so a random model gets mixed rewards within a group and GRPO has a learning signal.
 */
import { z } from "zod";
import { registerSuite } from "../../src/envs/suite.js";
import { register, registeredIds } from "../../src/gym/registry.js";
import { validateConfig } from "../../src/pipeline/config.js";
import { arrayTasks, ToolEnv } from "../../src/tools/tool-env.js";
import { functionTool } from "../../src/tools/tool.js";

export const PARITY_ENV_ID = "test/parity-v0";
const QUESTIONS = Array.from({ length: 30 }, (_, i) => `Say something about item ${i}.`);

export function registerParityEnv(): void {
  if (registeredIds().includes(PARITY_ENV_ID)) return;
  register(
    PARITY_ENV_ID,
    () =>
      new ToolEnv<string, null>({
        name: "ParityEnv",
        tasks: arrayTasks(QUESTIONS),
        tools: [functionTool({ name: "note", description: "Writes a note.", parameters: z.object({ text: z.string() }), execute: () => "noted" })],
        open: async (q) => ({ state: null, messages: [{ role: "system", content: "Answer briefly." }, { role: "user", content: q }] }),
        score: async (ep) => {
          const last = ep.messages.filter((m) => m.role === "assistant").pop();
          return { reward: (last?.content.length ?? 1) % 2 === 0 ? 1 : 0, evidence: { length: last?.content.length } };
        },
        // Progress for reward rubrics: 1 when solved, else grows with the answer's length.
        progress: (ep) => {
          const last = ep.messages.filter((m) => m.role === "assistant").pop();
          if (!last) return 0;
          return last.content.length % 2 === 0 ? 1 : Math.min(0.9, last.content.length / 40);
        },
      }),
    { suite: "parity", description: "test env", taskCount: QUESTIONS.length, maxEpisodeSteps: 4 },
  );
  registerSuite({
    name: "parity",
    envIds: [PARITY_ENV_ID],
    createExpert: () => ({ act: () => ({ content: "ok", toolCalls: [] }) }),
  });
}

/** A tiny model and a few GRPO steps over the parity env. */
export function parityConfig(runsDir: string, name: string, seed = 3) {
  return validateConfig({
    name,
    runsDir,
    seed,
    suites: [{ env: PARITY_ENV_ID }],
    model: { init: { hiddenSize: 32, layers: 1, heads: 2, kvHeads: 1, intermediateSize: 64, maxPositions: 1024 } },
    sft: { expertEpisodes: 8, epochs: 1, batchSize: 4, lr: 1e-3, lrSchedule: "cosine", warmupSteps: 1, contextLossFraction: 0.5 },
    grpo: { steps: 3, batchTasks: 2, groupSize: 4, lr: 1e-2, warmupSteps: 2, epochs: 2, klCoef: 0.04, maxTurns: 2, maxTokensPerTurn: 12, maxContextTokens: 512, concurrency: 8 },
    eval: { tasksPerSuite: 4 },
    checkpointEvery: 1,
    keepCheckpoints: 2,
  });
}
