"""FSDP2 under torchrun on CPU (gloo): a 2-process worker (rank 0 serves the socket, rank 1 follows) and a
1-process worker, driven over the socket through the same three forward/backward/AdamW steps from one
checkpoint (sink-window attention with sink logits), give the same losses, gradient norms, sampled tokens
and saved parameters (a full Hugging Face folder gathered by rank 0, sink logits included); a run resumed
from a checkpoint saved with the sharded AdamW state continues as the uninterrupted one. Bounded: each
worker gets 240 s."""
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from sinkflex_worker.frames import encode_frame, read_frame

V = 64
PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    d = str(tmp_path_factory.mktemp("tiny"))
    Qwen2ForCausalLM(cfg).save_pretrained(d, safe_serialization=True)
    # Sink-window attention (window 4, sinks 1) and per-head sink logits, as the embedded engine saves them.
    from safetensors.torch import load_file, save_file

    path = os.path.join(d, "model.safetensors")
    w = load_file(path)
    for l in range(2):
        w[f"model.layers.{l}.self_attn.sinks"] = torch.tensor([-0.5, 0.0, 0.4, 0.9])
    save_file(w, path, metadata={"format": "pt"})
    with open(os.path.join(d, "sinkflex_attention.json"), "w") as f:
        f.write('{"format": "sinkflex-sink-window-v1", "window": 4, "sinks": 1}')
    return d


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(nproc: int, sock: str):
    args = ["-m", "sinkflex_worker", "--socket", sock, "--threads", "1"]
    if nproc > 1:
        args = ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
                "--master-port", str(_free_port()), *args]
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline:
        line = p.stdout.readline()
        if "SINKFLEX_WORKER_READY" in line:
            c = socket.socket(socket.AF_UNIX)
            c.settimeout(240)
            c.connect(sock)
            return p, c
        if not line and p.poll() is not None:
            raise AssertionError(f"the worker ended: {p.stderr.read()[-3000:]}")
    os.killpg(p.pid, signal.SIGKILL)
    raise AssertionError("the worker did not become ready within 240 s")


class _Client:
    def __init__(self, sock):
        self.sock, self.id = sock, 0

    def __call__(self, op, arrays=None, **header):
        self.id += 1
        self.sock.sendall(encode_frame(dict(header, op=op, id=self.id), arrays))
        h, a = read_frame(self.sock)
        assert h["ok"], h
        return h, a


def _train(nproc, ckpt, out, tmp, resume=None):
    """Three AdamW steps from ckpt (saving out + "-step1" with the optimizer after the first) and then,
    in the same worker, a resume: load `resume` (default that step-1 checkpoint) and two more steps,
    saved to out + "-resumed"."""
    p, sock = _start(nproc, str(tmp / f"w{nproc}.sock"))
    try:
        call = _Client(sock)
        call("hello", protocol=1)
        call("load", dir=ckpt)
        rng = np.random.default_rng(7)
        seqs = [rng.integers(0, V, n).astype(np.int32) for n in (9, 5, 12, 3, 7)]
        batch = {"tokens": np.concatenate(seqs), "lengths": np.array([len(q) for q in seqs], np.int32)}
        losses, norms = [], []

        def step():
            h, a = call("forward", batch)
            lp = a["logprobs"]
            losses.append(-float(lp.mean()))
            call("backward", {"dlogprobs": np.full(lp.shape, -1 / lp.size, np.float32)}, handle=h["handle"])
            norms.append(call("optim_step", lr=1e-2, maxGradNorm=1.0, weightDecay=0.01)[0]["gradNorm"])

        step()
        call("save", dir=out + "-step1", optimizer=True)
        step()
        step()
        call("open", {"tokens": seqs[0]}, sid=1)
        _, s = call("sample", {"stop": np.zeros(0, np.int32)}, sids=[1], params=[{"maxTokens": 8, "seed": 3, "stopCount": 0}])
        _, lp_after = call("logprobs", batch)
        call("save", dir=out)
        h, _ = call("load", dir=resume or out + "-step1")
        assert h["optimizerRestored"] and h["policyVersion"] == 1
        step()
        step()
        call("save", dir=out + "-resumed")
        call("shutdown")
        return losses, norms, s["tokens"].tolist(), lp_after["logprobs"]
    finally:
        sock.close()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def _same_weights(x, y, atol=1e-5):
    from safetensors.torch import load_file

    a = load_file(os.path.join(x, "model.safetensors"))
    b = load_file(os.path.join(y, "model.safetensors"))
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=atol), (k, (a[k] - b[k]).abs().max())


def test_two_fsdp_processes_train_as_one(ckpt, tmp_path):
    """The same losses, norms, tokens and weights from 2 processes and 1; and a run resumed from a
    checkpoint saved with its (sharded) AdamW state ends with the weights of the uninterrupted run: on 2
    processes from their own checkpoint, on 1 process from the 2 processes' checkpoint."""
    from safetensors.torch import load_file

    two = _train(2, ckpt, str(tmp_path / "two"), tmp_path)
    one = _train(1, ckpt, str(tmp_path / "one"), tmp_path, resume=str(tmp_path / "two-step1"))
    assert np.allclose(one[0][:3], two[0][:3], atol=1e-5), (one[0], two[0])
    assert np.allclose(one[1][:3], two[1][:3], rtol=1e-4), (one[1], two[1])
    assert os.path.isfile(tmp_path / "two-step1" / "sinkflex_optimizer.pt")
    assert "model.layers.1.self_attn.sinks" in load_file(str(tmp_path / "two" / "model.safetensors"))
    _same_weights(str(tmp_path / "two"), str(tmp_path / "two-resumed"))
    _same_weights(str(tmp_path / "one"), str(tmp_path / "one-resumed"))
    assert one[0][2] < one[0][0]  # the steps trained
    assert one[2] == two[2]
    assert np.abs(one[3] - two[3]).max() < 1e-4
    a = load_file(str(tmp_path / "one" / "model.safetensors"))
    b = load_file(str(tmp_path / "two" / "model.safetensors"))
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), (k, (a[k] - b[k]).abs().max())
    assert os.path.isfile(tmp_path / "two" / "config.json") and os.path.isfile(tmp_path / "two" / "sinkflex.json")
