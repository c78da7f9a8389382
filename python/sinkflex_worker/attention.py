"""The worker's attention: the canonical sink mask of the embedded engine (src/kernels/kernels.ts,
`maskKeeps`) and the learnable per-head sink logit (src/attention/sink-logit.ts), run inside a Hugging
Face model through transformers' attention interface (registered as "sinkflex").

    keep(q, kv) = kv <= q  AND  (doc(q) == doc(kv) OR doc(kv) == -1)
                  AND  (W == 0 OR pos(q) - pos(kv) < W OR pos(kv) < K OR kv is pinned)

pos is the index within the document, counting a shared prefix (doc id -1 at the start of a row). With
a sink logit s_h (parameter `model.layers.N.self_attn.sinks` [H]) each softmax gets an extra term
exp(s_h) in its denominator that attends to nothing.

Two kernels compute it from one dense keep mask [B, Tq, S] per model call: "eager" (an explicit mask:
scaled_dot_product_attention, or a softmax with a sink column when there is a sink logit; forward and
backward on every device) and "flex" (torch's FlexAttention with a block mask built from the keep mask,
the sink logit applied through the returned log-sum-exp; it has no backward on the CPU in torch, so it
is the CUDA default). The engine (engine.py) builds the mask and, for sessions, the KV buffer a call
appends its keys to (the model itself runs with use_cache=False).

This file does not load checkpoints or sample. Shapes: B rows, Tq query tokens, S key columns, H query
heads, KVH key/value heads, D head size.
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

ATTENTION_FILE = "sinkflex_attention.json"
ATTENTION_FORMAT = "sinkflex-sink-window-v1"
SHARED_DOC = -1
KERNELS = ("auto", "eager", "flex")


class AttentionError(Exception):
    """Attention settings or masks the worker cannot use; the message says what to do."""


@dataclass(frozen=True)
class SinkWindow:
    """K sink slots and a sliding window W; (0, 0) is full causal attention."""
    window: int = 0
    sinks: int = 0

    def describe(self) -> str:
        kind = "full attention" if self.window == 0 else "sink-window attention"
        return f"{kind} (window {self.window}, sinks {self.sinks})"


def read_sink_window(directory: str) -> Tuple[SinkWindow, Optional[dict]]:
    """The checkpoint's settings from sinkflex_attention.json (full attention without the file) and the
    record as read (written back by save)."""
    path = os.path.join(directory, ATTENTION_FILE)
    if not os.path.isfile(path):
        return SinkWindow(), None
    try:
        with open(path) as f:
            rec = json.load(f)
    except ValueError as e:
        raise AttentionError(f"{path}: not valid JSON ({e}); rewrite it or remove it to load with full attention")
    if not isinstance(rec, dict) or rec.get("format") != ATTENTION_FORMAT:
        raise AttentionError(
            f'{path}: not a sink-window settings file (expected "format": "{ATTENTION_FORMAT}"); rewrite it as '
            f'{{"format": "{ATTENTION_FORMAT}", "window": W, "sinks": K}} or remove it to load with full attention'
        )
    w, k = rec.get("window"), rec.get("sinks")
    if not (isinstance(w, int) and not isinstance(w, bool) and w >= 0 and isinstance(k, int) and not isinstance(k, bool) and k >= 0):
        raise AttentionError(f'{path}: "window" and "sinks" must be integers >= 0, got {w!r} and {k!r}')
    return SinkWindow(window=w, sinks=k), rec


def sink_logit_tensors(directory: str) -> Dict[int, torch.Tensor]:
    """Layer -> [H] sink logits saved in the checkpoint's safetensors (`model.layers.N.self_attn.sinks`)."""
    from safetensors import safe_open

    out: Dict[int, torch.Tensor] = {}
    for name in sorted(os.listdir(directory)):
        if not (name.startswith("model") and name.endswith(".safetensors")):  # not optimizer.safetensors
            continue
        with safe_open(os.path.join(directory, name), framework="pt") as f:
            for key in f.keys():
                if key.endswith(".self_attn.sinks"):
                    parts = key.split(".")
                    layer = int(parts[parts.index("layers") + 1])
                    out[layer] = f.get_tensor(key).float()
    return out


