"""Tests of the worker's attention (sinkflex_worker/attention.py): the keep mask against a literal
transcription of the embedded engine's keep rule (src/kernels/kernels.ts maskKeeps) over shared prefixes,
packed documents and pinned positions; the eager kernel against a plain softmax with a sink term; the
flex kernel (FlexAttention, forward only on the CPU) against the eager one; a sink-window checkpoint
with sink logits loading, saving its sink logits and attention file, and decoding in a batch the tokens
and log-probs each session gets alone."""
import json
import math
import os

import numpy as np
import pytest
import torch

from sinkflex_worker.attention import (
    AttentionPass, SinkWindow, document_positions, eager_forward, flex_available, flex_forward, keep_mask,
)
from sinkflex_worker.engine import Session, SequenceMasks, TorchEngine

V = 64


def keeps_literal(sw, doc, pinned, q, kv):
    """maskKeeps of src/kernels/kernels.ts, line by line, for one row."""
    if kv > q:
        return False
    if doc[q] != doc[kv] and doc[kv] != -1:
        return False
    pos = document_positions(np.array(doc))
    if sw.window == 0 or pos[q] - pos[kv] < sw.window:
        return True
    if pos[kv] < sw.sinks:
        return True
    return bool(pinned[kv])


def test_document_positions_count_the_shared_prefix():
    assert document_positions(np.array([-1, -1, 0, 0, 0, 1, 1])).tolist() == [0, 1, 2, 3, 4, 2, 3]
    assert document_positions(np.array([0, 0, 1, 1, 1])).tolist() == [0, 1, 0, 1, 2]
    assert document_positions(np.zeros(4, np.int64)).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("sw", [SinkWindow(0, 0), SinkWindow(3, 1), SinkWindow(4, 2)])
def test_keep_mask_is_the_engines_rule(sw):
    doc = [-1, -1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    pinned = [0] * len(doc)
    pinned[3] = pinned[9] = 1
    T = len(doc)
    t = torch.arange(T)[None]
    d = torch.tensor([doc])
    dp = torch.from_numpy(document_positions(np.array(doc)))[None]
    keep = keep_mask(sw, t, d, dp, t, d, dp, torch.tensor([pinned], dtype=torch.bool), torch.ones((1, T), dtype=torch.bool))[0]
    want = torch.tensor([[keeps_literal(sw, doc, pinned, q, kv) for kv in range(T)] for q in range(T)])
    assert torch.equal(keep, want)


def _qkv(B=2, H=4, KVH=2, T=11, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, D, generator=g), torch.randn(B, KVH, T, D, generator=g), torch.randn(B, KVH, T, D, generator=g))


def _window_keep(B, T, sw):
    t = torch.arange(T)[None].expand(B, T)
    z = torch.zeros_like(t)
    return keep_mask(sw, t, z, t, t, z, t, None, torch.ones((B, T), dtype=torch.bool))


