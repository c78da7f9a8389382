"""Peer measurements for bench/engine.bench.ts: numpy (OpenBLAS) and PyTorch eager on the CPU.

Usage: worker.py numpy|torch. Each library runs in its own process (an OpenMP pool spinning next to
OpenBLAS's threads would slow both). A line protocol: the benchmark starts this script once per library, writes one JSON command per line on stdin, and
reads one JSON answer per line on stdout, so sinkflex and its peers can be measured in alternating rounds
in one run. Thread counts come from the environment the benchmark sets (OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS) and from the "threads" field. Each peer that cannot be imported answers
{"error": "..."} and the benchmark prints "peer unavailable". Never run at sinkflex run time.

Commands (each may carry an "id", echoed in its answer):
  {"op": "info"}
  {"op": "gemm", "M", "N", "K", "ta", "tb", "seconds"}   (C = op(A) @ op(B), float32)
  {"op": "train_step", "config": {HF Qwen2 config}, "batch", "seq", "steps"}   (torch only)
  {"op": "decode", "config": {...}, "batch", "prompt", "new_tokens"}             (torch only)
  {"op": "decode", "checkpoint": DIR, "batch", "prompt", "new_tokens"}   (a saved Qwen2 checkpoint, fp32;
                                                                           the prompts engine.bench.ts decodes)
"""
import json
import os
import sys
import time


def _threads():
    return int(os.environ.get("SINKFLEX_BENCH_THREADS", "2"))


def info(lib):
    out = {"python": sys.version.split()[0]}
    if lib == "numpy":
        return _numpy_info(out)
    return _torch_info(out)


