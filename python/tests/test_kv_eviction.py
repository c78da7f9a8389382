"""Tests of KV eviction in the worker's sessions under the sink-window mask (engine.py, attention.py
KVBuffer), with real torch and a tiny random Qwen2 saved with window 6, sinks 2 (and per-head sink
logits): a long session of many appends and samples holds its sink slots, pinned positions and last W
positions only (a constant size once the window fills) and its sampled log-probs equal the teacher-forced
ones under the training mask with the same pinned positions (1e-5, fp32); batched decoding past the
window gives each session what it gets alone; a fork of an evicted session is right and leaves its parent
alone; truncating within the window works and truncating past evicted keys is the embedded engine's error."""
import json
import os

import numpy as np
import pytest
import torch

from sinkflex_worker.engine import EngineError, SequenceMasks, Session, TorchEngine

V = 64
W, K = 6, 2
TOL = 1e-5


def _tiny(d: str, window: int, sinks: int, sink_logits: bool) -> str:
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(7)
    cfg = Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=False)
    Qwen2ForCausalLM(cfg).save_pretrained(d, safe_serialization=True)
    if sink_logits:
        path = os.path.join(d, "model.safetensors")
        w = load_file(path)
        for l in range(2):
            w[f"model.layers.{l}.self_attn.sinks"] = torch.tensor([-0.6, -0.2, 0.2, 0.6])
        save_file(w, path, metadata={"format": "pt"})
    if window:
        with open(os.path.join(d, "sinkflex_attention.json"), "w") as f:
            json.dump({"format": "sinkflex-sink-window-v1", "window": window, "sinks": sinks}, f)
    return d


@pytest.fixture(scope="module", params=[False, True], ids=["window", "sink-logit"])
def engine(request, tmp_path_factory):
    e = TorchEngine("cpu")
    e.load(_tiny(str(tmp_path_factory.mktemp("evict")), W, K, request.param))
    return e


def _tokens(seed: int, n: int) -> list:
    return np.random.default_rng(seed).integers(0, V, n).tolist()


def _teacher_forced(e: TorchEngine, s: Session) -> np.ndarray:
    pinned = np.zeros(len(s.tokens), np.int32)
    pinned[s.pinned] = 1
    return e.logprobs([np.array(s.tokens, np.int32)], SequenceMasks(pinned=[pinned]))


def _converse(e: TorchEngine, s: Session, turns: int, seed: int, pin_every: int = 0) -> dict:
    """turns x (append 7 tokens, the first pinned every `pin_every` turns; sample 9): the sampled
    log-probs by position, and the session's kept positions and bytes after each turn."""
    sampled, kept, size = {}, [], []
    for t in range(turns):
        toks = _tokens(seed * 100 + t, 7)
        pins = [1 if (pin_every and t % pin_every == 0 and i == 0) else 0 for i in range(7)]
        e.append(s, toks, pins)
        start = len(s.tokens)
        r = e.sample(s, {"maxTokens": 9, "seed": seed * 1000 + t}, [])
        for i, lp in enumerate(r["logprobs"]):
            sampled[start + i] = lp
        kept.append(s.kept_positions)
        size.append(s.kv_bytes)
    return {"sampled": sampled, "kept": kept, "bytes": size}


def _worst(sampled: dict, lp: np.ndarray) -> float:
    return max(abs(x - float(lp[pos - 1])) for pos, x in sampled.items())


def test_a_long_session_holds_a_constant_size_and_samples_the_teacher_forced_logprobs(engine):
    s = Session(tokens=_tokens(1, 5))
    run = _converse(engine, s, 16, 1)
    assert len(s.tokens) == 5 + 16 * 16
    # after each sample the last token is pending; the computed ones keep K sink slots and the last W
    assert s.cached == len(s.tokens) - 1
    assert run["kept"] == [K + W] * 16
    assert len(set(run["bytes"])) == 1 and run["bytes"][0] > 0
    assert s.kv_pos.tolist() == [0, 1] + list(range(s.cached - W, s.cached))
    assert s.evicted_to == s.cached - W
    assert _worst(run["sampled"], _teacher_forced(engine, s)) < TOL


def test_pinned_positions_are_kept_and_read_by_every_later_query(engine):
    s = Session(tokens=_tokens(2, 4))
    run = _converse(engine, s, 15, 2, pin_every=3)
    assert len(s.pinned) == 5
    pins_so_far = [sum(1 for p in s.pinned if p < 4 + 16 * (t + 1)) for t in range(15)]
    assert run["kept"] == [K + W + n for n in pins_so_far]
    assert set(s.pinned) <= set(s.kv_pos.tolist())
    lp = _teacher_forced(engine, s)
    assert _worst(run["sampled"], lp) < TOL
    # the pins matter: without them the teacher-forced log-probs are far from what was sampled
    plain = engine.logprobs([np.array(s.tokens, np.int32)], None)
    assert _worst(run["sampled"], plain) > 100 * TOL


