"""The worker's engine: one Hugging Face causal LM (transformers, fp32 weights; bf16 autocast on CUDA),
its KV-cache sessions, sampling, teacher-forced log-probs, the two halves of forwardBackward, AdamW and
checkpoints. Shapes: B sequences, T tokens (padded), V vocabulary.

Under torchrun (distributed.py) every rank holds one engine over an FSDP2-sharded model and runs the
same ops: sampling and log-probs compute every sequence on every rank, forward/backward split the
sequences across ranks (gradients summed by the reduce-scatter), save gathers the full weights.

Attention is the embedded engine's: the checkpoint's sink-window mask (sinkflex_attention.json), its
per-head sink logits when it has them, document ids and pinned positions (attention.py). Sessions keep
their own keys and values (per layer [KVH, n, D], with each key's position; the model runs with
use_cache=False); under the sink-window mask they evict as the embedded engine's sessions do (their sink
slots, pinned positions and last W positions stay), and `sample_batch` decodes several sessions in one
forward per token. A LoRA adapter (peft, lora.py) may train instead of the weights. It does not know
sockets or frames (server.py) nor any loss: backward receives dLoss/dLogprobs from the caller.
"""
from __future__ import annotations

import contextlib
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

from . import lora as lora_files
from .attention import (
    ATTENTION_FILE, AttentionError, AttentionPass, KVBuffer, SinkWindow, attach_sink_logits, attention_pass, check_doc_ids,
    choose_kernel, document_positions, keep_mask, read_sink_window, register, sink_logit_tensors,
)

META_FILE = "sinkflex.json"
OPTIMIZER_FILE = "sinkflex_optimizer.pt"
SINK_PROFILE_FILE = "sinkflex_sink_profile.json"
"""The sink profile a policy was laid out with (attention.mode profile, measured on the embedded engine):
read at load, answered to the client (its pin rule) and written back by save, as is."""
TOKENIZER_FILE = re.compile(
    r"^(tokenizer.*|vocab.*|merges\.txt|special_tokens_map\.json|added_tokens\.json|chat_template\.(jinja|json)|sinkflex-vocab.*)$"
)


class EngineError(Exception):
    """A request the engine cannot serve (bad input or state); the message says what to do."""


@dataclass
class Session:
    tokens: List[int] = field(default_factory=list)
    pinned: List[int] = field(default_factory=list)
    """Positions pinned by append (ascending): under the sink-window mask every later query keeps them."""
    kv: Optional[list] = None
    """Keys and values of the kept positions among tokens[:cached], per layer (K [KVH, n, D], V); never
    written in place, so forks share them."""
    kv_pos: Optional[torch.Tensor] = None
    """[n] the positions (ascending) of kv's columns: every computed one under full attention; under the
    sink-window mask the sink slots, the pinned positions and the last W computed ones."""
    cached: int = 0
    evicted_to: int = 0
    """Under the sink-window mask, the keys of positions below it that are neither sink slots nor pinned
    were evicted (0: none)."""
    logits: Optional[torch.Tensor] = None
    """[V] fp32 logits after tokens[len-1], valid when logits_for == len(tokens)."""
    logits_for: int = -1

    def drop_cache(self) -> None:
        """Forgets the keys, values and logits (computed again on next use): the weights changed."""
        self.kv, self.kv_pos, self.cached, self.evicted_to, self.logits, self.logits_for = None, None, 0, 0, None, -1

    def keep_cached(self, n: int) -> None:
        """Keeps the keys and values of positions below n only (the first n tokens computed)."""
        if self.kv is None or n <= 0:
            self.kv, self.kv_pos, self.cached, self.evicted_to = None, None, 0, 0
        elif n < self.cached:
            sel = self.kv_pos < n
            if not bool(sel.all()):
                dev = torch.nonzero(sel).squeeze(-1).to(self.kv[0][0].device)
                self.kv = [(k[:, dev], v[:, dev]) for k, v in self.kv]
                self.kv_pos = self.kv_pos[sel]
            self.cached = n

    @property
    def kept_positions(self) -> int:
        """Positions whose keys and values the session holds."""
        return 0 if self.kv_pos is None else int(self.kv_pos.shape[0])

    @property
    def kv_bytes(self) -> int:
        """Bytes of the keys and values the session holds (every layer; shared with forks)."""
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in (self.kv or []))


