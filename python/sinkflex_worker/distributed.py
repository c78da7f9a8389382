"""FSDP2 across the processes of `torchrun --nproc-per-node N -m sinkflex_worker ...`: the process group
(gloo on CPU, NCCL on GPU, plus a gloo group for control messages), sharding a loaded model with
`torch.distributed.fsdp.fully_shard` (each decoder layer, then the whole model), and the fan-out of
ops: rank 0 serves the socket and broadcasts each op it runs; the other ranks run `follow`, which runs
the same ops in the same order on their own engine, so every collective (all-gathers of parameters,
reduce-scatters of gradients) is entered by every rank.

It does not run ops itself (server.py, engine.py) nor know the protocol's fields.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class Dist:
    rank: int
    world: int
    control: object  # the gloo process group the op messages travel on

    def broadcast(self, msg=None):
        """Rank 0 sends `msg`; every other rank returns the message rank 0 sent."""
        import torch.distributed as dist

        box = [msg]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def all_gather(self, obj) -> list:
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        dist.all_reduce(t)
        return t


def init_from_env(device: str) -> tuple:
    """(Dist, device) when started by torchrun with WORLD_SIZE > 1, else (None, device)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None, device
    import torch.distributed as dist

    cuda = device.startswith("cuda")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group("nccl" if cuda else "gloo")
    control = dist.new_group(backend="gloo")
    return Dist(rank=dist.get_rank(), world=world, control=control), device


def shard(model) -> None:
    """FSDP2: each decoder layer is a unit, then the root (embeddings, final norm, head). The
    reduce-scatter averages gradients over ranks; each rank's backward carries its share of the batch's
    loss scaled by the world size (engine.backward), so the result is the sum (gloo has no PREMUL_SUM
    for a divide factor of 1)."""
    from torch.distributed.fsdp import fully_shard

    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no model.layers to shard; FSDP supports decoder-only models with model.layers")
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)


def follow(server, d: Dist) -> None:
    """A rank other than 0: runs every op rank 0 broadcasts, on per-connection mirrors; answers nothing
    (rank 0 answers). Ends when rank 0 sends shutdown or the group breaks (rank 0 died)."""
    from .server import Connection

    conns = {}
    while True:
        try:
            msg = d.broadcast()
        except Exception as e:  # rank 0 is gone
            sys.stderr.write(f"sinkflex_worker rank {d.rank}: the group ended ({e})\n")
            return
        kind, key = msg[0], msg[1]
        if kind == "close":
            conn: Optional[Connection] = conns.pop(key, None)
            if conn is not None:
                conn.sessions.clear()
            server.engine.release()
            continue
        header, arrays = msg[2], msg[3]
        conn = conns.get(key)
        if conn is None:
            conn = conns[key] = Connection(server, None)
            conn.authed = True
        try:
            conn.dispatch(header, arrays)
        except Exception:  # rank 0 runs the same op on the same state and reports the error
            pass
        if header.get("op") == "shutdown":
            return