def test_eager_kernel_is_a_softmax_with_a_sink_term():
    q, k, v = _qkv()
    sinks = torch.tensor([-0.5, 0.0, 0.7, 1.5])
    keep = _window_keep(2, 11, SinkWindow(4, 1))
    out = eager_forward(keep, q, k, v, 0.3, sinks)
    for b in range(2):
        for h in range(4):
            for i in range(11):
                s = [(float(q[b, h, i] @ k[b, h // 2, j]) * 0.3, j) for j in range(11) if keep[b, i, j]]
                z = math.exp(float(sinks[h])) + sum(math.exp(x) for x, _ in s)
                ref = sum(math.exp(x) / z * v[b, h // 2, j] for x, j in s)
                assert torch.allclose(out[b, h, i], ref, atol=1e-5)
    plain = eager_forward(keep, q, k, v, 0.3, None)  # no sink logit: scaled_dot_product_attention
    assert torch.allclose(plain, eager_forward(keep, q, k, v, 0.3, torch.full((4,), -1e4)), atol=1e-6)


@pytest.mark.skipif(flex_available() is not None, reason=str(flex_available()))
def test_flex_kernel_matches_the_eager_kernel_forward():
    q, k, v = _qkv(T=37)
    sinks = torch.tensor([-0.5, 0.0, 0.7, 1.5])
    keep = _window_keep(2, 37, SinkWindow(5, 2))
    keep[1, :, 3] &= torch.arange(37) < 20  # rows may differ
    for s in (None, sinks):
        a = eager_forward(keep, q, k, v, 0.35, s)
        b = flex_forward(AttentionPass(keep=keep, kernel="flex"), q, k, v, 0.35, s)
        assert (a - b).abs().max() < 1e-5


@pytest.fixture(scope="module")
def sink_ckpt(tmp_path_factory):
    """A tiny random Qwen2 saved with window 5, sinks 2 and per-head sink logits (as the embedded engine writes them)."""
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(3)
    cfg = Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    d = str(tmp_path_factory.mktemp("sink"))
    Qwen2ForCausalLM(cfg).save_pretrained(d, safe_serialization=True)
    path = os.path.join(d, "model.safetensors")
    w = load_file(path)
    for l in range(2):
        w[f"model.layers.{l}.self_attn.sinks"] = torch.tensor([-0.6, -0.2, 0.2, 0.6])
    save_file(w, path, metadata={"format": "pt"})
    with open(os.path.join(d, "sinkflex_attention.json"), "w") as f:
        json.dump({"format": "sinkflex-sink-window-v1", "window": 5, "sinks": 2}, f)
    return d


def test_sink_checkpoint_trains_its_sink_logits_and_saves_them(sink_ckpt, tmp_path):
    e = TorchEngine("cpu")
    info = e.load(sink_ckpt)
    assert info["attention"] == {"window": 5, "sinks": 2, "sinkLogit": True, "kernel": "eager", "why": info["attention"]["why"]}
    seqs = [np.arange(1, 20, dtype=np.int32), np.arange(30, 41, dtype=np.int32)]
    h, lp = e.forward(seqs, None)
    e.backward(h, np.full(lp.shape, -1 / lp.size, np.float32))
    sinks = e.model.model.layers[0].self_attn.sinks
    assert sinks.grad is not None and float(sinks.grad.abs().sum()) > 0
    e.optim_step({"lr": 1e-2})
    e.save(str(tmp_path / "out"))
    with open(tmp_path / "out" / "sinkflex_attention.json") as f:
        assert json.load(f)["window"] == 5
    e2 = TorchEngine("cpu")
    e2.load(str(tmp_path / "out"))
    assert torch.equal(e2.model.model.layers[0].self_attn.sinks, sinks)
    assert np.allclose(e2.logprobs(seqs, None), e.logprobs(seqs, None), atol=1e-6)
    # Packed documents and pinned positions change the log-probs; bad document ids are a clear error.
    docs = SequenceMasks(doc_ids=[np.array([0] * 10 + [1] * 9), np.zeros(11, np.int64)])
    assert np.abs(e.logprobs(seqs, docs) - e.logprobs(seqs, None)).max() > 1e-3
    with pytest.raises(Exception, match="must not decrease"):
        e.logprobs(seqs, SequenceMasks(doc_ids=[np.array([1] * 10 + [0] * 9), np.zeros(11, np.int64)]))


def test_batched_decoding_gives_each_session_what_it_gets_alone(sink_ckpt):
    e = TorchEngine("cpu")
    e.load(sink_ckpt)
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]]
    params = [{"maxTokens": 12, "seed": 5}, {"maxTokens": 3, "seed": 6}, {"maxTokens": 16, "seed": 7, "topK": 8}]
    alone = [e.sample(Session(tokens=list(p)), dict(q), []) for p, q in zip(prompts, params)]
    sessions = [Session(tokens=list(p)) for p in prompts]
    e.next_logits(sessions[1])  # one session with nothing pending, beside two with prompts of different lengths
    batched = e.sample_batch(sessions, [dict(q) for q in params], [[], [], []])
    for a, b, s in zip(alone, batched, sessions):
        assert a["tokens"] == b["tokens"]
        assert np.abs(np.array(a["logprobs"]) - np.array(b["logprobs"])).max() < 1e-5
        # the session's keys continue where sampling stopped: greedy from it is greedy from scratch
        assert s.cached == len(s.tokens) - 1
        fresh = Session(tokens=list(s.tokens))
        more = e.sample(s, {"maxTokens": 4, "temperature": 0}, [])
        assert more["tokens"] == e.sample(fresh, {"maxTokens": 4, "temperature": 0}, [])["tokens"]
    # a session stopping early leaves the batch; the others go on
    greedy = e.sample(Session(tokens=list(prompts[0])), {"maxTokens": 6, "temperature": 0}, [])
    stop = greedy["tokens"][1]
    out = e.sample_batch([Session(tokens=list(prompts[0])), Session(tokens=list(prompts[2]))],
                         [{"maxTokens": 6, "temperature": 0}, {"maxTokens": 6, "temperature": 0}], [[stop], []])
    assert out[0]["finishReason"] == "stop" and out[0]["tokens"] == greedy["tokens"][: greedy["tokens"].index(stop) + 1]
    assert len(out[1]["tokens"]) == 6
