// config.json parsing: Qwen2 and Llama fields, transformers 4 and 5 RoPE spellings, clear errors.
import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ModelConfigError, parameterCount, parseHfConfig, toHfConfig } from "../../src/model/config.js";
import { ropeInvFreq } from "../../src/model/rope.js";
import { FIXTURES } from "./fixtures.js";

const qwen = {
  architectures: ["Qwen2ForCausalLM"], model_type: "qwen2", hidden_size: 64, intermediate_size: 96,
  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, vocab_size: 256,
  rms_norm_eps: 1e-6, rope_theta: 1000000, max_position_embeddings: 4096, tie_word_embeddings: true,
};

describe("parseHfConfig", () => {
  it("reads a Qwen2 config (biases on, tied embeddings) and round-trips through toHfConfig", () => {
    const c = parseHfConfig(qwen);
    expect(c).toMatchObject({ arch: "qwen2", hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16,
      intermediateSize: 96, vocabSize: 256, ropeTheta: 1e6, qkvBias: true, tieWordEmbeddings: true,
      ropeScaling: { type: "none" } });
    expect(parseHfConfig(toHfConfig(c))).toEqual(c);
  });

  it("reads the transformers 5 fixture configs (rope_parameters)", () => {
    const llama = parseHfConfig(JSON.parse(readFileSync(join(FIXTURES, "llama-tiny/checkpoint/config.json"), "utf8")));
    expect(llama).toMatchObject({ arch: "llama", qkvBias: false, tieWordEmbeddings: false, ropeTheta: 500000,
      ropeScaling: { type: "llama3", factor: 4, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 32 } });
    const q = parseHfConfig(JSON.parse(readFileSync(join(FIXTURES, "qwen2-tiny/checkpoint/config.json"), "utf8")));
    expect(q).toMatchObject({ arch: "qwen2", ropeScaling: { type: "none" }, ropeTheta: 10000 });
    expect(parseHfConfig(toHfConfig(llama))).toEqual(llama);
    const q3 = parseHfConfig(JSON.parse(readFileSync(join(FIXTURES, "qwen3-tiny/checkpoint/config.json"), "utf8")));
    expect(q3).toMatchObject({ arch: "qwen3", qkvBias: false, headDim: 32, hiddenSize: 64, numHeads: 4, tieWordEmbeddings: true });
    expect(parseHfConfig(toHfConfig(q3))).toEqual(q3);
  });

  it("applies linear and llama3 RoPE scaling to the inverse frequencies", () => {
    const base = ropeInvFreq(parseHfConfig(qwen));
    const lin = ropeInvFreq(parseHfConfig({ ...qwen, rope_scaling: { type: "linear", factor: 4 } }));
    for (let i = 0; i < base.length; i++) expect(lin[i]).toBeCloseTo(base[i]! / 4, 12);
    const l3 = ropeInvFreq(parseHfConfig({ ...qwen, rope_scaling: { rope_type: "llama3", factor: 8, low_freq_factor: 1,
      high_freq_factor: 4, original_max_position_embeddings: 64 } }));
    expect(l3[0]).toBe(base[0]); // high frequency: unchanged
    expect(l3[base.length - 1]).toBeCloseTo(base[base.length - 1]! / 8, 15); // low frequency: divided by factor
  });

  it("Llama biases follow attention_bias; head_dim may be explicit", () => {
    const c = parseHfConfig({ ...qwen, model_type: "llama", architectures: ["LlamaForCausalLM"], attention_bias: true, head_dim: 32 });
    expect(c.qkvBias).toBe(true);
    expect(c.headDim).toBe(32);
    expect(parameterCount(c)).toBeGreaterThan(0);
  });

  it.each([
    [{ ...qwen, model_type: "gpt2", architectures: ["GPT2LMHeadModel"] }, /unsupported model_type/],
    [{ ...qwen, num_key_value_heads: 3 }, /multiple of num_key_value_heads/],
    [{ ...qwen, hidden_size: undefined }, /"hidden_size" must be a positive integer/],
    [{ ...qwen, hidden_act: "gelu" }, /hidden_act "gelu" is not supported/],
    [{ ...qwen, rope_scaling: { type: "yarn", factor: 4 } }, /rope scaling type "yarn" is not supported/],
    [{ ...qwen, hidden_size: 66 }, /not divisible by num_attention_heads/],
    ["nope", /must hold a JSON object/],
  ])("rejects bad config %#", (raw, msg) => {
    expect(() => parseHfConfig(raw)).toThrow(ModelConfigError);
    expect(() => parseHfConfig(raw)).toThrow(msg);
  });
});
