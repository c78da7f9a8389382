"""The worker's engine: one Hugging Face causal LM (transformers, fp32 weights; bf16 autocast on CUDA),
its KV-cache sessions, sampling, teacher-forced log-probs, the two halves of forwardBackward, AdamW and
checkpoints. Shapes: B sequences, T tokens (padded), V vocabulary.

Under torchrun (distributed.py) every rank holds one engine over an FSDP2-sharded model and runs the
same ops: sampling and log-probs compute every sequence on every rank, forward/backward split the
sequences across ranks (gradients summed by the reduce-scatter), save gathers the full weights.

It runs full causal attention only: a checkpoint saved with a sink-window mask (sinkflex_attention.json
with window > 0) is refused. It does not know sockets or frames (server.py) nor any loss: backward
receives dLoss/dLogprobs from the caller.
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

META_FILE = "sinkflex.json"
OPTIMIZER_FILE = "sinkflex_optimizer.pt"
ATTENTION_FILE = "sinkflex_attention.json"
TOKENIZER_FILE = re.compile(
    r"^(tokenizer.*|vocab.*|merges\.txt|special_tokens_map\.json|added_tokens\.json|chat_template\.(jinja|json)|sinkflex-vocab.*)$"
)


class EngineError(Exception):
    """A request the engine cannot serve (bad input or state); the message says what to do."""


@dataclass
class Session:
    tokens: List[int] = field(default_factory=list)
    cache: object = None
    """Keys and values of tokens[:cached] (a transformers Cache), or None."""
    cached: int = 0
    logits: Optional[torch.Tensor] = None
    """[V] fp32 logits after tokens[len-1], valid when logits_for == len(tokens)."""
    logits_for: int = -1


@dataclass
class PendingForward:
    handle: int
    logprobs: torch.Tensor  # [B, T-1] with graph
    valid: torch.Tensor  # [B, T-1] bool: real predictions (not padding)
    scored: Optional[torch.Tensor]  # [B, T-1] bool, or None = all
    lengths: List[int]  # of the rows computed here
    rows: List[int]  # which of the request's sequences they are (all of them without FSDP)
    all_lengths: List[int]  # every sequence's length in the request


def _crop(cache, n: int):
    """The cache cut to its first n entries (None when it cannot be cut in place: recompute instead)."""
    if cache is None or n <= 0 or not hasattr(cache, "crop"):
        return None
    drop = int(cache.get_seq_length()) - n
    if drop > 0:
        cache.crop(-drop)  # a negative count removes that many entries (every transformers release with crop)
    return cache


def _forward_kwargs(model, cache, pos: torch.Tensor) -> dict:
    """The cache arguments under this transformers' names (`cache` in 5.x, `past_key_values` before)."""
    params = inspect.signature(model.forward).parameters
    kw = {"cache": cache} if "cache" in params else {"past_key_values": cache}
    if "cache_position" in params:
        kw["cache_position"] = pos
    if "logits_to_keep" in params:
        kw["logits_to_keep"] = 1
    return kw