def attach_sink_logits(model, values: Dict[int, torch.Tensor]) -> None:
    """Registers `self_attn.sinks` [H] on each decoder layer (transformers drops the unknown tensor at
    load), so it trains with the other parameters and save_pretrained writes it under its name."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise AttentionError(f"{type(model).__name__}: no model.layers; sink logits need a decoder-only model")
    if sorted(values) != list(range(len(layers))):
        raise AttentionError(f"the checkpoint has sink logits for layers {sorted(values)} of {len(layers)}; every layer needs one")
    heads = int(model.config.num_attention_heads)
    device = next(model.parameters()).device
    for l, layer in enumerate(layers):
        v = values[l]
        if v.shape != (heads,):
            raise AttentionError(f"model.layers.{l}.self_attn.sinks has shape {tuple(v.shape)}; expected [{heads}] (one per query head)")
        layer.self_attn.sinks = torch.nn.Parameter(v.to(device=device, dtype=torch.float32))


def document_positions(doc: np.ndarray) -> np.ndarray:
    """[T] each position's index within its document, counting a shared prefix (kernels.ts's
    documentPositions for one row)."""
    T = doc.shape[0]
    t = np.arange(T)
    P = 0
    while P < T and doc[P] == SHARED_DOC:
        P += 1
    change = np.zeros(T, dtype=bool)
    change[1:] = doc[1:] != doc[:-1]
    start = np.maximum.accumulate(np.where(change, t, 0))
    return np.where(t < P, t, P + t - start)


def check_doc_ids(doc: np.ndarray, i: int) -> None:
    if (doc < SHARED_DOC).any():
        t = int(np.argmax(doc < SHARED_DOC))
        raise AttentionError(f"docIds[{i}][{t}] is {int(doc[t])}; document ids are >= 0, or -1 for a shared prefix at the start")
    if doc.shape[0] > 1 and (doc[1:] < doc[:-1]).any():
        t = int(np.argmax(doc[1:] < doc[:-1])) + 1
        raise AttentionError(
            f"docIds[{i}] decreases at position {t} ({int(doc[t])} after {int(doc[t - 1])}); document ids must not decrease "
            "along a sequence: give each packed document a larger id than the one before, and a shared prefix (-1) the first positions"
        )


def keep_mask(sw: SinkWindow, q_idx, q_doc, q_pos, kv_idx, kv_doc, kv_pos, kv_pinned, kv_valid) -> torch.Tensor:
    """[B, Tq, S] bool from per-row query arrays [B, Tq] and key arrays [B, S] (indices along the row,
    document ids, document positions; pinned and valid flags of the keys)."""
    qi, ki = q_idx[:, :, None], kv_idx[:, None, :]
    keep = (ki <= qi) & kv_valid[:, None, :]
    keep &= (q_doc[:, :, None] == kv_doc[:, None, :]) | (kv_doc[:, None, :] == SHARED_DOC)
    if sw.window > 0:
        near = (q_pos[:, :, None] - kv_pos[:, None, :]) < sw.window
        near |= (kv_pos < sw.sinks)[:, None, :]
        if kv_pinned is not None:
            near |= kv_pinned[:, None, :]
        keep &= near
    return keep


class KVBuffer:
    """Keys and values of B session rows for every layer, [B, KVH, capacity, D] each, and each column's
    position in its session, pos [B, capacity] (-1 = an empty or padding column, never kept). A row's
    columns are its session's kept keys (right-padded to the longest row), then the columns of each call.

    The engine `push`es a call's positions before running the model; each layer then `extend`s its keys
    into those columns. `compact` keeps only the columns a mask still needs (eviction under the
    sink-window mask), `row` reads one session's keys back, `select` drops rows that stopped."""

    def __init__(self, rows: Sequence[Optional[list]], pos: torch.Tensor, capacity: int):
        B, S0 = pos.shape
        self.rows: Optional[Sequence[Optional[list]]] = rows  # per row, per layer (K [KVH, n, D], V) or None
        self.capacity = max(capacity, S0)
        self.pos = torch.full((B, self.capacity), -1, dtype=torch.long)
        self.pos[:, :S0] = pos
        self.start = S0  # columns filled from the rows
        self.length = S0  # columns whose positions are set (pushed)
        self.k: Dict[int, torch.Tensor] = {}
        self.v: Dict[int, torch.Tensor] = {}
        self.filled: Dict[int, int] = {}  # per layer, columns holding keys

    def push(self, new_pos: torch.Tensor) -> None:
        """Reserves the next Tq columns for a call's tokens at positions new_pos [B, Tq] (-1 = padding)."""
        T = new_pos.shape[1]
        if self.length + T > self.capacity:
            self._resize(max(2 * self.capacity, self.length + T))
        self.pos[:, self.length: self.length + T] = new_pos
        self.length += T

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Appends this call's k, v [B, KVH, Tq, D]; returns the layer's filled keys and values [B, KVH, S, D]."""
        if layer not in self.k:
            B, KVH, _, D = k.shape
            K = k.new_zeros((B, KVH, self.capacity, D))
            V = v.new_zeros((B, KVH, self.capacity, D))
            for b, kv in enumerate(self.rows or []):
                if kv:
                    n = kv[layer][0].shape[1]
                    K[b, :, :n] = kv[layer][0]
                    V[b, :, :n] = kv[layer][1]
            self.k[layer], self.v[layer], self.filled[layer] = K, V, self.start
        n, T = self.filled[layer], k.shape[2]
        if n + T != self.length:
            raise AttentionError(f"KV buffer: layer {layer} writes {T} columns at {n}, but {self.length} are pushed; the engine must push each call's positions first")
        self.k[layer][:, :, n: n + T] = k
        self.v[layer][:, :, n: n + T] = v
        self.filled[layer] = n + T
        return self.k[layer][:, :, : n + T], self.v[layer][:, :, : n + T]

    def compact(self, keep: torch.Tensor, headroom: int) -> None:
        """Keeps the columns where keep [B, length] is true (in order, left-aligned per row), with room for
        `headroom` more; the others' keys are freed. Every layer must hold its keys (a model call ran)."""
        if not self.k:
            raise AttentionError("KV buffer: compact before any model call; the engine must run the model first")
        keep = keep & (self.pos[:, : self.length] >= 0)
        n = int(keep.sum(-1).max()) if keep.numel() else 0
        order = torch.argsort((~keep).to(torch.int8), dim=-1, stable=True)[:, :n]  # [B, n] kept columns first
        took = keep.gather(1, order)
        cap = n + headroom
        pos = torch.full((keep.shape[0], cap), -1, dtype=torch.long)
        pos[:, :n] = torch.where(took, self.pos.gather(1, order), -1)
        for l in self.k:
            idx = order.to(self.k[l].device)[:, None, :, None].expand(-1, self.k[l].shape[1], -1, self.k[l].shape[3])
            for store in (self.k, self.v):
                old = store[l]
                new = old.new_zeros((old.shape[0], old.shape[1], cap, old.shape[3]))
                new[:, :, :n] = old.gather(2, idx)
                store[l] = new
            self.filled[l] = n
        self.pos, self.capacity, self.length, self.start, self.rows = pos, cap, n, n, None

    def row(self, b: int) -> Tuple[list, torch.Tensor]:
        """Row b's keys and values at its positions, per layer (K [KVH, n, D], V), and the positions [n]
        (ascending): a session's cache."""
        cols = torch.nonzero(self.pos[b, : self.length] >= 0).squeeze(-1)
        dev = cols.to(next(iter(self.k.values())).device)
        kv = [(self.k[l][b][:, dev].contiguous(), self.v[l][b][:, dev].contiguous()) for l in sorted(self.k)]
        return kv, self.pos[b, cols].clone()

    def select(self, rows: torch.Tensor) -> None:
        """Keeps only these rows (in this order)."""
        if self.rows is not None and not self.k:
            self.rows = [self.rows[int(r)] for r in rows]
        else:
            self.rows = None
        self.pos = self.pos.index_select(0, rows)
        for l in self.k:
            self.k[l] = self.k[l].index_select(0, rows.to(self.k[l].device))
            self.v[l] = self.v[l].index_select(0, rows.to(self.v[l].device))

    def _resize(self, cap: int) -> None:
        pos = torch.full((self.pos.shape[0], cap), -1, dtype=torch.long)
        pos[:, : self.length] = self.pos[:, : self.length]
        self.pos = pos
        for store in (self.k, self.v):
            for l, old in store.items():
                new = old.new_zeros((old.shape[0], old.shape[1], cap, old.shape[3]))
                new[:, :, : self.filled[l]] = old[:, :, : self.filled[l]]
                store[l] = new
        self.capacity = cap


