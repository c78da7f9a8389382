"""Writes an F16 or Q8_0 GGUF of a Hugging Face Qwen2 checkpoint, for llama.cpp as a decoding peer in the engine benchmark.

Usage: gguf_qwen2.py CHECKPOINT_DIR OUT.gguf [f16|q8_0]

CHECKPOINT_DIR holds config.json and *.safetensors (a Qwen2ForCausalLM checkpoint, such as one the engine
saves from random weights). The matrices are written as F16 (the default) or Q8_0 (llama.cpp's int8: blocks
of 32 values with one fp16 scale, quantized by the gguf package as llama.cpp's converter does), norms and
biases as F32, under llama.cpp's
qwen2 tensor names. It is not a general converter: no tokenizer is read; the GGUF gets a stand-in
byte-level vocabulary of the checkpoint's size (the benchmark feeds token ids, never text), so the file
decodes the same ids as the checkpoint but cannot tokenize text. Needs the `gguf` package (PyPI),
numpy, safetensors and torch (for BF16 tensors). Never run at sinkflex run time.
"""
import glob
import json
import os
import sys

# Hugging Face Qwen2 names (after "model.layers.{i}.") -> llama.cpp's (after "blk.{i}.").
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def gguf_name(hf_name):
    """llama.cpp's name for a Hugging Face Qwen2 tensor; raises on a name it does not know."""
    if hf_name in TOP_NAMES:
        return TOP_NAMES[hf_name]
    parts = hf_name.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in LAYER_NAMES:
        return "blk.%s.%s" % (parts[2], LAYER_NAMES[parts[3]])
    raise ValueError("unknown Qwen2 tensor %r: this writer maps only Qwen2ForCausalLM's tensors" % hf_name)


def byte_tokens():
    """GPT-2's byte-to-unicode alphabet: the 256 one-byte tokens of a byte-level BPE vocabulary."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] not in ("f16", "q8_0")):
        sys.exit("usage: gguf_qwen2.py CHECKPOINT_DIR OUT.gguf [f16|q8_0]")
    src, out = sys.argv[1], sys.argv[2]
    kind = sys.argv[3] if len(sys.argv) == 4 else "f16"
    try:
        import gguf
        import numpy as np
        import torch
        from safetensors.torch import load_file
    except ImportError as e:
        sys.exit("gguf_qwen2.py needs gguf, numpy, safetensors and torch: %s (pip install gguf)" % e)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "qwen2":
        sys.exit("%s: model_type is %r; this writer converts qwen2 checkpoints only" % (src, cfg.get("model_type")))
    files = sorted(glob.glob(os.path.join(src, "*.safetensors")))
    if not files:
        sys.exit("%s holds no .safetensors file" % src)
    tensors = {}
    for path in files:
        tensors.update(load_file(path))

    C = cfg["hidden_size"]
    V = cfg["vocab_size"]
    w = gguf.GGUFWriter(out, "qwen2")
    w.add_name("sinkflex-bench-qwen2")
    w.add_context_length(cfg.get("max_position_embeddings", 32768))
    w.add_embedding_length(C)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    w.add_rope_freq_base(float(cfg.get("rope_theta", 1000000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if kind == "q8_0" else gguf.LlamaFileType.MOSTLY_F16)
    # A stand-in byte-level vocabulary of V tokens: the 256 bytes, then one placeholder per other id.
    tokens = byte_tokens() + ["<id%d>" % i for i in range(256, V)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * V)
    w.add_token_merges([tokens[ord("a") - 33] + " " + tokens[ord("b") - 33]])
    w.add_bos_token_id(V - 1)
    w.add_eos_token_id(V - 1)
    w.add_add_bos_token(False)

    tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in tensors
    for name in sorted(tensors):
        t = tensors[name].to(torch.float32).numpy()
        if t.ndim != 2:
            w.add_tensor(gguf_name(name), t.astype(np.float32))
        elif kind == "q8_0":
            q8 = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(gguf_name(name), gguf.quants.quantize(t, q8), raw_dtype=q8)
        else:
            w.add_tensor(gguf_name(name), t.astype(np.float16))
    if not tied and "lm_head.weight" not in tensors:
        sys.exit("%s: tie_word_embeddings is false but lm_head.weight is missing" % src)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(json.dumps({"gguf": out, "type": kind, "tensors": len(tensors), "vocab": V, "tied": tied}))


if __name__ == "__main__":
    main()
