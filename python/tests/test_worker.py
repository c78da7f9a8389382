"""Tests of the worker with real torch and a tiny random Qwen2 model made by transformers: the engine
(sessions, sampling, log-probs, forward/backward, AdamW, save/load) and the socket server with binary
frames, run in-process on a Unix socket and over TCP with a token."""
import os
import socket
import threading

import numpy as np
import pytest
import torch

from sinkflex_worker.engine import EngineError, Session, TorchEngine
from sinkflex_worker.frames import FrameError, decode_body, encode_frame, read_frame
from sinkflex_worker.server import WorkerServer

V = 64


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    d = str(tmp_path_factory.mktemp("tiny"))
    Qwen2ForCausalLM(cfg).save_pretrained(d, safe_serialization=True)
    return d


@pytest.fixture()
def engine(ckpt):
    e = TorchEngine("cpu")
    e.load(ckpt)
    return e


def test_frames_round_trip_and_reject_garbage():
    f = encode_frame({"op": "x", "n": 3}, {"t": np.array([1, -2, 3], np.int32), "f": np.array([0.5], np.float32)})
    h, a = decode_body(f[8:8 + int.from_bytes(f[:4], "little")], f[8 + int.from_bytes(f[:4], "little"):])
    assert h == {"op": "x", "n": 3}
    assert a["t"].tolist() == [1, -2, 3] and a["f"].tolist() == [0.5]
    with pytest.raises(FrameError):
        decode_body(b'{"arrays":[["t","i32",4]]}', b"\0" * 8)
    with pytest.raises(FrameError):
        decode_body(b"[1]", b"")


def test_sampling_matches_teacher_forcing_and_repeats(engine):
    s = Session(tokens=[1, 2, 3, 4])
    a = engine.sample(s, {"maxTokens": 10, "seed": 5}, [])
    b = engine.sample(Session(tokens=[1, 2, 3, 4]), {"maxTokens": 10, "seed": 5}, [])
    assert a["tokens"] == b["tokens"] and len(a["tokens"]) == 10
    lp = engine.logprobs([np.array(s.tokens, np.int32)], None)
    assert np.abs(lp[3:] - np.array(a["logprobs"])).max() < 1e-4


def test_fork_and_truncate_replay(engine):
    p = Session(tokens=[5, 6, 7, 8, 9])
    engine.next_logits(p)
    k = engine.fork(p)
    first = engine.sample(k, {"maxTokens": 6, "seed": 1}, [])
    assert p.tokens == [5, 6, 7, 8, 9]
    engine.truncate(k, 5)
    again = engine.sample(k, {"maxTokens": 6, "seed": 1}, [])
    assert again["tokens"] == first["tokens"]
    greedy = engine.sample(engine.fork(p), {"maxTokens": 5, "temperature": 0}, [])
    stop = greedy["tokens"][2]
    stopped = engine.sample(engine.fork(p), {"maxTokens": 5, "temperature": 0}, [stop])
    assert stopped["finishReason"] == "stop"
    assert stopped["tokens"] == greedy["tokens"][: greedy["tokens"].index(stop) + 1]


def test_forward_backward_applies_the_given_gradient(engine):
    seqs = [np.array([1, 2, 3, 4, 5, 6], np.int32), np.array([7, 8, 9], np.int32)]
    h, lp = engine.forward(seqs, None)
    assert lp.shape == (7,)
    engine.backward(h, np.full(7, -1 / 7, np.float32))
    g = {n: p.grad.clone() for n, p in engine.model.named_parameters()}
    # the same gradient by autograd on the mean NLL of each sequence's tokens, in transformers' own model
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(engine.source_dir, dtype=torch.float32).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    l1 = torch.log_softmax(ref(ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None]).sum()
    ids2 = torch.tensor([[7, 8, 9]])
    l2 = torch.log_softmax(ref(ids2).logits[0, :-1], -1).gather(-1, ids2[0, 1:, None]).sum()
    (-(l1 + l2) / 7).backward()
    for n, p in ref.named_parameters():
        assert torch.allclose(g[n], p.grad, atol=1e-5, rtol=1e-4), n
    with pytest.raises(EngineError):
        engine.backward(h, np.zeros(7, np.float32))  # one backward per forward


