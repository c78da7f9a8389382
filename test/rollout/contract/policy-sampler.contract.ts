/**
 * The policy-sampler contract: behaviour every policy the rollout samples from (the embedded engine,
 * an OpenAI-compatible server through `OpenAIPolicy`) must show, written against the `Sampler`
 * interface only. The contract saves one tiny checkpoint (a random Qwen2-shaped model over a trimmed
 * Qwen3 vocabulary, with the real tokenizer files), hands its folder to the factory, and compares the
 * subject with a reference embedded engine loaded from the same folder: greedy tokens must be equal, and
 * sampled log-probs must equal the reference's teacher-forced log-probs within LOGPROB_TOLERANCE.
 * Each implementation's test file calls `policySamplerContract`; this file starts no server.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadEngine, type EmbeddedEngine } from "../../../src/engine/embedded.js";
import type { SampleParams, SampleResult } from "../../../src/engine/types.js";
import { qwen3TokenizerDir } from "../../../src/model/tokenizer.js";
import { Rollout } from "../../../src/rollout/agent-loop.js";
import type { Sampler } from "../../../src/rollout/batch-decoder.js";
import { checkTrajectory } from "../../../src/rollout/trajectory.js";
import { groupTask, stockCodec, template, tinyEngine, tokenizer } from "../helpers.js";

/** Largest difference allowed between a subject's log-prob and the reference's teacher-forced one. */
export const LOGPROB_TOLERANCE = 1e-4;

export interface PolicySubject {
  sampler: Sampler;
  /**
   * The limits the policy enforces, where it has any (a server's largest max_tokens and context).
   * The embedded engine has none: its sink-window attention keeps any length bounded.
   */
  limits?: { maxTokens: number; maxContextTokens: number };
  close(): Promise<void>;
}

const codec = stockCodec();
const PROMPT_TEXT = "<|im_start|>user\nHow many red chairs are left?<|im_end|>\n<|im_start|>assistant\n";

function finiteNonPositive(lps: number[]): void {
  for (const x of lps) {
    expect(Number.isFinite(x), `log-prob ${x}`).toBe(true);
    expect(x).toBeLessThanOrEqual(0);
  }
}

