"""Command line of the worker: `python -m sinkflex_worker --socket PATH` or `--tcp HOST:PORT`. Prints one
line `SINKFLEX_WORKER_READY <address>` on stdout once it listens. Under `torchrun --nproc-per-node N -m
sinkflex_worker ...` the model is sharded with FSDP2 (distributed.py): rank 0 listens, the others follow. With --exit-with-stdin it exits when its
stdin closes (the parent process ended). It does not load a model by itself unless --model is given.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_worker", description="Serve the sinkflex engine primitives with PyTorch.")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="Unix socket path to listen on")
    where.add_argument("--tcp", help="HOST:PORT to listen on (port 0 = any free port); a non-loopback host needs a token")
    ap.add_argument("--token", default=os.environ.get("SINKFLEX_WORKER_TOKEN"), help="token clients must send in hello (default: $SINKFLEX_WORKER_TOKEN)")
    ap.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1 (default cpu)")
    ap.add_argument("--autocast", choices=["off", "bf16"], default=None, help="bf16 autocast (default: on for CUDA, off for CPU)")
    ap.add_argument("--attention-kernel", choices=["auto", "eager", "flex"], default="auto",
                    help="attention kernel: flex (FlexAttention, CUDA), eager (an explicit mask, any device) or auto (flex on CUDA, else eager)")
    ap.add_argument("--model", help="Hugging Face checkpoint folder to load at start (clients may also send load)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    ap.add_argument("--exit-with-stdin", action="store_true", help="exit when stdin reaches end of file (the parent died)")
    args = ap.parse_args(argv)

    import torch

    from .distributed import follow, init_from_env
    from .engine import TorchEngine
    from .server import WorkerServer

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dist, device = init_from_env(args.device)
    engine = TorchEngine(device=device, autocast=args.autocast, dist=dist, attention_kernel=args.attention_kernel)
    if args.model:
        engine.load(args.model)
    server = WorkerServer(engine, token=args.token, dist=dist)
    if dist is not None and dist.rank != 0:
        follow(server, dist)
        return 0
    if args.socket:
        address = server.listen_unix(args.socket)
    else:
        host, _, port = args.tcp.rpartition(":")
        if not host or not port.isdigit():
            ap.error(f"--tcp must be HOST:PORT (got {args.tcp!r})")
        address = server.listen_tcp(host.strip("[]"), int(port))
    if args.exit_with_stdin:
        def watch():
            while sys.stdin.buffer.read(4096):
                pass
            os._exit(0)

        threading.Thread(target=watch, daemon=True).start()
    print(f"SINKFLEX_WORKER_READY {address}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