def _numpy_info(out):
    try:
        import numpy as np

        out["numpy"] = np.__version__
        a = np.ones((64, 64), dtype=np.float32)
        a @ a  # load the BLAS
        try:
            from threadpoolctl import threadpool_info

            out["blas"] = [
                {k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                for d in threadpool_info()
                if d.get("user_api") == "blas"
            ]
        except Exception as e:  # threadpoolctl missing: ask OpenBLAS itself
            out["blas"] = _openblas_core() or "threadpoolctl unavailable: %s" % e
    except Exception as e:
        out["error"] = "numpy unavailable: %s" % e
    return out


def _openblas_core():
    """The kernel ("core") the loaded OpenBLAS chose, read from the library itself; None if not found."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            paths = sorted({l.split()[-1] for l in f if "openblas" in l.lower() and ".so" in l})
    except OSError:
        return None
    for path in paths:
        lib = ctypes.CDLL(path)
        for name in ("openblas_get_corename", "openblas_get_corename64_", "scipy_openblas_get_corename64_",
                     "scipy_openblas_get_corename"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return [{"internal_api": "openblas", "architecture": fn().decode(), "library": path.split("/")[-1]}]
    return None


def _torch_info(out):
    try:
        import torch

        torch.set_num_threads(_threads())
        out["torch"] = torch.__version__
        out["torch_threads"] = torch.get_num_threads()
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception as e:
        out["error"] = "torch unavailable: %s" % e
        return out
    try:
        import transformers

        out["transformers"] = transformers.__version__
    except Exception as e:
        out["transformers_error"] = str(e)
    return out


def _best_time(fn, seconds):
    fn()
    best = float("inf")
    start = time.perf_counter()
    n = 0
    while n < 2 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        n += 1
    return best, n


def gemm(cmd):
    M, N, K, ta, tb = cmd["M"], cmd["N"], cmd["K"], cmd["ta"], cmd["tb"]
    seconds = cmd.get("seconds", 0.5)
    if cmd["lib"] == "numpy":
        import numpy as np

        rng = np.random.default_rng(0)
        A = rng.standard_normal((K, M) if ta else (M, K), dtype=np.float32)
        B = rng.standard_normal((N, K) if tb else (K, N), dtype=np.float32)
        C = np.empty((M, N), dtype=np.float32)
        a = A.T if ta else A
        b = B.T if tb else B
        best, n = _best_time(lambda: np.matmul(a, b, out=C), seconds)
    else:
        import torch

        torch.set_num_threads(_threads())
        A = torch.randn((K, M) if ta else (M, K), dtype=torch.float32)
        B = torch.randn((N, K) if tb else (K, N), dtype=torch.float32)
        C = torch.empty((M, N), dtype=torch.float32)
        a = A.t() if ta else A
        b = B.t() if tb else B
        with torch.inference_mode():
            best, n = _best_time(lambda: torch.matmul(a, b, out=C), seconds)
    return {"best_s": best, "gflops": 2.0 * M * N * K / best / 1e9, "reps": n}


def _qwen2(config):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(_threads())
    torch.manual_seed(0)
    cfg = Qwen2Config(**config)
    cfg._attn_implementation = "sdpa"
    model = Qwen2ForCausalLM(cfg).float()
    return torch, model


def train_step(cmd):
    torch, model = _qwen2(cmd["config"])
    model.train()
    B, T = cmd["batch"], cmd["seq"]
    V = cmd["config"]["vocab_size"]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, T), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, foreach=True)

    def step():
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return out.loss.item()

    step()  # warm-up (allocations, optimizer state)
    times, cpu = [], []
    for _ in range(cmd.get("steps", 2)):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    best = min(times)
    return {"best_s": best, "tokens_per_s": B * T / best, "times": times, "cpu_times": cpu, "best_cpu_s": min(cpu),
            "params": sum(p.numel() for p in model.parameters())}


def _qwen2_checkpoint(path):
    import torch
    from transformers import Qwen2ForCausalLM

    torch.set_num_threads(_threads())
    model = Qwen2ForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="sdpa")
    return torch, model


def _lcg_tokens(n, V, seed):
    """bench/engine.bench.ts's randomTokens: the prompts sinkflex decodes, so every contender gets the same."""
    s, out = seed & 0xFFFFFFFF, []
    for _ in range(n):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(s % V)
    return out


def decode(cmd):
    if cmd.get("checkpoint"):
        torch, model = _qwen2_checkpoint(cmd["checkpoint"])
    else:
        torch, model = _qwen2(cmd["config"])
    model.eval()
    B, P, new = cmd["batch"], cmd["prompt"], cmd["new_tokens"]
    V = model.config.vocab_size
    if cmd.get("checkpoint"):
        ids = torch.tensor([_lcg_tokens(P, V, 500 + b) for b in range(B)])
    else:
        g = torch.Generator().manual_seed(2)
        ids = torch.randint(0, V, (B, P), generator=g)
    mask = torch.ones_like(ids)
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True, pad_token_id=0,
              eos_token_id=None)
    with torch.inference_mode():
        model.generate(input_ids=ids[:, :8], attention_mask=mask[:, :8], max_new_tokens=2, do_sample=False,
                       pad_token_id=0)
        t0, c0 = time.perf_counter(), time.process_time()
        out = model.generate(input_ids=ids, attention_mask=mask, **kw)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    produced = (out.shape[1] - P) * B
    return {"seconds": dt, "tokens_per_s": produced / dt, "new_tokens": int(out.shape[1] - P), "batch": B,
            "produced": produced, "cpu_seconds": cpu}


def main():
    lib = sys.argv[1] if len(sys.argv) > 1 else "numpy"
    if lib not in ("numpy", "torch"):
        sys.exit("usage: worker.py numpy|torch")
    ops = {"info": lambda c: info(lib), "gemm": lambda c: gemm(dict(c, lib=lib))}
    if lib == "torch":
        ops.update(train_step=train_step, decode=decode)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = {}
        try:
            cmd = json.loads(line)
            if cmd["op"] not in ops:
                raise ValueError("the %s worker does not run %r" % (lib, cmd["op"]))
            res = ops[cmd["op"]](cmd)
        except Exception as e:  # report, keep serving
            res = {"error": "%s: %s" % (type(e).__name__, e)}
        # the command's number, so that the benchmark can tell a late answer from the one it waits for
        res["id"] = cmd.get("id") if isinstance(cmd, dict) else None
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