def test_optim_step_lowers_loss_and_bumps_version(engine, tmp_path):
    seqs = [np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int32)]
    first = None
    for _ in range(5):
        h, lp = engine.forward(seqs, None)
        loss = -float(lp.mean())
        first = first if first is not None else loss
        engine.backward(h, np.full(lp.shape, -1 / lp.size, np.float32))
        norm = engine.optim_step({"lr": 1e-2, "maxGradNorm": 1.0})
        assert norm > 0
    assert loss < first and engine.policy_version == 5
    engine.save(str(tmp_path / "out"))
    e2 = TorchEngine("cpu")
    e2.load(str(tmp_path / "out"))
    assert e2.policy_version == 5
    assert np.allclose(e2.logprobs(seqs, None), engine.logprobs(seqs, None), atol=1e-6)


def test_bad_input_is_a_clear_error(engine, tmp_path):
    with pytest.raises(EngineError, match="outside the vocabulary"):
        engine.logprobs([np.array([1, V], np.int32)], None)
    with pytest.raises(EngineError, match="no config.json"):
        TorchEngine("cpu").load(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "sinkflex_attention.json").write_text('{"format": "x", "window": 64, "sinks": 4}')
    with pytest.raises(EngineError, match="not a sink-window settings file"):
        TorchEngine("cpu").load(str(tmp_path))


def _call(sock, header, arrays=None):
    sock.sendall(encode_frame(header, arrays))
    return read_frame(sock)


def _serve(server):
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return t


def test_server_over_unix_socket(ckpt, tmp_path):
    server = WorkerServer(TorchEngine("cpu"))
    path = str(tmp_path / "w.sock")
    server.listen_unix(path)
    _serve(server)
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    h, _ = _call(c, {"op": "hello", "id": 1})
    assert h["ok"] and h["protocol"] == 1
    h, _ = _call(c, {"op": "load", "id": 2, "dir": ckpt})
    assert h["ok"] and h["vocabSize"] == V
    h, _ = _call(c, {"op": "open", "id": 3, "sid": 1}, {"tokens": np.array([1, 2, 3], np.int32)})
    assert h["ok"]
    h, a = _call(c, {"op": "sample", "id": 4, "sids": [1], "params": [{"maxTokens": 4, "seed": 3, "stopCount": 0}]})
    assert h["ok"] and h["counts"] == [4] and a["tokens"].dtype == np.int32 and a["logprobs"].dtype == np.float32
    h, a = _call(c, {"op": "logprobs", "id": 5}, {"tokens": np.array([1, 2, 3, 4], np.int32), "lengths": np.array([4], np.int32)})
    assert h["ok"] and a["logprobs"].shape == (3,)
    h, _ = _call(c, {"op": "append", "id": 6, "sid": 99}, {"tokens": np.array([1], np.int32)})
    assert not h["ok"] and "not open" in h["error"]
    h, _ = _call(c, {"op": "nope", "id": 7})
    assert not h["ok"] and "unknown op" in h["error"]
    c.close()
    server.stop()


def test_tcp_beyond_loopback_needs_a_token_and_checks_it(ckpt):
    with pytest.raises(SystemExit, match="needs a token"):
        WorkerServer(TorchEngine("cpu")).listen_tcp("0.0.0.0", 0)
    server = WorkerServer(TorchEngine("cpu"), token="s3cret")
    addr = server.listen_tcp("127.0.0.1", 0)
    _serve(server)
    port = int(addr.rsplit(":", 1)[1])
    bad = socket.create_connection(("127.0.0.1", port))
    h, _ = _call(bad, {"op": "hello", "id": 1, "token": "wrong"})
    assert not h["ok"] and "token" in h["error"]
    assert bad.recv(1) == b""  # the worker hung up
    good = socket.create_connection(("127.0.0.1", port))
    h, _ = _call(good, {"op": "load", "id": 1, "dir": ckpt})
    assert not h["ok"] and "hello" in h["error"]
    h, _ = _call(good, {"op": "hello", "id": 2, "token": "s3cret"})
    assert h["ok"]
    good.close()
    server.stop()
