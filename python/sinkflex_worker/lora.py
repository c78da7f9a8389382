"""LoRA adapters on the worker's model through peft, in the embedded engine's files (src/model/lora.ts):
a rank-r update y = W x + (alpha / r) B A x on any of the q/k/v/o/gate/up/down projections, with A [r, in]
and B [out, r]. Adapter folders are PEFT's: adapter_config.json (the same fields, in the same order, as
the embedded engine writes) and adapter_model.safetensors (F32, tensor names
`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`), so either engine, and
`peft.PeftModel.from_pretrained`, loads what the other saves.

This file does not load the base checkpoint or train (engine.py does); plain LoRA only (no DoRA,
rsLoRA, bias or per-module ranks), as the embedded engine.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
MODULES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
           "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


class LoraError(Exception):
    """An adapter or LoRA setting the worker cannot use; the message says what to do."""


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    alpha: float
    targets: tuple  # short names, in TARGETS order

    @staticmethod
    def of(rank, alpha, targets, where: str) -> "LoraSpec":
        if not (isinstance(rank, int) and not isinstance(rank, bool) and rank >= 1):
            raise LoraError(f"{where}: rank must be an integer >= 1 (got {rank!r})")
        if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha > 0):
            raise LoraError(f"{where}: alpha must be a number > 0 (got {alpha!r})")
        if not isinstance(targets, list) or not targets:
            raise LoraError(f"{where}: targets must be a non-empty list of {', '.join(TARGETS)}")
        short = []
        for t in targets:
            s = str(t).split(".")[-1]
            s = s[:-5] if s.endswith("_proj") else s
            if s not in TARGETS:
                raise LoraError(f'{where}: LoRA target "{t}" is not one of {", ".join(TARGETS)} (or {", ".join(x + "_proj" for x in TARGETS)})')
            short.append(s)
        return LoraSpec(rank, alpha, tuple(t for t in TARGETS if t in short))

    def describe(self) -> dict:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets)}


def is_adapter_dir(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, ADAPTER_CONFIG_FILE))


def read_adapter_config(directory: str):
    """(LoraSpec, base checkpoint folder, the `sinkflex` metadata or {}) of an adapter folder."""
    path = os.path.join(directory, ADAPTER_CONFIG_FILE)
    try:
        with open(path) as f:
            raw = json.load(f)
    except ValueError as e:
        raise LoraError(f"{path}: not valid JSON ({e})")
    if raw.get("peft_type") != "LORA":
        raise LoraError(f"{path}: peft_type is {json.dumps(raw.get('peft_type'))}; only LORA adapters load")
    if raw.get("use_dora") or raw.get("use_rslora"):
        raise LoraError(f"{path}: DoRA and rsLoRA adapters are not supported; train a plain LoRA")
    if raw.get("bias") not in (None, "none"):
        raise LoraError(f'{path}: bias "{raw.get("bias")}" is not supported; only bias "none"')
    if raw.get("fan_in_fan_out"):
        raise LoraError(f"{path}: fan_in_fan_out adapters are not supported")
    for key in ("rank_pattern", "alpha_pattern"):
        if raw.get(key):
            raise LoraError(f"{path}: {key} (per-module ranks) is not supported")
    targets = raw.get("target_modules")
    if isinstance(targets, str):
        raise LoraError(f'{path}: target_modules is a pattern ("{targets}"); list the modules instead')
    spec = LoraSpec.of(raw.get("r"), raw.get("lora_alpha"), targets, path)
    base = raw.get("base_model_name_or_path")
    fix = f"set base_model_name_or_path in {path} to the base checkpoint folder, or write a full checkpoint with `sinkflex merge <base> {directory} --out DIR`"
    if not isinstance(base, str) or not base:
        raise LoraError(f"{directory}: the adapter does not name its base model; {fix}")
    full = base if os.path.isabs(base) else os.path.normpath(os.path.join(directory, base))
    if not os.path.isfile(os.path.join(full, "config.json")):
        raise LoraError(f'{directory}: its base model "{base}" is not a checkpoint folder here (no {os.path.join(full, "config.json")}); {fix}')
    return spec, full, raw.get("sinkflex") or {}


def attach(model, spec: LoraSpec):
    """The model wrapped by peft with a fresh adapter (A kaiming-uniform, B = 0: the base's outputs); only
    the adapter trains."""
    from peft import LoraConfig, get_peft_model

    if getattr(model.config, "model_type", "") == "phi3":
        raise LoraError("LoRA on Phi-3 is not supported (its checkpoints fuse qkv_proj and gate_up_proj); use a Qwen2, Qwen3 or Llama model")
    cfg = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, target_modules=[MODULES[t].split(".")[-1] for t in spec.targets],
                     lora_dropout=0.0, bias="none", init_lora_weights=True)
    return get_peft_model(model, cfg)


def _entries(model, spec: LoraSpec):
    """(file tensor name, the adapter's parameter) for each layer, target, A then B (the embedded engine's order)."""
    params = dict(model.named_parameters())
    layers = len(model.get_base_model().model.layers)
    for layer in range(layers):
        for t in spec.targets:
            for which in ("A", "B"):
                name = f"base_model.model.model.layers.{layer}.{MODULES[t]}.lora_{which}.weight"
                p = params.get(name.replace(".weight", ".default.weight"))
                if p is None:
                    raise LoraError(f"the model has no {name}; the adapter does not fit it")
                yield name, p


def load_weights(model, spec: LoraSpec, directory: str) -> None:
    from safetensors.torch import load_file

    path = os.path.join(directory, ADAPTER_WEIGHTS_FILE)
    if not os.path.isfile(path):
        raise LoraError(f"{directory}: no {ADAPTER_WEIGHTS_FILE}")
    tensors = load_file(path)
    seen = set()
    with torch.no_grad():
        for name, p in _entries(model, spec):
            t = tensors.get(name, tensors.get(name.replace(".weight", ".default.weight")))
            if t is None:
                raise LoraError(f"{path}: tensor {name} is missing; the adapter does not match this model (targets {','.join(spec.targets)})")
            if tuple(t.shape) != tuple(p.shape):
                raise LoraError(f"{path}: {name} has shape {list(t.shape)}, this model needs {list(p.shape)}")
            p.copy_(t.to(p.dtype))
            seen.add(name)
    extra = [n for n in tensors if n not in seen and n.replace(".default.weight", ".weight") not in seen]
    if extra:
        raise LoraError(f"{path}: tensors this adapter layout does not use ({', '.join(extra[:3])}); is it for another model?")


def save(model, spec: LoraSpec, directory: str, base: str, meta: dict) -> None:
    """adapter_config.json and adapter_model.safetensors (F32) as the embedded engine writes them."""
    from safetensors.torch import save_file

    save_file({name: p.detach().float().cpu().contiguous() for name, p in _entries(model, spec)},
              os.path.join(directory, ADAPTER_WEIGHTS_FILE))
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base, "r": spec.rank,
        "lora_alpha": spec.alpha, "lora_dropout": 0, "target_modules": [f"{t}_proj" for t in spec.targets],
        "bias": "none", "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "init_lora_weights": True,
        "modules_to_save": None, "inference_mode": True, "sinkflex": meta,
    }
    with open(os.path.join(directory, ADAPTER_CONFIG_FILE), "w") as f:
        f.write(json.dumps(config, indent=2) + "\n")


def trainable_count(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def base_of(model):
    """The transformers model under a peft wrapper (the model itself without one)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model