@dataclass
class PendingForward:
    handle: int
    logprobs: torch.Tensor  # [B, T-1] with graph
    valid: torch.Tensor  # [B, T-1] bool: real predictions (not padding)
    scored: Optional[torch.Tensor]  # [B, T-1] bool, or None = all
    lengths: List[int]  # of the rows computed here
    rows: List[int]  # which of the request's sequences they are (all of them without FSDP)
    all_lengths: List[int]  # every sequence's length in the request


@dataclass
class SequenceMasks:
    """Per-sequence mask inputs of logprobs/forward (src/engine/types.ts SequenceMasks): [L] document ids,
    [L] pinned flags, [L-1] scored flags; None = default."""
    doc_ids: Optional[List[np.ndarray]] = None
    pinned: Optional[List[np.ndarray]] = None
    scored: Optional[List[np.ndarray]] = None

    def rows(self, rows: List[int]) -> "SequenceMasks":
        pick = lambda a: None if a is None else [a[i] for i in rows]  # noqa: E731
        return SequenceMasks(pick(self.doc_ids), pick(self.pinned), pick(self.scored))


def _logits_kwargs(model) -> dict:
    """Only the last position's logits, where this transformers can be asked for that."""
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


@contextlib.contextmanager
def _replaced_folder(directory: str):
    """Yields a new folder beside `directory`; when the block ends without an error it replaces
    `directory` at once (a crash mid-save leaves the old folder whole), otherwise it is removed."""
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".sinkflex-save-", dir=parent)
    try:
        yield tmp
        if os.path.exists(directory):
            shutil.rmtree(directory)
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _copy_tokenizer_files(source: str, target: str) -> None:
    """The checkpoint's tokenizer and template files, copied from `source` into `target`."""
    for name in os.listdir(source):
        if TOKENIZER_FILE.match(name):
            shutil.copyfile(os.path.join(source, name), os.path.join(target, name))