/** Registers the contract's tests for one policy; `make` gets the checkpoint folder. */
export function policySamplerContract(label: string, make: (checkpoint: string) => Promise<PolicySubject>): void {
  describe(`policy-sampler contract: ${label}`, () => {
    let dir: string;
    let subject: PolicySubject;
    let reference: EmbeddedEngine;
    const prompt = codec.encode(PROMPT_TEXT);
    const eos = codec.tokenId(tokenizer.eosToken!);

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), "sinkflex-policy-contract-"));
      const engine = tinyEngine(codec, 5);
      engine.tokenizerDir = qwen3TokenizerDir();
      await engine.save(dir);
      engine.dispose();
      codec.vocab!.save(dir);
      reference = loadEngine(dir);
      subject = await make(dir);
    });

    afterAll(async () => {
      await subject?.close();
      reference?.dispose();
      rmSync(dir, { recursive: true, force: true });
    });

    const sampleOnce = async (sampler: Sampler, ids: number[], params: SampleParams): Promise<SampleResult> => {
      const s = await sampler.session(ids);
      try {
        return await s.sample(params);
      } finally {
        s.close();
      }
    };

    /** The reference's teacher-forced log-probs of `tokens` after `ids`. */
    const teacher = async (ids: number[], tokens: number[]): Promise<number[]> => {
      const [lp] = await reference.logprobs([[...ids, ...tokens]]);
      return tokens.map((_, i) => lp![ids.length - 1 + i]!);
    };

    it("has the sampler interface: sessions hold, grow, fork and truncate their tokens; a batch answers each session", async () => {
      const { sampler } = subject;
      expect(typeof sampler.policyVersion).toBe("number");
      const s = await sampler.session(prompt);
      expect(s.length).toBe(prompt.length);
      expect(s.tokens()).toEqual(prompt);
      await s.append([eos]);
      expect(s.tokens()).toEqual([...prompt, eos]);
      const child = s.fork();
      s.truncate(prompt.length);
      expect(s.tokens()).toEqual(prompt);
      expect(child.tokens()).toEqual([...prompt, eos]);
      const r = await s.sample({ maxTokens: 3, temperature: 0 });
      expect(s.tokens()).toEqual([...prompt, ...r.tokens]);
      expect(child.length).toBe(prompt.length + 1);
      child.close();
      s.close();
      s.close(); // twice is safe
      const a = await sampler.session(prompt);
      const b = await sampler.session(codec.encode("<|im_start|>user\nIs the blue lamp in stock?<|im_end|>\n<|im_start|>assistant\n"));
      const results = await sampler.sampleBatch([a, b], [{ maxTokens: 2, temperature: 0 }, { maxTokens: 4, temperature: 0 }]);
      expect(results.map((x) => x.tokens.length)).toEqual([2, 4]);
      a.close();
      b.close();
    });

    it("greedy sampling gives the reference engine's tokens, with finite log-probs <= 0", async () => {
      const params = { maxTokens: 12, temperature: 0 };
      const got = await sampleOnce(subject.sampler, prompt, params);
      const want = await sampleOnce(reference, prompt, params);
      expect(got.tokens).toEqual(want.tokens);
      expect(got.logprobs).toHaveLength(got.tokens.length);
      finiteNonPositive(got.logprobs);
    });

    it(`seeded sampling at temperature 1 gives the reference's tokens; log-probs match teacher forcing within ${LOGPROB_TOLERANCE}`, async () => {
      for (const seed of [3, 11]) {
        const params = { maxTokens: 10, temperature: 1, seed };
        const got = await sampleOnce(subject.sampler, prompt, params);
        expect(got.tokens).toEqual((await sampleOnce(reference, prompt, params)).tokens);
        finiteNonPositive(got.logprobs);
        const tf = await teacher(prompt, got.tokens);
        got.logprobs.forEach((lp, i) => expect(Math.abs(lp - tf[i]!), `token ${i}`).toBeLessThan(LOGPROB_TOLERANCE));
      }
    });

    it("holds the max-token limit, and stops at (and keeps) the first stop token asked for, and only those", async () => {
      const free = await sampleOnce(subject.sampler, prompt, { maxTokens: 8, temperature: 0 });
      expect(free.tokens).toHaveLength(8);
      expect(free.finishReason).toBe("length");
      const k = 4;
      const stop = free.tokens[k]!;
      const first = free.tokens.indexOf(stop);
      const stopped = await sampleOnce(subject.sampler, prompt, { maxTokens: 8, temperature: 0, stopTokens: [stop] });
      expect(stopped.tokens).toEqual(free.tokens.slice(0, first + 1));
      expect(stopped.finishReason).toBe("stop");
      // Without stop tokens the end-of-turn token is a token like any other, and the sample runs on to the
      // limit. The subject is searched for a seeded sample that has it before the end: a policy that stops
      // at it anyway has none.
      let found: SampleResult | undefined;
      for (let seed = 0; seed < 200 && !found; seed++) {
        const r = await sampleOnce(subject.sampler, prompt, { maxTokens: 32, temperature: 2, seed });
        expect(r.tokens.length <= 32).toBe(true);
        const at = r.tokens.indexOf(eos);
        if (at >= 0 && at < r.tokens.length - 1) found = r;
      }
      expect(found, "a sample with the end-of-turn token before its end").toBeDefined();
      expect(found!.tokens).toHaveLength(32);
      expect(found!.finishReason).toBe("length");
    });

    it("a budget of 0 tokens samples nothing; a bad budget, a bad token id or an overflowing context is a clear error", async () => {
      const none = await sampleOnce(subject.sampler, prompt, { maxTokens: 0 });
      expect(none).toEqual({ tokens: [], logprobs: [], finishReason: "length" });
      await expect(sampleOnce(subject.sampler, prompt, { maxTokens: -1 })).rejects.toThrow(/max_?tokens/i);
      await expect(sampleOnce(subject.sampler, prompt, { maxTokens: 1.5 })).rejects.toThrow(/max_?tokens/i);
      await expect(sampleOnce(subject.sampler, [...prompt, codec.size + 7], { maxTokens: 1 })).rejects.toThrow(/outside the vocabulary|token ids must be in \[0, \d+\]/);
      const limits = subject.limits;
      if (limits) {
        await expect(sampleOnce(subject.sampler, prompt, { maxTokens: limits.maxTokens + 1 })).rejects.toThrow(/max_tokens must be an integer in \[1, \d+\]/);
        const long = Array.from({ length: limits.maxContextTokens - 2 }, (_, i) => prompt[i % prompt.length]!);
        await expect(sampleOnce(subject.sampler, long, { maxTokens: 3 })).rejects.toThrow(/context limit of \d+; shorten the prompt or lower max_tokens/);
        // Within the limit the same prompt samples.
        expect((await sampleOnce(subject.sampler, long, { maxTokens: 2, temperature: 0 })).tokens).toHaveLength(2);
      }
    });

    it("plays a short episode of a tool env through the agent loop, as the reference does", async () => {
      const options = { maxTokensPerTurn: 5, turnLimit: "close" as const, maxTurns: 3, seed: 4, maxContextTokens: subject.limits?.maxContextTokens ?? 8192 };
      const play = async (sampler: Sampler) => {
        const rollout = new Rollout(sampler, codec, template, options);
        try {
          return await rollout.runGroup(groupTask(1, 1, 2));
        } finally {
          await rollout.close();
        }
      };
      const [t] = await play(subject.sampler);
      const [want] = await play(reference);
      expect(t!.error).toBeUndefined();
      expect(t!.endReason).toBe("terminated");
      checkTrajectory(t!);
      expect(t!.turns.length).toBeGreaterThanOrEqual(2);
      const seg = t!.segments[0]!;
      expect(seg.tokens).toEqual(want!.segments[0]!.tokens);
      const [tf] = await reference.logprobs([seg.tokens]);
      for (let i = 1; i < seg.tokens.length; i++) {
        if (!seg.lossMask[i]) continue;
        expect(Number.isFinite(seg.behaviourLogprobs[i]!)).toBe(true);
        expect(Math.abs(seg.behaviourLogprobs[i]! - tf![i - 1]!), `token ${i}`).toBeLessThan(LOGPROB_TOLERANCE);
      }
    });
  });
}
