/**
 * The engine contract: behaviour every implementation of the engine primitives (src/engine/types.ts)
 * must show, written against the interface only. Each engine's test file calls `engineContract` with a
 * factory; the embedded engine runs it on every kernel set (contract.test.ts).
 */
import { describe, expect, it } from "vitest";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Engine, TokenLoss } from "../../src/engine/types.js";

export interface ContractSubject {
  engine: Engine;
  /** Token ids 0..vocabSize-1 are valid. */
  vocabSize: number;
}

const meanNll: TokenLoss = (lps) => {
  const n = lps.reduce((a, l) => a + l.length, 0);
  let loss = 0;
  for (const l of lps) for (const x of l) loss -= x;
  return { loss: loss / n, dLogprobs: lps.map((l) => new Float32Array(l.length).fill(-1 / n)) };
};

function tokens(seed: number, n: number, V: number): number[] {
  let x = seed * 7919 + 17;
  return Array.from({ length: n }, () => {
    x = (Math.imul(x, 48271) + 11) >>> 0;
    return (x >>> 7) % V;
  });
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

export function engineContract(label: string, make: () => Promise<ContractSubject>): void {
  describe(`engine contract: ${label}`, () => {
    it("sessions hold their tokens; append grows them; close ends them", async () => {
      const { engine, vocabSize: V } = await make();
      const p = tokens(1, 5, V);
      const s = await engine.session(p);
      expect(s.length).toBe(5);
      expect(s.tokens()).toEqual(p);
      await s.append([1, 2]);
      expect(s.tokens()).toEqual([...p, 1, 2]);
      s.close();
      s.close(); // twice is safe
      await expect(s.append([1])).rejects.toThrow();
      engine.dispose();
    });

    it("seeded sampling repeats; the tokens join the session; log-probs match teacher forcing at temperature 1", async () => {
      const { engine, vocabSize: V } = await make();
      const p = tokens(2, 6, V);
      const a = await (await engine.session(p)).sample({ maxTokens: 12, seed: 7 });
      const sb = await engine.session(p);
      const b = await sb.sample({ maxTokens: 12, seed: 7 });
      expect(b.tokens).toEqual(a.tokens);
      expect(b.tokens.length).toBe(12);
      expect(b.logprobs.length).toBe(12);
      expect(b.finishReason).toBe("length");
      expect(sb.tokens()).toEqual([...p, ...b.tokens]);
      expect(b.logprobs.every((x) => x <= 0 && Number.isFinite(x))).toBe(true);
      const [lp] = await engine.logprobs([sb.tokens()]);
      expect(lp!.length).toBe(sb.length - 1);
      expect(maxDiff(lp!.subarray(p.length - 1), b.logprobs)).toBeLessThan(1e-4);
      const g1 = await (await engine.session(p)).sample({ maxTokens: 6, temperature: 0 });
      const g2 = await (await engine.session(p)).sample({ maxTokens: 6, temperature: 0, seed: 99 });
      expect(g2.tokens).toEqual(g1.tokens);
      engine.dispose();
    });

    it("forks share the prefix and grow independently; truncate rewinds", async () => {
      const { engine, vocabSize: V } = await make();
      const p = tokens(3, 9, V);
      const parent = await engine.session(p);
      const kids = [parent.fork(), parent.fork(), parent.fork()];
      const outs = await engine.sampleBatch(kids, kids.map((_, i) => ({ maxTokens: 8, seed: i })));
      expect(parent.tokens()).toEqual(p);
      kids.forEach((k, i) => expect(k.tokens()).toEqual([...p, ...outs[i]!.tokens]));
      const alone = await (await engine.session(p)).sample({ maxTokens: 8, seed: 1 });
      expect(outs[1]!.tokens).toEqual(alone.tokens);
      kids[0]!.truncate(p.length);
      const again = await kids[0]!.sample({ maxTokens: 8, seed: 0 });
      expect(again.tokens).toEqual(outs[0]!.tokens);
      kids[2]!.truncate(4);
      expect(kids[2]!.tokens()).toEqual(p.slice(0, 4));
      engine.dispose();
    });

    it("sampleBatch gives each session what it would get alone; stop tokens and maxTokens end requests", async () => {
      const { engine, vocabSize: V } = await make();
      const prompts = [tokens(4, 3, V), tokens(5, 10, V), tokens(6, 7, V)];
      const params = prompts.map((_, i) => ({ maxTokens: 9, seed: 10 + i, temperature: 0.9, topK: 20, topP: 0.9 }));
      const batch = await engine.sampleBatch(await Promise.all(prompts.map((q) => engine.session(q))), params);
      for (let i = 0; i < prompts.length; i++) {
        const solo = await (await engine.session(prompts[i]!)).sample(params[i]!);
        expect(batch[i]!.tokens).toEqual(solo.tokens);
        expect(maxDiff(batch[i]!.logprobs, solo.logprobs)).toBeLessThan(1e-5);
      }
      const greedy = await (await engine.session(prompts[0]!)).sample({ maxTokens: 6, temperature: 0 });
      const stopAt = greedy.tokens[3]!;
      const stopped = await (await engine.session(prompts[0]!)).sample({ maxTokens: 6, temperature: 0, stopTokens: [stopAt] });
      expect(stopped.finishReason).toBe("stop");
      expect(stopped.tokens).toEqual(greedy.tokens.slice(0, greedy.tokens.indexOf(stopAt) + 1));
      const none = await (await engine.session(prompts[0]!)).sample({ maxTokens: 0 });
      expect(none.tokens).toEqual([]);
      engine.dispose();
    });

    it("forwardBackward + optimStep lower the loss and bump the policy version; save writes a checkpoint folder", async () => {
      const { engine, vocabSize: V } = await make();
      const seqs = [tokens(7, 16, V), tokens(8, 11, V)];
      const v0 = engine.policyVersion;
      const first = await engine.forwardBackward(seqs, meanNll);
      const { gradNorm } = await engine.optimStep({ lr: 1e-2, maxGradNorm: 1 });
      expect(gradNorm).toBeGreaterThan(0);
      expect(engine.policyVersion).toBe(v0 + 1);
      let last = first.loss;
      for (let i = 0; i < 4; i++) {
        last = (await engine.forwardBackward(seqs, meanNll)).loss;
        await engine.optimStep({ lr: 1e-2, maxGradNorm: 1 });
      }
      expect(last).toBeLessThan(first.loss);
      await expect(engine.forwardBackward(seqs, () => ({ loss: 0, dLogprobs: [] }))).rejects.toThrow();
      const dir = join(mkdtempSync(join(tmpdir(), "sinkflex-contract-")), "ckpt");
      await engine.save(dir);
      expect(existsSync(join(dir, "config.json"))).toBe(true);
      engine.dispose();
    });
  });
}