@dataclass
class AttentionPass:
    """What one model call attends to: keep [B, Tq, S], and the KV buffer its keys go to (None: the
    call's own keys only, S = Tq)."""
    keep: torch.Tensor
    kernel: str
    kv: Optional[KVBuffer] = None
    block_mask: object = None


_active: List[AttentionPass] = []


@contextlib.contextmanager
def attention_pass(p: AttentionPass):
    _active.append(p)
    try:
        yield p
    finally:
        _active.pop()


def sinkflex_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface: query [B, H, Tq, D], key/value [B, KVH, Tq, D] (this call's
    tokens, after RoPE) -> ([B, Tq, H, D], None). The mask comes from the active AttentionPass."""
    if not _active:
        raise AttentionError("the model ran outside an engine call (no attention mask is set); call it through TorchEngine")
    p = _active[-1]
    if p.kv is not None:
        key, value = p.kv.extend(module.layer_idx, key, value)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    sinks = getattr(module, "sinks", None)
    if p.kernel == "flex":
        out = flex_forward(p, query, key, value, scale, sinks)
    else:
        out = eager_forward(p.keep, query, key, value, scale, sinks)
    return out.transpose(1, 2).contiguous(), None


def eager_forward(keep, query, key, value, scale, sinks) -> torch.Tensor:
    """[B, H, Tq, D] with an explicit mask; with sink logits, a softmax over the scores and one sink
    column (value 0) per head."""
    H, KVH = query.shape[1], key.shape[1]
    mask = keep[:, None].to(query.device)
    if sinks is None:
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale, enable_gqa=H != KVH)
    if H != KVH:
        key = key.repeat_interleave(H // KVH, dim=1)
        value = value.repeat_interleave(H // KVH, dim=1)
    scores = (query @ key.transpose(-1, -2)).float() * scale  # [B, H, Tq, S]
    scores = scores.masked_fill(~mask, float("-inf"))
    B, _, Tq, _ = scores.shape
    sink = sinks.float()[None, :, None, None].expand(B, H, Tq, 1)
    probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return (probs.to(value.dtype) @ value)


def flex_forward(p: AttentionPass, query, key, value, scale, sinks) -> torch.Tensor:
    """[B, H, Tq, D] with FlexAttention and a block mask from the keep mask (built once per call); a sink
    logit scales each row by exp(lse) / (exp(lse) + exp(s_h)) = sigmoid(lse - s_h)."""
    from torch.nn.attention.flex_attention import create_block_mask

    S = key.shape[2]
    if p.block_mask is None or p.block_mask.shape[-1] != S:
        keep = p.keep.to(query.device)
        B, Tq = keep.shape[0], keep.shape[1]
        p.block_mask = create_block_mask(lambda b, h, q, kv: keep[b, q, kv], B=B, H=None, Q_LEN=Tq, KV_LEN=S, device=query.device)
    out, lse = _flex_lse(query, key, value, p.block_mask, scale)
    if sinks is not None:
        out = out * torch.sigmoid(lse.float() - sinks.float()[None, :, None])[..., None].to(out.dtype)
    return out


def _flex_lse(query, key, value, block_mask, scale):
    """(out, lse) from flex_attention: return_aux in recent torch, return_lse before it."""
    gqa = query.shape[1] != key.shape[1]
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:
        return _flex()(query, key, value, block_mask=block_mask, scale=scale, enable_gqa=gqa, return_lse=True)
    out, aux = _flex()(query, key, value, block_mask=block_mask, scale=scale, enable_gqa=gqa, return_aux=AuxRequest(lse=True))
    return out, aux.lse


_flex_fn = None


def _flex():
    """flex_attention, compiled on CUDA (its fused kernel); as is on the CPU (forward only there)."""
    global _flex_fn
    if _flex_fn is None:
        from torch.nn.attention.flex_attention import flex_attention

        _flex_fn = torch.compile(flex_attention, dynamic=True) if torch.cuda.is_available() else flex_attention
    return _flex_fn


def flex_available() -> Optional[str]:
    """None when FlexAttention imports here, else why not."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except Exception as e:  # an older torch
        return f"torch {torch.__version__} has no FlexAttention ({e})"
    return None


def choose_kernel(asked: str, device: torch.device) -> Tuple[str, str]:
    """(kernel, why): "auto" is flex on CUDA when torch has it, else eager (FlexAttention has no backward
    on the CPU)."""
    if asked not in KERNELS:
        raise AttentionError(f"attention kernel must be one of {', '.join(KERNELS)} (got {asked!r})")
    missing = flex_available()
    if asked == "flex":
        if missing:
            raise AttentionError(f"--attention-kernel flex: {missing}; use eager")
        if device.type != "cuda":
            raise AttentionError("--attention-kernel flex: FlexAttention has no backward pass on the CPU; use eager (or auto) there")
        return "flex", "asked for"
    if asked == "eager":
        return "eager", "asked for"
    if device.type == "cuda" and not missing:
        return "flex", "auto: CUDA with FlexAttention"
    return "eager", f"auto: {missing or 'FlexAttention has no backward pass on the CPU'}"


def register() -> str:
    """Registers the attention function with transformers; returns its name for attn_implementation."""
    from transformers import AttentionInterface

    AttentionInterface.register("sinkflex", sinkflex_attention)
    return "sinkflex"
