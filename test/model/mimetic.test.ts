/**
 * Mimetic attention init: the query-key and value-output products of every head start near the
 * multiples of a projection it promises, the rest of the model as the plain random init has it.
 */
import { describe, expect, it } from "vitest";
import type { ModelConfig } from "../../src/model/config.js";
import { randomWeights } from "../../src/model/instance.js";
import { applyMimeticAttention } from "../../src/model/mimetic.js";
import { bindParams, type LayerParams } from "../../src/model/params.js";
import { Rng } from "../../src/core/index.js";
import { validateConfig } from "../../src/pipeline/config.js";

const cfg: ModelConfig = { arch: "qwen2", hiddenSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 32, intermediateSize: 256,
  vocabSize: 64, rmsNormEps: 1e-6, ropeTheta: 10000, ropeScaling: { type: "none" }, maxPositionEmbeddings: 256,
  tieWordEmbeddings: true, qkvBias: true };
const C = cfg.hiddenSize;
const D = cfg.headDim;

/** y = W x for W [rows, C] from row `from`. */
function matvec(w: Float32Array, from: number, rows: number, x: Float64Array): Float64Array {
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) for (let i = 0; i < C; i++) y[r]! += w[(from + r) * C + i]! * x[i]!;
  return y;
}

/** Means over random unit-variance inputs x: the same-token logit q.k / sqrt(D) of head h, and x.(W_o,h W_v,g x) / |x|^2. */
function headProducts(layer: LayerParams<Float32Array>, h: number): { logit: number; gain: number } {
  const g = Math.floor(h / (cfg.numHeads / cfg.numKvHeads));
  const rng = new Rng(11, "xoshiro128**");
  let logit = 0;
  let gain = 0;
  const n = 200;
  for (let s = 0; s < n; s++) {
    const x = Float64Array.from({ length: C }, () => rng.normal());
    const q = matvec(layer.q, h * D, D, x);
    const k = matvec(layer.k, g * D, D, x);
    const v = matvec(layer.v, g * D, D, x);
    logit += q.reduce((a, qi, i) => a + qi * k[i]!, 0) / Math.sqrt(D);
    // out = W_o[:, head h's columns] v
    const H = cfg.numHeads * D;
    let dot = 0;
    let xx = 0;
    for (let i = 0; i < C; i++) {
      let o = 0;
      for (let d = 0; d < D; d++) o += layer.o[i * H + h * D + d]! * v[d]!;
      dot += o * x[i]!;
      xx += x[i]! * x[i]!;
    }
    gain += dot / xx;
  }
  return { logit: logit / n, gain: gain / n };
}

describe("mimetic attention init", () => {
  it("starts every head near its same-token logit and pass-on gain; the random init starts near 0", () => {
    const mimetic = randomWeights(cfg, 5, { attentionInit: "mimetic" });
    const plain = randomWeights(cfg, 5);
    const pm = bindParams(mimetic.cfg, mimetic.entries, mimetic.data);
    const pp = bindParams(plain.cfg, plain.entries, plain.data);
    for (let l = 0; l < cfg.numLayers; l++) {
      for (let h = 0; h < cfg.numHeads; h++) {
        const m = headProducts(pm.layers[l]!, h);
        expect(m.logit, `layer ${l} head ${h} logit`).toBeGreaterThan(2.2);
        expect(m.logit).toBeLessThan(3.8);
        expect(m.gain, `layer ${l} head ${h} gain`).toBeGreaterThan(0.14);
        expect(m.gain).toBeLessThan(0.26);
        const p = headProducts(pp.layers[l]!, h);
        expect(Math.abs(p.logit)).toBeLessThan(0.5);
        expect(Math.abs(p.gain)).toBeLessThan(0.05);
      }
    }
  });

  it("changes only the query and output weights, the same way for the same seed", () => {
    const a = randomWeights(cfg, 9, { attentionInit: "mimetic" });
    const b = randomWeights(cfg, 9, { attentionInit: "mimetic" });
    const plain = randomWeights(cfg, 9);
    expect(Buffer.from(a.data.buffer).equals(Buffer.from(b.data.buffer))).toBe(true);
    for (const e of a.entries) {
      const same = a.data.subarray(e.offset, e.offset + e.size).every((v, i) => v === plain.data[e.offset + i]);
      const changed = /self_attn\.(q_proj|o_proj)\.weight$/.test(e.name);
      expect(same, e.name).toBe(!changed);
    }
  });

  it("rejects negative settings", () => {
    const w = randomWeights(cfg, 1);
    expect(() => applyMimeticAttention(w.cfg, bindParams(w.cfg, w.entries, w.data), 0.02, 1, { qkLogit: -1 })).toThrow(/qkLogit, ovGain and noise must be >= 0/);
  });

  it("is a model.init option of the train config, random by default", () => {
    const base = { name: "x", suites: [{ env: "sinkflex/arith-v0" }], model: { init: {} } };
    expect(validateConfig(base, "t").model.init!.attentionInit).toBe("random");
    expect(validateConfig({ ...base, model: { init: { attentionInit: "mimetic" } } }, "t").model.init!.attentionInit).toBe("mimetic");
    expect(() => validateConfig({ ...base, model: { init: { attentionInit: "identity" } } }, "t")).toThrow(/attentionInit/);
  });
});