class TorchEngine:
    def __init__(self, device: str = "cpu", autocast: Optional[str] = None, dist=None, attention_kernel: str = "auto"):
        self.device = torch.device(device)
        self.dist = dist  # distributed.Dist under torchrun, else None
        if autocast is None:
            autocast = "bf16" if self.device.type == "cuda" else "off"
        if autocast not in ("off", "bf16"):
            raise EngineError(f"autocast must be 'off' or 'bf16' (got {autocast!r})")
        self.autocast = autocast
        try:
            self.kernel, self.kernel_reason = choose_kernel(attention_kernel, self.device)
        except AttentionError as e:
            raise EngineError(str(e))
        self.model = None
        self.vocab_size = 0
        self.policy_version = 0
        self.optimizer: Optional[torch.optim.AdamW] = None
        self.optimizer_step = 0
        self.source_dir: Optional[str] = None
        self.attention_record: Optional[dict] = None
        self.sink_profile: Optional[dict] = None
        self.lora: Optional[lora_files.LoraSpec] = None
        """The adapter trained instead of the weights (peft wraps the model), or None."""
        self.lora_base: Optional[str] = None
        self.sink_window = SinkWindow()
        self.sink_logits = False
        self.generator = torch.Generator(device="cpu").manual_seed(0)
        self.pending: Optional[PendingForward] = None
        self.next_handle = 1

    # ---- checkpoints ------------------------------------------------------------------------------------

    def load(self, directory: str) -> dict:
        """A checkpoint folder, or a PEFT LoRA adapter folder: its base checkpoint with the adapter on top
        (trained further by optim_step, as the embedded engine's loadEngine does)."""
        if not lora_files.is_adapter_dir(directory):
            self.lora, self.lora_base = None, None
            return self._load_checkpoint(directory)
        try:
            spec, base, meta = lora_files.read_adapter_config(directory)
        except lora_files.LoraError as e:
            raise EngineError(str(e))
        self.lora = None
        info = self._load_checkpoint(base)
        info = dict(info, **self.enable_lora(spec.describe()))
        try:
            lora_files.load_weights(self.model, spec, directory)
        except lora_files.LoraError as e:
            raise EngineError(str(e))
        self.policy_version = int(meta.get("policyVersion", 0))
        opath = os.path.join(directory, OPTIMIZER_FILE)
        if os.path.isfile(opath):
            self._load_optimizer(opath)
        info.update(policyVersion=self.policy_version, optimizerRestored=self.optimizer is not None)
        return info

    def enable_lora(self, spec: dict) -> dict:
        """Wraps the loaded model with a fresh LoRA adapter ({rank, alpha, targets}; B = 0, so the outputs
        are the base's); from then on only the adapter trains and save writes adapter folders."""
        model = self._model()
        if self.lora is not None:
            raise EngineError("enable_lora: this engine trains a LoRA adapter already; load the adapter's folder instead")
        if self.dist is not None:
            raise EngineError("LoRA is not supported under FSDP (torchrun); run one worker process")
        try:
            s = lora_files.LoraSpec.of(spec.get("rank"), spec.get("alpha"), spec.get("targets"), "lora")
            self.model = lora_files.attach(model, s)
        except lora_files.LoraError as e:
            raise EngineError(str(e))
        self.model.eval()
        self.lora, self.lora_base = s, self.source_dir
        self.optimizer, self.optimizer_step, self.pending = None, 0, None
        return {"lora": dict(s.describe(), trainable=lora_files.trainable_count(self.model))}

    def _load_checkpoint(self, directory: str) -> dict:
        from transformers import AutoModelForCausalLM

        if not os.path.isfile(os.path.join(directory, "config.json")):
            raise EngineError(f"{directory}: no config.json; pass a Hugging Face checkpoint folder")
        try:
            sink_window, attention = read_sink_window(directory)
            sinks = sink_logit_tensors(directory)
        except AttentionError as e:
            raise EngineError(str(e))
        if attention is not None and attention.get("sinkLogit") is True and not sinks:
            raise EngineError(f"{os.path.join(directory, ATTENTION_FILE)} says sinkLogit but the weights hold no model.layers.N.self_attn.sinks; save the checkpoint again with its sink logits")
        impl = register()
        try:
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation=impl)
        except TypeError:
            model = AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.float32, attn_implementation=impl)
        model.to(self.device)
        if sinks:
            try:
                attach_sink_logits(model, sinks)
            except AttentionError as e:
                raise EngineError(f"{directory}: {e}")
        model.eval()  # no dropout: training and sampling see the same function
        if self.dist is not None:
            from .distributed import shard

            shard(model)
        self.model = model
        self.sink_window = sink_window
        self.sink_logits = bool(sinks)
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
        if os.path.isfile(opath):  # the AdamW moments a checkpoint saved with its optimizer (exact resume)
            self._load_optimizer(opath)
        self.source_dir = directory
        self.attention_record = attention
        self.sink_profile = None
        ppath = os.path.join(directory, SINK_PROFILE_FILE)
        if os.path.isfile(ppath):
            try:
                with open(ppath) as f:
                    self.sink_profile = json.load(f)
            except ValueError as e:
                raise EngineError(f"{ppath}: not valid JSON ({e}); write the profile again (sinkflex sinks) or remove the file")
        self.pending = None
        return {
            "vocabSize": self.vocab_size,
            "policyVersion": self.policy_version,
            "parameters": sum(p.numel() for p in model.parameters()),
            "architecture": type(model).__name__,
            "attention": {"window": sink_window.window, "sinks": sink_window.sinks, "sinkLogit": self.sink_logits,
                          "kernel": self.kernel, "why": self.kernel_reason},
            "optimizerRestored": self.optimizer is not None,
            **({"sinkProfile": self.sink_profile} if self.sink_profile is not None else {}),
        }

    def _trainable(self) -> List[tuple]:
        return [(n, p) for n, p in self._model().named_parameters() if p.requires_grad]

    def _new_optimizer(self, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, wd: float = 0.01) -> torch.optim.AdamW:
        return torch.optim.AdamW([p for _, p in self._trainable()], lr=lr, betas=betas, eps=eps, weight_decay=wd)

    def _optimizer_state(self) -> Optional[dict]:
        """The AdamW state keyed by parameter name (full tensors; under FSDP every rank enters the
        gather and rank 0 gets it), or None when no step was taken."""
        if self.optimizer is None:
            return None
        if self.dist is not None:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            return get_optimizer_state_dict(self.model, self.optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        sd = self.optimizer.state_dict()
        names = [n for n, _ in self._trainable()]
        groups = [dict(g, params=[names[i] for i in g["params"]]) for g in sd["param_groups"]]
        return {"state": {names[i]: {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in st.items()} for i, st in sd["state"].items()},
                "param_groups": groups}

    def _load_optimizer(self, path: str) -> None:
        """Restores the AdamW state save wrote (by parameter name; every rank reads the file under FSDP
        and keeps its shards). A file from before names were used (by index) loads without FSDP only."""
        saved = torch.load(path, map_location="cpu", weights_only=True)
        sd = saved["state"]
        self.optimizer = self._new_optimizer()
        by_name = all(isinstance(k, str) for k in sd.get("state", {})) and all(
            isinstance(x, str) for g in sd.get("param_groups", []) for x in g["params"])
        if self.dist is not None:
            if not by_name:
                raise EngineError(f"{path}: an optimizer state by parameter index cannot be restored under FSDP; load it in one process and save it again")
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

            set_optimizer_state_dict(self.model, self.optimizer, optim_state_dict=sd, options=StateDictOptions(full_state_dict=True))
        elif by_name:
            index = {n: i for i, (n, _) in enumerate(self._trainable())}
            missing = [n for n in sd["state"] if n not in index]
            if missing:
                raise EngineError(f"{path}: optimizer state for {missing[0]}, which the model does not have; this optimizer state belongs to another model")
            self.optimizer.load_state_dict({
                "state": {index[n]: {k: v.to(self.device) if torch.is_tensor(v) and v.dim() > 0 else v for k, v in st.items()} for n, st in sd["state"].items()},
                "param_groups": [dict(g, params=[index[n] for n in g["params"]]) for g in sd["param_groups"]],
            })
        else:
            self.optimizer.load_state_dict(sd)
        self.optimizer_step = int(saved.get("step", 0))

    def reset_optimizer(self) -> None:
        """A fresh AdamW at the next step (its moments and step count dropped); gradients dropped too."""
        model = self._model()
        self.pending = None
        self.optimizer = None
        self.optimizer_step = 0
        for p in model.parameters():
            p.grad = None

    def save(self, directory: str, optimizer: bool = False) -> None:
        """A Hugging Face folder; with `optimizer`, the AdamW state as well (sinkflex_optimizer.pt, by
        parameter name; under FSDP gathered from every rank's shards)."""
        model = self._model()
        if self.lora is not None:
            return self._save_adapter(directory, optimizer)
        full = None
        opt_state = self._optimizer_state() if optimizer else None  # under FSDP every rank enters the gather
        if self.dist is not None:  # every rank enters the gather; rank 0 writes the folder
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            if self.dist.rank != 0:
                return
        with _replaced_folder(directory) as tmp:
            if full is not None:
                model.save_pretrained(tmp, state_dict=full, safe_serialization=True)
            else:
                model.save_pretrained(tmp, safe_serialization=True)
            with open(os.path.join(tmp, META_FILE), "w") as f:
                json.dump({"policyVersion": self.policy_version, "optimizerStep": self.optimizer_step}, f, indent=2)
            if opt_state is not None:
                torch.save({"state": opt_state, "step": self.optimizer_step}, os.path.join(tmp, OPTIMIZER_FILE))
            if self.attention_record is not None:
                with open(os.path.join(tmp, ATTENTION_FILE), "w") as f:
                    json.dump(self.attention_record, f, indent=2)
            if self.sink_profile is not None:
                with open(os.path.join(tmp, SINK_PROFILE_FILE), "w") as f:
                    json.dump(self.sink_profile, f, indent=2)
            if self.source_dir and os.path.isdir(self.source_dir):
                _copy_tokenizer_files(self.source_dir, tmp)

    def _save_adapter(self, directory: str, optimizer: bool) -> None:
        """The adapter alone, in the embedded engine's PEFT files (lora.py), with the base's tokenizer files."""
        with _replaced_folder(directory) as tmp:
            meta = {"policyVersion": self.policy_version, "optimizerStep": self.optimizer_step}
            lora_files.save(self.model, self.lora, tmp, os.path.abspath(self.lora_base), meta)
            if optimizer and self.optimizer is not None:
                torch.save({"state": self._optimizer_state(), "step": self.optimizer_step}, os.path.join(tmp, OPTIMIZER_FILE))
            _copy_tokenizer_files(self.lora_base, tmp)

    # ---- sessions ---------------------------------------------------------------------------------------

    def check_ids(self, ids: Sequence[int], what: str) -> None:
        self._model()
        if len(ids) and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = next(i for i in ids if i < 0 or i >= self.vocab_size)
            raise EngineError(f"{what}: token id {bad} is outside the vocabulary [0, {self.vocab_size})")

    def fork(self, s: Session) -> Session:
        """A child with the same tokens; it shares the parent's key/value tensors (never written in place)."""
        return Session(tokens=list(s.tokens), pinned=list(s.pinned), kv=s.kv, kv_pos=s.kv_pos, cached=s.cached,
                       evicted_to=s.evicted_to, logits=s.logits, logits_for=s.logits_for)

    def append(self, s: Session, tokens: Sequence[int], pinned: Optional[Sequence[int]] = None) -> None:
        """Appends tokens (computed by the next call that needs them); `pinned` [len(tokens)] 1 = pin that
        token: every later query keeps its key and the session never evicts it (the training mask's pinned)."""
        if pinned is not None and len(pinned) != len(tokens):
            raise EngineError(f"append: pinned has {len(pinned)} flags for {len(tokens)} tokens; give one 0/1 flag per token")
        self.check_ids(tokens, "append")
        if not len(tokens):
            return
        if pinned is not None:
            s.pinned.extend(len(s.tokens) + i for i, f in enumerate(pinned) if f)
        s.tokens.extend(int(t) for t in tokens)
        s.logits_for, s.logits = -1, None

    def truncate(self, s: Session, n: int) -> None:
        """Keeps the first n tokens. Under eviction, cutting back to where the keys the next query reads
        were evicted is an error naming them (the embedded engine's rule and message)."""
        if n >= len(s.tokens):
            return
        if n < s.cached:
            self._check_held(s, n)
        del s.tokens[n:]
        while s.pinned and s.pinned[-1] >= n:
            s.pinned.pop()
        s.keep_cached(n)
        if s.logits_for > n:
            s.logits_for = -1
            s.logits = None

    def _check_held(self, s: Session, n: int) -> None:
        """The query at n - 1 (computed again next) reads positions n - W .. n - 2 besides the sink slots
        and pinned ones: they must still be held."""
        W, K = self.sink_window.window, self.sink_window.sinks
        if W == 0 or n == 0 or s.evicted_to == 0:
            return
        held = set(s.kv_pos.tolist()) if s.kv_pos is not None else set()
        missing = [q for q in range(max(0, n - W), n - 1) if q not in held]
        if missing:
            earliest = min(len(s.tokens), s.evicted_to + W)
            raise EngineError(
                f"truncate({n}): the keys of positions {missing[0]}..{missing[-1]} were evicted from this session's KV cache "
                f"(sink-window mask, window {W}, sinks {K}: a session keeps its sink slots, its pinned positions and its last {W} positions), "
                f"and continuing after position {n - 1} needs them; truncate to {earliest} or more tokens, or open a new session "
                f"with the first {n} tokens (it recomputes them)"
            )

    def kv_state(self, s: Session) -> dict:
        """What the session holds: kept positions, their bytes (every layer), computed tokens, and where
        eviction reached."""
        return {"positions": s.kept_positions, "bytes": s.kv_bytes, "cached": s.cached, "evictedTo": s.evicted_to}

    def _autocast(self):
        if self.autocast == "bf16" and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _run(self, ids: torch.Tensor, pos: torch.Tensor, keep: torch.Tensor, kv: Optional[KVBuffer] = None, last: bool = False) -> torch.Tensor:
        """The model on ids [B, Tq] at RoPE positions pos [B, Tq] under keep [B, Tq, S]; logits [B, Tq or 1, V]."""
        p = AttentionPass(keep=keep.to(self.device), kernel=self.kernel, kv=kv)
        with attention_pass(p), self._autocast():
            kw = _logits_kwargs(lora_files.base_of(self.model)) if last else {}
            return self.model(input_ids=ids.to(self.device), position_ids=pos.to(self.device), use_cache=False, **kw).logits

    # Sessions under the sink-window mask hold their sink slots, pinned positions and last W computed
    # positions: every query after a session's last computed token (and that token computed again, after a
    # truncate) keeps only those, so evicting the others changes no log-prob and the KV memory of a session
    # is constant in its length. The buffer of a batch is compacted to them after its prefill and every W
    # decoding steps.

    def _pinned_columns(self, kv: KVBuffer, pinned: List[torch.Tensor]) -> torch.Tensor:
        """[B, S] whether each buffer column's position is pinned in its row's session."""
        pos = kv.pos[:, : kv.length]
        out = torch.zeros(pos.shape, dtype=torch.bool)
        for b, p in enumerate(pinned):
            if p.numel():
                out[b] = torch.isin(pos[b], p)
        return out

    def _buffer_keep(self, kv: KVBuffer, q: torch.Tensor, pinned: List[torch.Tensor]) -> torch.Tensor:
        """keep [B, Tq, S] for queries at positions q [B, Tq] (one document each) over the buffer's columns."""
        pos = kv.pos[:, : kv.length]
        zq, zk = torch.zeros_like(q), torch.zeros_like(pos)
        return keep_mask(self.sink_window, q, zq, q, pos.clamp(min=0), zk, pos.clamp(min=0), self._pinned_columns(kv, pinned), pos >= 0)

    def _retained(self, kv: KVBuffer, computed: torch.Tensor, pinned: List[torch.Tensor]) -> torch.Tensor:
        """[B, S] the buffer columns a session with computed[b] tokens keeps (every valid one without a window)."""
        pos = kv.pos[:, : kv.length]
        keep = pos >= 0
        W, K = self.sink_window.window, self.sink_window.sinks
        if W > 0:
            keep &= (pos < K) | (pos >= (computed[:, None] - W)) | self._pinned_columns(kv, pinned)
        return keep

    def _store(self, s: Session, kv: KVBuffer, r: int, computed: int) -> None:
        """Session s takes buffer row r as its cache, computed up to `computed` tokens; the eviction mark moves."""
        if not kv.k:  # no model call ran: the session keeps its own cache
            return
        s.kv, s.kv_pos = kv.row(r)
        s.cached = computed
        W, K = self.sink_window.window, self.sink_window.sinks
        if W > 0:
            keep = (s.kv_pos < K) | (s.kv_pos >= computed - W) | torch.isin(s.kv_pos, torch.tensor(s.pinned, dtype=torch.long))
            if not bool(keep.all()):
                dev = torch.nonzero(keep).squeeze(-1).to(s.kv[0][0].device)
                s.kv = [(k[:, dev].contiguous(), v[:, dev].contiguous()) for k, v in s.kv]
                s.kv_pos = s.kv_pos[keep]
            s.evicted_to = max(s.evicted_to, computed - W)

    def _prefill(self, ss: List[Session], extra: int):
        """Computes every pending token of the sessions and sets their last logits: one forward of them
        all (left-padded, so each session's last token is the call's last column); under the sink-window
        mask in pieces of max(W, 16) tokens, the buffer compacted after each, so a long prefill holds about
        K + 2W keys at its peak (as the embedded engine's). Returns the buffer (room for `extra` more
        columns), each row's computed count [A] and pinned positions."""
        for s in ss:
            if not s.tokens:
                raise EngineError("the session is empty; append a prompt first")
            fresh = s.logits_for == len(s.tokens) and s.logits is not None
            if not fresh and s.cached >= len(s.tokens):  # the last token is cached but its logits are gone
                s.keep_cached(len(s.tokens) - 1)
        done = torch.tensor([len(s.tokens) if (s.logits_for == len(s.tokens) and s.logits is not None) else s.cached for s in ss])
        left = torch.tensor([len(s.tokens) for s in ss]) - done
        pinned = [torch.tensor(s.pinned, dtype=torch.long) for s in ss]
        W = self.sink_window.window
        piece = max(W, 16) if W > 0 else max(int(left.max()), 1)
        C = max(s.kept_positions for s in ss)
        pos0 = torch.full((len(ss), C), -1, dtype=torch.long)
        for b, s in enumerate(ss):
            if s.kept_positions:
                pos0[b, : s.kept_positions] = s.kv_pos
        kv = KVBuffer([s.kv for s in ss], pos0, capacity=C + min(int(left.max()), piece) + extra)
        while int(left.max()) > 0:
            take = left.clamp(max=piece)
            P = int(take.max())
            ids = torch.zeros((len(ss), P), dtype=torch.long)
            for b, s in enumerate(ss):
                t = int(take[b])
                if t:
                    ids[b, P - t:] = torch.tensor(s.tokens[int(done[b]): int(done[b]) + t])
            slot = torch.arange(P)[None]
            real = slot >= P - take[:, None]
            q = done[:, None] + slot - (P - take[:, None])  # each token's position in its session
            C = kv.length
            kv.push(torch.where(real, q, -1))
            keep = self._buffer_keep(kv, q.clamp(min=0), pinned)
            own = torch.arange(C + P)[None, None, :] == (C + slot)[:, :, None]  # a padding query keeps itself
            keep = torch.where(real[:, :, None], keep, own)
            last = self._run(ids, q.clamp(min=0), keep, kv, last=True)[:, -1].float().cpu()
            done, left = done + take, left - take
            for b, s in enumerate(ss):
                if int(take[b]) and not int(left[b]):
                    s.logits, s.logits_for = last[b], len(s.tokens)
            if W > 0:
                kv.compact(self._retained(kv, done, pinned), headroom=extra if not int(left.max()) else piece)
        return kv, done, pinned

    @torch.no_grad()
    def next_logits(self, s: Session) -> torch.Tensor:
        """Logits [V] (fp32, CPU) after the session's last token; computes its pending tokens."""
        if s.logits_for == len(s.tokens) and s.logits is not None:
            return s.logits
        kv, computed, _ = self._prefill([s], 0)
        self._store(s, kv, 0, int(computed[0]))
        return s.logits

    def sample(self, s: Session, p: dict, stop: Sequence[int]) -> dict:
        """Samples up to p['maxTokens'] tokens into the session (see SampleParams in src/engine/types.ts)."""
        return self.sample_batch([s], [p], [stop])[0]

    @torch.no_grad()
    def sample_batch(self, sessions: List[Session], params: List[dict], stops: List[Sequence[int]]) -> List[dict]:
        """Samples from several sessions in one batched decode: one forward computes every session's
        pending tokens (_prefill), then one forward per step decodes every session still going; a session
        that stops leaves the batch with its keys. A session's tokens depend only on its own logits and
        generator (its seed's, else the worker's), as when sampled alone. Under the sink-window mask the
        buffer drops every W steps the keys no later query keeps (see above)."""
        reqs = [_SampleRequest.of(p, st, self.generator) for p, st in zip(params, stops)]
        results = [{"tokens": [], "logprobs": [], "finishReason": "length"} for _ in sessions]
        going = [i for i, r in enumerate(reqs) if r.max_tokens > 0]
        if not going:
            return results
        ss = [sessions[i] for i in going]
        W = self.sink_window.window
        room = max(reqs[i].max_tokens for i in going)
        kv, computed, pinned = self._prefill(ss, min(room, W + 1) if W > 0 else room)
        logits = torch.stack([s.logits for s in ss])  # [A, V]
        rows = list(range(len(ss)))  # the buffer rows still decoding, as indices into ss
        fed = 0
        while True:
            done, ids = [], []
            for r, row in enumerate(rows):
                i = going[row]
                s, req, res = sessions[i], reqs[i], results[i]
                tok, lp = req.pick(logits[r])
                res["tokens"].append(tok)
                res["logprobs"].append(lp)
                s.tokens.append(tok)
                s.logits, s.logits_for = None, -1
                if tok in req.stop:
                    res["finishReason"] = "stop"
                if tok in req.stop or len(res["tokens"]) >= req.max_tokens:
                    done.append(r)
                else:
                    ids.append(tok)
            for r in done:  # a stopped session keeps the keys of its real columns
                self._store(ss[rows[r]], kv, r, int(computed[rows[r]]))
            if len(done) == len(rows):
                return results
            if done:
                left = [r for r in range(len(rows)) if r not in set(done)]
                kv.select(torch.tensor(left))
                rows = [rows[r] for r in left]
            sel = torch.tensor(rows)
            q = computed[sel][:, None]  # [A, 1] each new token's position in its session
            row_pinned = [pinned[row] for row in rows]
            kv.push(q)
            keep = self._buffer_keep(kv, q, row_pinned)
            logits = self._run(torch.tensor(ids, dtype=torch.long)[:, None], q, keep, kv, last=True)[:, -1].float().cpu()
            computed[sel] += 1
            fed += 1
            if W > 0 and fed % W == 0:
                kv.compact(self._retained(kv, computed[sel], row_pinned), headroom=W + 1)

    # ---- scoring and training ---------------------------------------------------------------------------

    def _batch(self, seqs: List[np.ndarray], masks: SequenceMasks):
        """ids [B, T] (right-padded), RoPE positions [B, T], keep [B, T, T] and valid [B, T] for the
        sequences under the engine's sink window and the masks' document ids and pinned flags."""
        for i, q in enumerate(seqs):
            if len(q) == 0:
                raise EngineError(f"sequence {i} is empty")
            self.check_ids(q.tolist(), f"sequence {i}")
        for what, arr in (("docIds", masks.doc_ids), ("pinned", masks.pinned)):
            if arr is None:
                continue
            if len(arr) != len(seqs):
                raise EngineError(f"{what}: {len(arr)} arrays for {len(seqs)} sequences")
            for i, a in enumerate(arr):
                if len(a) != len(seqs[i]):
                    raise EngineError(f"{what}[{i}] has {len(a)} values for a sequence of {len(seqs[i])} tokens")
        B, T = len(seqs), max(len(q) for q in seqs)
        ids = np.zeros((B, T), np.int64)
        pos = np.zeros((B, T), np.int64)
        doc = np.full((B, T), -2, np.int64)  # padding: a document of its own
        dpos = np.zeros((B, T), np.int64)
        pinned = np.zeros((B, T), bool)
        valid = np.zeros((B, T), bool)
        for i, q in enumerate(seqs):
            L = len(q)
            ids[i, :L] = q
            valid[i, :L] = True
            d = np.zeros(L, np.int64) if masks.doc_ids is None else np.asarray(masks.doc_ids[i], np.int64)
            if masks.doc_ids is not None:
                try:
                    check_doc_ids(d, i)
                except AttentionError as e:
                    raise EngineError(str(e))
            doc[i, :L] = d
            dpos[i, :L] = document_positions(d)
            pos[i, :L] = dpos[i, :L] if L and d[0] == -1 else np.arange(L)  # as the embedded engine's packSequences
            pos[i, L:] = np.arange(L, T)
            if masks.pinned is not None:
                pinned[i, :L] = np.asarray(masks.pinned[i]) != 0
        t = torch.arange(T)[None].expand(B, T)
        d, dp, v = torch.from_numpy(doc), torch.from_numpy(dpos), torch.from_numpy(valid)
        keep = keep_mask(self.sink_window, t, d, dp, t, d, dp, torch.from_numpy(pinned), v)
        keep |= (~v)[:, :, None] & torch.eye(T, dtype=torch.bool)[None]  # a padding query keeps itself (no empty row)
        return torch.from_numpy(ids), torch.from_numpy(pos), keep, v

    def _token_logprobs(self, ids: torch.Tensor, pos: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """[B, T-1]: log p(ids[:, t+1] | its kept keys) at temperature 1 (padding rows are garbage)."""
        logits = self._run(ids, pos, keep)
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        return logp.gather(-1, ids[:, 1:, None].to(logp.device)).squeeze(-1)

    def logprobs(self, seqs: List[np.ndarray], masks: Optional[SequenceMasks] = None) -> np.ndarray:
        self._model()
        masks = masks or SequenceMasks()
        with torch.no_grad():
            ids, pos, keep, _ = self._batch(seqs, masks)
            if ids.shape[1] < 2:
                return np.zeros(0, dtype=np.float32)
            lp = self._token_logprobs(ids, pos, keep).cpu()
        return _flatten(lp, [len(q) for q in seqs], masks.scored)

    def forward(self, seqs: List[np.ndarray], masks: Optional[SequenceMasks] = None) -> tuple:
        """The first half of forwardBackward: log-probs with the graph kept until backward (or the next forward).
        Under FSDP each rank computes the sequences i with i % world == rank (a rank with none runs a
        2-token stand-in that gets no gradient) and the log-probs are gathered."""
        self._model()
        masks = masks or SequenceMasks()
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
        my_masks = masks.rows(rows) if rows else SequenceMasks()
        ids, pos, keep, v = self._batch(mine, my_masks)
        lengths = [len(q) for q in mine]
        with torch.enable_grad():
            lp = self._token_logprobs(ids, pos, keep) if ids.shape[1] >= 2 else torch.zeros((len(mine), 0), device=self.device)
        valid = v[:, 1:].to(self.device) if ids.shape[1] >= 2 else torch.zeros((len(mine), 0), dtype=torch.bool, device=self.device)
        sc = None
        my_scored = my_masks.scored
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


@dataclass
class _SampleRequest:
    """One session's sampling parameters (SampleParams in src/engine/types.ts) and its generator."""
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    limit: int  # ids at or past it (padding rows of the embedding) are never sampled; 0 = none
    stop: set
    gen: torch.Generator

    @staticmethod
    def of(p: dict, stop: Sequence[int], shared: torch.Generator) -> "_SampleRequest":
        seed = p.get("seed")
        gen = shared if seed is None else torch.Generator(device="cpu").manual_seed(int(seed) & 0xFFFFFFFFFFFF)
        return _SampleRequest(float(p.get("temperature", 1.0)), float(p.get("topP", 1.0)), int(p.get("topK", 0)),
                              int(p["maxTokens"]), int(p.get("limit", 0)), set(int(t) for t in stop), gen)

    def pick(self, logits: torch.Tensor) -> tuple:
        if 0 < self.limit < logits.shape[0]:
            logits = logits[: self.limit]
        return pick(logits, self.temperature, self.top_p, self.top_k, self.gen)


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