class TorchEngine:
    def __init__(self, device: str = "cpu", autocast: Optional[str] = None, dist=None):
        self.device = torch.device(device)
        self.dist = dist  # distributed.Dist under torchrun, else None
        if autocast is None:
            autocast = "bf16" if self.device.type == "cuda" else "off"
        if autocast not in ("off", "bf16"):
            raise EngineError(f"autocast must be 'off' or 'bf16' (got {autocast!r})")
        self.autocast = autocast
        self.model = None
        self.vocab_size = 0
        self.policy_version = 0
        self.optimizer: Optional[torch.optim.AdamW] = None
        self.optimizer_step = 0
        self.source_dir: Optional[str] = None
        self.attention_record: Optional[dict] = None
        self.generator = torch.Generator(device="cpu").manual_seed(0)
        self.pending: Optional[PendingForward] = None
        self.next_handle = 1

    # ---- checkpoints ------------------------------------------------------------------------------------

    def load(self, directory: str) -> dict:
        from transformers import AutoModelForCausalLM

        if not os.path.isfile(os.path.join(directory, "config.json")):
            raise EngineError(f"{directory}: no config.json; pass a Hugging Face checkpoint folder")
        attention = None
        apath = os.path.join(directory, ATTENTION_FILE)
        if os.path.isfile(apath):
            with open(apath) as f:
                attention = json.load(f)
            if int(attention.get("window", 0)) != 0:
                raise EngineError(
                    f"{apath}: the checkpoint was trained with sink-window attention (window {attention.get('window')}, "
                    f"sinks {attention.get('sinks')}); the torch engine runs full attention only: use the embedded engine"
                )
        try:
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
        except TypeError:
            model = AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.float32)
        model.to(self.device)
        model.eval()  # no dropout: training and sampling see the same function
        if self.dist is not None:
            from .distributed import shard

            shard(model)
        self.model = model
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        meta = {}
        mpath = os.path.join(directory, META_FILE)
        if os.path.isfile(mpath):
            with open(mpath) as f:
                meta = json.load(f)
        self.policy_version = int(meta.get("policyVersion", 0))
        self.optimizer = None
        self.optimizer_step = 0
        opath = os.path.join(directory, OPTIMIZER_FILE)
        if os.path.isfile(opath) and self.dist is not None:
            import sys

            sys.stderr.write(f"sinkflex_worker: {opath} is not restored under FSDP (a fresh AdamW starts)\n")
        elif os.path.isfile(opath):  # the AdamW moments a checkpoint saved with its optimizer (exact resume)
            saved = torch.load(opath, map_location=self.device, weights_only=True)
            self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
            self.optimizer.load_state_dict(saved["state"])
            self.optimizer_step = int(saved.get("step", 0))
        self.source_dir = directory
        self.attention_record = attention
        self.pending = None
        return {
            "vocabSize": self.vocab_size,
            "policyVersion": self.policy_version,
            "parameters": sum(p.numel() for p in model.parameters()),
            "architecture": type(model).__name__,
        }

    def reset_optimizer(self) -> None:
        """A fresh AdamW at the next step (its moments and step count dropped); gradients dropped too."""
        model = self._model()
        self.pending = None
        self.optimizer = None
        self.optimizer_step = 0
        for p in model.parameters():
            p.grad = None

    def save(self, directory: str, optimizer: bool = False) -> None:
        """A Hugging Face folder; with `optimizer`, the AdamW state as well (sinkflex_optimizer.pt)."""
        model = self._model()
        full = None
        if self.dist is not None:  # every rank enters the gather; rank 0 writes the folder
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            if self.dist.rank != 0:
                return
            optimizer = False  # the sharded AdamW state is not written (see load)
        parent = os.path.dirname(os.path.abspath(directory))
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".sinkflex-save-", dir=parent)
        try:
            if full is not None:
                model.save_pretrained(tmp, state_dict=full, safe_serialization=True)
            else:
                model.save_pretrained(tmp, safe_serialization=True)
            with open(os.path.join(tmp, META_FILE), "w") as f:
                json.dump({"policyVersion": self.policy_version, "optimizerStep": self.optimizer_step}, f, indent=2)
            if optimizer and self.optimizer is not None:
                torch.save({"state": self.optimizer.state_dict(), "step": self.optimizer_step}, os.path.join(tmp, OPTIMIZER_FILE))
            if self.attention_record is not None:
                with open(os.path.join(tmp, ATTENTION_FILE), "w") as f:
                    json.dump(self.attention_record, f, indent=2)
            if self.source_dir and os.path.isdir(self.source_dir):
                for name in os.listdir(self.source_dir):
                    if TOKENIZER_FILE.match(name):
                        shutil.copyfile(os.path.join(self.source_dir, name), os.path.join(tmp, name))
            if os.path.exists(directory):
                shutil.rmtree(directory)
            os.replace(tmp, directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    # ---- sessions ---------------------------------------------------------------------------------------

    def check_ids(self, ids: Sequence[int], what: str) -> None:
        self._model()
        if len(ids) and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = next(i for i in ids if i < 0 or i >= self.vocab_size)
            raise EngineError(f"{what}: token id {bad} is outside the vocabulary [0, {self.vocab_size})")

    def fork(self, s: Session) -> Session:
        return Session(
            tokens=list(s.tokens), cache=copy.deepcopy(s.cache), cached=s.cached,
            logits=s.logits, logits_for=s.logits_for,
        )

    def truncate(self, s: Session, n: int) -> None:
        if n >= len(s.tokens):
            return
        del s.tokens[n:]
        if s.cached > n:
            s.cache = _crop(s.cache, n)
            s.cached = n if s.cache is not None else 0
        if s.logits_for > n:
            s.logits_for = -1
            s.logits = None

    def _autocast(self):
        if self.autocast == "bf16" and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @torch.no_grad()
    def next_logits(self, s: Session) -> torch.Tensor:
        """Logits [V] (fp32, CPU) after the session's last token; computes its pending tokens."""
        from transformers import DynamicCache

        if s.logits_for == len(s.tokens) and s.logits is not None:
            return s.logits
        if not s.tokens:
            raise EngineError("the session is empty; append a prompt first")
        if s.cached == len(s.tokens):  # the last token is cached but its logits are gone: recompute it
            s.cache = _crop(s.cache, s.cached - 1)
            s.cached = s.cached - 1 if s.cache is not None else 0
        if s.cache is None:
            s.cache = DynamicCache()
            s.cached = 0
        new = s.tokens[s.cached:]
        ids = torch.tensor([new], dtype=torch.long, device=self.device)
        pos = torch.arange(s.cached, len(s.tokens), device=self.device)
        with self._autocast():
            out = self.model(input_ids=ids, use_cache=True, position_ids=pos[None], **_forward_kwargs(self.model, s.cache, pos))
        s.cached = len(s.tokens)
        s.logits = out.logits[0, -1].float().cpu()
        s.logits_for = len(s.tokens)
        return s.logits

    def sample(self, s: Session, p: dict, stop: Sequence[int]) -> dict:
        """Samples up to p['maxTokens'] tokens into the session (see SampleParams in src/engine/types.ts)."""
        temperature = float(p.get("temperature", 1.0))
        top_p = float(p.get("topP", 1.0))
        top_k = int(p.get("topK", 0))
        max_tokens = int(p["maxTokens"])
        limit = int(p.get("limit", 0))  # ids at or past it (padding rows of the embedding) are never sampled
        seed = p.get("seed")
        gen = self.generator if seed is None else torch.Generator(device="cpu").manual_seed(int(seed) & 0xFFFFFFFFFFFF)
        stops = set(int(t) for t in stop)
        tokens: List[int] = []
        logprobs: List[float] = []
        finish = "length"
        for _ in range(max_tokens):
            logits = self.next_logits(s)
            if 0 < limit < logits.shape[0]:
                logits = logits[:limit]
            tok, lp = pick(logits, temperature, top_p, top_k, gen)
            tokens.append(tok)
            logprobs.append(lp)
            s.tokens.append(tok)
            s.logits_for = -1
            s.logits = None
            if tok in stops:
                finish = "stop"
                break
        return {"tokens": tokens, "logprobs": logprobs, "finishReason": finish}

    # ---- scoring and training ---------------------------------------------------------------------------

    def _batch(self, seqs: List[np.ndarray]):
        for i, q in enumerate(seqs):
            if len(q) == 0:
                raise EngineError(f"sequence {i} is empty")
            self.check_ids(q.tolist(), f"sequence {i}")
        T = max(len(q) for q in seqs)
        ids = torch.zeros((len(seqs), T), dtype=torch.long)
        att = torch.zeros((len(seqs), T), dtype=torch.long)
        for i, q in enumerate(seqs):
            ids[i, : len(q)] = torch.from_numpy(q.astype(np.int64))
            att[i, : len(q)] = 1
        return ids.to(self.device), att.to(self.device)

    def _token_logprobs(self, ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """[B, T-1]: log p(ids[:, t+1] | ids[:, :t+1]) at temperature 1 (padding rows are garbage)."""
        T = ids.shape[1]
        pos = torch.arange(T, device=self.device)[None].expand(ids.shape[0], T)
        with self._autocast():
            logits = self.model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False).logits
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        return logp.gather(-1, ids[:, 1:, None]).squeeze(-1)

    def logprobs(self, seqs: List[np.ndarray], scored: Optional[List[np.ndarray]]) -> np.ndarray:
        self._model()
        with torch.no_grad():
            ids, att = self._batch(seqs)
            if ids.shape[1] < 2:
                return np.zeros(0, dtype=np.float32)
            lp = self._token_logprobs(ids, att).cpu()
        return _flatten(lp, [len(q) for q in seqs], scored)

    def forward(self, seqs: List[np.ndarray], scored: Optional[List[np.ndarray]]) -> tuple:
        """The first half of forwardBackward: log-probs with the graph kept until backward (or the next forward).
        Under FSDP each rank computes the sequences i with i % world == rank (a rank with none runs a
        2-token stand-in that gets no gradient) and the log-probs are gathered."""
        self._model()
        self.pending = None
        if not seqs:
            raise EngineError("forwardBackward: no sequences")
        for i, q in enumerate(seqs):
            if len(q) == 0:
                raise EngineError(f"sequence {i} is empty")
        rows = list(range(len(seqs)))
        if self.dist is not None:
            rows = rows[self.dist.rank::self.dist.world]
        mine = [seqs[i] for i in rows] or [np.zeros(2, np.int32)]
        ids, att = self._batch(mine)
        lengths = [len(q) for q in mine]
        with torch.enable_grad():
            lp = self._token_logprobs(ids, att) if ids.shape[1] >= 2 else torch.zeros((len(mine), 0), device=self.device)
        valid = att[:, 1:].bool() if ids.shape[1] >= 2 else torch.zeros((len(mine), 0), dtype=torch.bool, device=self.device)
        sc = None
        my_scored = [scored[i] for i in rows] if scored is not None and rows else None
        if my_scored is not None:
            sc = torch.zeros_like(valid)
            for i, m in enumerate(my_scored):
                sc[i, : len(m)] = torch.from_numpy(m != 0)
        handle = self.next_handle
        self.next_handle += 1
        self.pending = PendingForward(handle, lp, valid, sc, lengths, rows, [len(q) for q in seqs])
        flat = _flatten(lp.detach().cpu(), lengths, my_scored)
        if self.dist is None:
            return handle, flat
        # Every rank's rows and their log-probs, put back in the request's order.
        parts = self.dist.all_gather((rows, flat))
        out = np.zeros(sum(len(q) - 1 for q in seqs), dtype=np.float32)
        starts = np.concatenate([[0], np.cumsum([len(q) - 1 for q in seqs])]).astype(np.int64)
        for r_rows, r_flat in parts:
            off = 0
            for i in r_rows:
                n = len(seqs[i]) - 1
                out[starts[i]: starts[i] + n] = r_flat[off: off + n]
                off += n
        return handle, out

    def backward(self, handle: int, dlogprobs: np.ndarray) -> None:
        """The second half: applies dLoss/dLogprobs ([sum(L-1)] flat, every sequence's) to the kept graph
        (this rank's rows of it under FSDP); gradients accumulate."""
        pf = self.pending
        if pf is None or pf.handle != handle:
            raise EngineError(f"backward: forward {handle} is not pending (each forward gets one backward, and a newer forward replaces it)")
        self.pending = None
        expected = sum(n - 1 for n in pf.all_lengths)
        if dlogprobs.shape[0] != expected:
            raise EngineError(f"backward: {dlogprobs.shape[0]} gradient values for {expected} predictions")
        if not np.all(np.isfinite(dlogprobs)):
            raise EngineError("backward: dLogprobs holds a non-finite value; check the loss")
        starts = np.concatenate([[0], np.cumsum([n - 1 for n in pf.all_lengths])]).astype(np.int64)
        grad = torch.zeros(pf.logprobs.shape, dtype=torch.float32)
        for k, i in enumerate(pf.rows):
            n = pf.all_lengths[i] - 1
            grad[k, :n] = torch.from_numpy(np.asarray(dlogprobs[starts[i]: starts[i] + n], dtype=np.float32))
        if pf.scored is not None and bool(((grad != 0) & ~pf.scored.cpu()).any()):
            raise EngineError("backward: dLogprobs gives gradient to a prediction that masks.scored leaves out")
        if self.dist is not None:  # FSDP averages over ranks; each rank's share, times the world, sums them
            grad *= self.dist.world
        pf.logprobs.backward(grad.to(self.device))

    def release(self) -> None:
        self.pending = None

    def optim_step(self, h: dict) -> float:
        """AdamW (torch.optim.AdamW, one parameter group) after global-norm clipping; returns the pre-clip norm."""
        model = self._model()
        self.pending = None
        lr = float(h["lr"])
        beta1 = float(h.get("beta1", 0.9))
        beta2 = float(h.get("beta2", 0.999))
        eps = float(h.get("eps", 1e-8))
        wd = float(h.get("weightDecay", 0.01))
        clip = float(h.get("maxGradNorm", 0.0))
        if not (math.isfinite(lr) and lr >= 0):
            raise EngineError(f"AdamW: lr must be a finite number >= 0 (got {lr})")
        if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
            raise EngineError(f"AdamW: beta1 and beta2 must be in [0, 1) (got {beta1}, {beta2})")
        if not (eps > 0 and wd >= 0 and clip >= 0):
            raise EngineError(f"AdamW: eps must be > 0, weightDecay >= 0, maxGradNorm >= 0 (got {eps}, {wd}, {clip})")
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        norm = self._grad_norm(params)
        if not math.isfinite(norm):
            for p in params:
                p.grad.zero_()
            raise EngineError(f"optimStep: the gradient norm is {norm}; the step was skipped and gradients dropped")
        if clip > 0:
            scale = min(1.0, clip / (norm + 1e-6))
            if scale < 1:
                for p in params:
                    p.grad.mul_(scale)
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd)
        for g in self.optimizer.param_groups:
            g.update(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_step += 1
        self.policy_version += 1
        return norm

    def _grad_norm(self, params) -> float:
        """The global L2 norm of the gradients (of every rank's shards under FSDP)."""
        local = lambda g: g.to_local() if hasattr(g, "to_local") else g  # noqa: E731 (DTensor shards)
        sq = torch.zeros((), dtype=torch.float32, device=self.device)
        for p in params:
            sq += local(p.grad).float().pow(2).sum()
        if self.dist is not None:
            self.dist.all_reduce_sum(sq)
        return float(sq.sqrt())

    def _model(self):
        if self.model is None:
            raise EngineError("no model is loaded; send load first")
        return self.model


def _flatten(lp: torch.Tensor, lengths: List[int], scored: Optional[List[np.ndarray]]) -> np.ndarray:
    out = np.zeros(sum(n - 1 for n in lengths), dtype=np.float32)
    off = 0
    arr = lp.float().numpy()
    for i, n in enumerate(lengths):
        row = arr[i, : n - 1]
        if scored is not None:
            row = np.where(scored[i] != 0, row, 0.0)
        out[off: off + n - 1] = row
        off += n - 1
    return out


def pick(logits: torch.Tensor, temperature: float, top_p: float, top_k: int, gen: torch.Generator) -> tuple:
    """One token from logits [V] and its log-prob under the distribution sampled (after truncation)."""
    if temperature == 0:
        return int(torch.argmax(logits)), 0.0
    x = logits.double() / temperature
    V = x.shape[0]
    keep = torch.ones(V, dtype=torch.bool)
    if 0 < top_k < V:
        kth = torch.topk(x, top_k).values[-1]
        keep &= x >= kth
        if int(keep.sum()) > top_k:  # ties at the k-th value: keep the lowest ids among them
            idx = torch.nonzero(keep).squeeze(-1)
            order = torch.argsort(-x[idx], stable=True)[:top_k]
            keep = torch.zeros(V, dtype=torch.bool)
            keep[idx[order]] = True
    if top_p < 1:
        xs = torch.where(keep, x, torch.tensor(-math.inf, dtype=x.dtype))
        probs = torch.softmax(xs, dim=-1)
        order = torch.argsort(-probs, stable=True)
        cum = torch.cumsum(probs[order], dim=0)
        n = int(torch.searchsorted(cum, torch.tensor([top_p], dtype=cum.dtype))[0]) + 1
        keep = torch.zeros(V, dtype=torch.bool)
        keep[order[: min(n, V)]] = True
    xs = torch.where(keep, x, torch.tensor(-math.inf, dtype=x.dtype))
    logp = torch.log_softmax(xs, dim=-1)
    tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
    return tok, float(logp[tok])
