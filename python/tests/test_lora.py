"""Tests of LoRA in the worker (sinkflex_worker/lora.py, engine.py) with real torch, transformers and
peft on a tiny random Qwen2: a fresh adapter starts at the base's log-probs and a step trains it alone;
the saved folder is PEFT's (peft's own PeftModel.from_pretrained gives the worker's log-probs), loads
back with the same log-probs, policy version and AdamW state; adapters the embedded engine cannot
represent are refused naming the field."""
import json
import os

import numpy as np
import pytest
import torch

pytest.importorskip("peft")

from sinkflex_worker.engine import EngineError, TorchEngine  # noqa: E402

V = 64


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(4)
    cfg = Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    d = str(tmp_path_factory.mktemp("base"))
    Qwen2ForCausalLM(cfg).save_pretrained(d, safe_serialization=True)
    return d


def test_an_adapter_trains_alone_saves_as_peft_and_loads_back(base, tmp_path):
    from peft import PeftModel
    from transformers import Qwen2ForCausalLM

    e = TorchEngine("cpu")
    e.load(base)
    seqs = [np.arange(1, 25, dtype=np.int32), np.arange(30, 41, dtype=np.int32)]
    before = e.logprobs(seqs)
    info = e.enable_lora({"rank": 4, "alpha": 8, "targets": ["q_proj", "v", "down"]})
    assert info["lora"] == {"rank": 4, "alpha": 8, "targets": ["q", "v", "down"], "trainable": 2 * (4 * 32 + 32 * 4 + 4 * 32 + 16 * 4 + 4 * 48 + 32 * 4)}
    assert np.abs(e.logprobs(seqs) - before).max() == 0
    frozen = {n: p.detach().clone() for n, p in e.model.named_parameters() if not p.requires_grad}
    h, lp = e.forward(seqs)
    e.backward(h, np.full(lp.shape, -1 / lp.size, np.float32))
    e.optim_step({"lr": 1e-2})
    after = e.logprobs(seqs)
    assert np.abs(after - before).max() > 1e-4
    assert all(torch.equal(p, frozen[n]) for n, p in e.model.named_parameters() if n in frozen)
    out = str(tmp_path / "adapter")
    e.save(out, optimizer=True)
    assert sorted(os.listdir(out)) == ["adapter_config.json", "adapter_model.safetensors", "sinkflex_optimizer.pt"]
    with open(os.path.join(out, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["base_model_name_or_path"] == os.path.abspath(base) and cfg["sinkflex"] == {"policyVersion": 1, "optimizerStep": 1}
    # peft's own loader on transformers' own model gives the same log-probs (full attention here)
    ref = PeftModel.from_pretrained(Qwen2ForCausalLM.from_pretrained(base), out).eval()
    with torch.no_grad():
        logits = ref(input_ids=torch.from_numpy(seqs[0][None].astype(np.int64))).logits[0, :-1]
    lp_ref = torch.log_softmax(logits, -1).gather(-1, torch.from_numpy(seqs[0][1:, None].astype(np.int64))).squeeze(-1).numpy()
    assert np.abs(lp_ref - after[: len(seqs[0]) - 1]).max() < 1e-5
    e2 = TorchEngine("cpu")
    info = e2.load(out)
    assert info["lora"]["rank"] == 4 and info["policyVersion"] == 1 and info["optimizerRestored"]
    assert np.abs(e2.logprobs(seqs) - after).max() < 1e-6


def test_adapters_the_engines_cannot_represent_are_refused(base, tmp_path):
    e = TorchEngine("cpu")
    e.load(base)
    with pytest.raises(EngineError, match='LoRA target "qkv" is not one of q, k, v, o, gate, up, down'):
        e.enable_lora({"rank": 2, "alpha": 4, "targets": ["qkv"]})
    e.enable_lora({"rank": 2, "alpha": 4, "targets": ["q"]})
    with pytest.raises(EngineError, match="trains a LoRA adapter already"):
        e.enable_lora({"rank": 2, "alpha": 4, "targets": ["q"]})
    out = str(tmp_path / "a")
    e.save(out)
    path = os.path.join(out, "adapter_config.json")
    with open(path) as f:
        cfg = json.load(f)
    with open(path, "w") as f:
        json.dump(dict(cfg, use_dora=True), f)
    with pytest.raises(EngineError, match="DoRA and rsLoRA adapters are not supported"):
        TorchEngine("cpu").load(out)
    with open(path, "w") as f:
        json.dump(dict(cfg, base_model_name_or_path=str(tmp_path / "nowhere")), f)
    with pytest.raises(EngineError, match="is not a checkpoint folder here"):
        TorchEngine("cpu").load(out)
