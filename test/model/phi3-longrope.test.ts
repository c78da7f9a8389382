// Phi-3's longrope past original_max_position_embeddings against transformers, on a tiny Phi-3.5-shaped
// model whose original length is 64 (fixture family-phi3-longrope, scripts/make-fixtures.py):
// - a whole 100-token sequence takes the long factors at every position: logits, loss and every gradient
//   match transformers (the fixture's full check runs in families.test.ts; here the table rows themselves);
// - in a packed batch each sequence picks its own factors (a 40-token one keeps the short ones);
// - a cached session growing from a 60-token prompt past 64 tokens gives transformers' generate logits at
//   every step: short factors up to 64 tokens, then the whole cache recomputed with the long factors;
//   prefilled in pieces (maxForwardTokens) or forked, it stays exact.
import { describe, expect, it } from "vitest";
import { join } from "node:path";
import { loadCheckpoint } from "../../src/model/checkpoint.js";
import { buildModel } from "../../src/model/instance.js";
import { RopeTable } from "../../src/model/rope.js";
import { readSafetensors } from "../../src/model/safetensors.js";
import { packSequences, trainForward, TrainWorkspace } from "../../src/model/transformer.js";
import { EmbeddedEngine } from "../../src/engine/embedded.js";
import { FIXTURES, kernelSets, loadFixture } from "./fixtures.js";

const kernels = await kernelSets();
const NAME = "family-phi3-longrope";
const O = 64; // the fixture's original_max_position_embeddings

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

function generateFixture() {
  const g = readSafetensors(join(FIXTURES, NAME, "generate.safetensors"));
  const ids = (n: string) => Array.from(g.get(n)!.data, (x) => Math.round(x));
  const logits = g.get("logits")!;
  return { prompt: ids("prompt"), tokens: ids("tokens"), logits: logits.data, V: logits.shape[1]! };
}

describe("longrope tables", () => {
  it("rows 0..O-1 hold the short factors' positions, rows O.. the long factors' (the same attention factor)", () => {
    const ck = loadCheckpoint(join(FIXTURES, NAME, "checkpoint"));
    const rs = ck.cfg.ropeScaling;
    expect(rs.type === "longrope" && rs.originalMaxPositionEmbeddings).toBe(O);
    const t = new RopeTable(ck.cfg);
    expect(t.rowOffset(O)).toBe(0);
    expect(t.rowOffset(O + 1)).toBe(O);
    const pos = Int32Array.from({ length: 100 }, (_, i) => i);
    const rows = t.rowsOf(pos, [0, 100]);
    expect(rows[0]).toBe(O);
    expect(rows[99]).toBe(O + 99);
    const half = ck.cfg.headDim / 2;
    const af = rs.type === "longrope" ? rs.attentionFactor : 0;
    // position 1, frequency i: cos(1 / (factor_i * theta^(2i/D))) * attention factor, as transformers computes it
    for (let i = 0; i < half; i++) {
      for (const [row, factors] of [[1, rs.type === "longrope" ? rs.shortFactor : []], [O + 1, rs.type === "longrope" ? rs.longFactor : []]] as const) {
        const inv = Math.fround(1 / (factors[i]! * 10000 ** ((2 * i) / ck.cfg.headDim)));
        expect(t.cos[row * half + i]).toBeCloseTo(Math.cos(inv) * af, 6);
      }
    }
  });
});

describe.each(kernels.map((k) => [k.name, k] as const))("longrope past the original length vs transformers on %s kernels", (_n, k) => {
  it("packed with a short sequence, the 100-token sequence keeps transformers' logits and the short one its own", () => {
    const fx = loadFixture(NAME);
    const ck = loadCheckpoint(fx.checkpoint);
    const model = buildModel(ck, k);
    const V = ck.cfg.vocabSize;
    const long = fx.inputIds[0]!;
    expect(long.length).toBe(100);
    const short = long.slice(0, 40);
    const ws = new TrainWorkspace(ck.cfg);
    trainForward(model, ws, packSequences([short]), false);
    const alone = ws.logits.slice(0, 40 * V);
    trainForward(model, ws, packSequences([long, short]), false);
    expect(maxAbsDiff(ws.logits.subarray(0, 100 * V), fx.expected.get("logits")!.data)).toBeLessThan(1e-4);
    expect(maxAbsDiff(ws.logits.subarray(100 * V, 140 * V), alone)).toBeLessThan(1e-5);
    // and the 100-token sequence's first 40 logits are not the short sequence's: its factors differ
    expect(maxAbsDiff(ws.logits.subarray(0, 40 * V), alone)).toBeGreaterThan(1e-3);
  });

  it.each([
    ["one forward per call", {}],
    ["prefill in 16-token pieces", { maxForwardTokens: 16 }],
  ] as const)("a cached session growing past 64 tokens gives transformers' generate logits at every step (%s)", (_m, opts) => {
    const g = generateFixture();
    const ck = loadCheckpoint(join(FIXTURES, NAME, "checkpoint"));
    const engine = new EmbeddedEngine(ck, { kernels: k, ...opts });
    try {
      const s = engine.sessionSync(g.prompt);
      let fork: ReturnType<typeof s.fork> | null = null;
      for (let i = 0; i < g.tokens.length; i++) {
        const want = g.logits.subarray(i * g.V, (i + 1) * g.V);
        expect(maxAbsDiff(s.nextLogits(), want), `step ${i} (${g.prompt.length + i} tokens)`).toBeLessThan(1e-4);
        if (fork) expect(maxAbsDiff(fork.nextLogits(), want), `fork, step ${i}`).toBeLessThan(1e-4);
        s.appendSync([g.tokens[i]!]);
        fork?.appendSync([g.tokens[i]!]);
        if (g.prompt.length + i + 1 === O - 2) fork = s.fork(); // a fork made with short-factor keys crosses too
      }
      fork?.close();
      s.close();
    } finally {
      engine.dispose();
    }
  });
});