def test_batched_decoding_past_the_window_gives_each_session_what_it_gets_alone(engine):
    prompts = [_tokens(3, 17), _tokens(4, 3), _tokens(5, 30)]
    params = [{"maxTokens": 20, "seed": 5}, {"maxTokens": 4, "seed": 6}, {"maxTokens": 27, "seed": 7, "topK": 8}]
    alone = [engine.sample(Session(tokens=list(p)), dict(q), []) for p, q in zip(prompts, params)]
    sessions = [Session(tokens=list(p)) for p in prompts]
    batched = engine.sample_batch(sessions, [dict(q) for q in params], [[], [], []])
    for a, b, s in zip(alone, batched, sessions):
        assert a["tokens"] == b["tokens"]
        assert np.abs(np.array(a["logprobs"]) - np.array(b["logprobs"])).max() < TOL
        assert s.kept_positions == min(s.cached, K + W)
    for b, s in zip(batched[:2], sessions[:2]):  # temperature 1, untruncated: the model's log-probs
        lp = _teacher_forced(engine, s)
        n = len(b["tokens"])
        assert np.abs(lp[len(s.tokens) - n - 1:] - np.array(b["logprobs"])).max() < TOL


def test_a_fork_of_an_evicted_session_is_right_and_leaves_its_parent_alone(engine):
    parent = Session(tokens=_tokens(8, 6))
    _converse(engine, parent, 5, 8)
    assert parent.evicted_to > 0
    before = (list(parent.tokens), parent.kv_pos.clone(), [k.clone() for k, _ in parent.kv])
    child = engine.fork(parent)
    engine.append(child, _tokens(9, 5))
    start = len(child.tokens)
    r = engine.sample(child, {"maxTokens": 15, "seed": 3}, [])
    assert child.kept_positions == K + W
    lp = _teacher_forced(engine, child)
    assert np.abs(lp[start - 1:] - np.array(r["logprobs"])).max() < TOL
    assert parent.tokens == before[0] and torch.equal(parent.kv_pos, before[1])
    assert all(torch.equal(k, k0) for (k, _), k0 in zip(parent.kv, before[2]))
    # the parent goes on as if the child never was
    again = engine.sample(engine.fork(parent), {"maxTokens": 6, "seed": 4}, [])
    fresh = engine.sample(Session(tokens=list(parent.tokens)), {"maxTokens": 6, "seed": 4}, [])
    assert again["tokens"] == fresh["tokens"]


def test_truncate_within_the_window_works_and_past_evicted_keys_is_an_error(engine):
    s = Session(tokens=_tokens(10, 30))
    engine.sample(s, {"maxTokens": 8, "seed": 11}, [])  # 38 tokens, 37 computed, evicted below 31
    assert s.evicted_to == 37 - W
    engine.truncate(s, 37)  # the last W computed keys are there: the query at 36 is computed again
    retry = engine.sample(s, {"maxTokens": 4, "seed": 12}, [])
    fresh = engine.sample(Session(tokens=s.tokens[:37]), {"maxTokens": 4, "seed": 12}, [])
    assert retry["tokens"] == fresh["tokens"]
    with pytest.raises(EngineError, match=r"truncate\(30\): the keys of positions .* were evicted .* truncate to 40 or more tokens"):
        engine.truncate(s, 30)
    assert len(s.tokens) == 41 and s.evicted_to == 40 - W  # the failed truncate changed nothing
    engine.truncate(s, 40)
    engine.truncate(s, 2)  # only sink slots needed: they are kept
    assert s.tokens == _tokens(10, 30)[:2] and s.kept_positions == 2


def test_full_attention_keeps_every_key(tmp_path):
    e = TorchEngine("cpu")
    e.load(_tiny(str(tmp_path), 0, 0, False))
    s = Session(tokens=_tokens(12, 10))
    e.sample(s, {"maxTokens": 12, "seed": 1}, [])
    assert s.kept_positions == s.cached == 21 and s.evicted_to == 0
    e.truncate(s, 3)
    assert s.kept_positions == 3


def test_a_long_prefill_goes_in_pieces_and_holds_a_bounded_buffer(engine, monkeypatch):
    """A 100-token prompt is computed in pieces of 16 (max(W, 16)): no model call sees more than
    K + W + 2 * 16 key columns, and the log-probs are the teacher-forced ones."""
    from sinkflex_worker import attention

    widest = []
    real_extend = attention.KVBuffer.extend

    def extend(self, layer, k, v):
        out = real_extend(self, layer, k, v)
        widest.append(out[0].shape[2])
        return out

    monkeypatch.setattr(attention.KVBuffer, "extend", extend)
    s = Session(tokens=_tokens(20, 100))
    r = engine.sample(s, {"maxTokens": 5, "seed": 2}, [])
    assert max(widest) <= K + W + 2 * 16
    lp = _teacher_forced(engine, s)
    assert np.abs(lp[99:] - np.array(r["logprobs"])).max() < TOL
