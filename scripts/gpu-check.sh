#!/usr/bin/env bash
# The torch engine on a CUDA machine: installs what it needs (a virtual environment .venv-worker with
# PyPI's CUDA build of torch, transformers, safetensors, pytest and the worker package; npm ci), then
#   1. the engine contract suite and the torch parity tests on CUDA (test/engine/torch-*.test.ts, with
#      SINKFLEX_TORCH_DEVICE=cuda and SINKFLEX_REQUIRE_TORCH=1);
#   2. one GRPO step of a Qwen2.5-0.5B-shaped model (random weights, bf16 autocast) on the GPU;
#   3. the backend benchmark (bench/backends.bench.ts);
# and writes every result as JSON under OUT (default gpu-check-out/). It is not run by CI (no GPU there).
# Usage: scripts/gpu-check.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-check-out}
mkdir -p "$OUT"
command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi: this script needs a CUDA machine" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"

VENV=.venv-worker
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q torch transformers safetensors numpy pytest
"$VENV/bin/python" -m pip install -q --no-deps -e ./python
"$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'torch sees no CUDA device')"
export SINKFLEX_TORCH_PYTHON="$PWD/$VENV/bin/python" SINKFLEX_REQUIRE_TORCH=1 SINKFLEX_TORCH_DEVICE=cuda
[ -d node_modules ] || npm ci

# 1. The contract suite and parity on CUDA (fp32 weights; parity tolerances are the CPU's, so parity
#    failures under TF32 or bf16 are reported, not hidden).
npx vitest run test/engine/torch-contract.test.ts test/engine/torch-parity.test.ts test/engine/torch-grpo-parity.test.ts \
  --reporter=json --outputFile="$OUT/contract.json" || echo "gpu-check: some CUDA engine tests failed (see $OUT/contract.json)" >&2

# 2. One GRPO step of a Qwen2.5-0.5B-shaped model on the GPU.
"$VENV/bin/python" - "$OUT/grpo-0.5b.json" <<'PY'
import json, sys, time, numpy as np, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from sinkflex_worker.engine import TorchEngine
import tempfile
cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, max_position_embeddings=32768, tie_word_embeddings=True, rope_theta=1e6)
d = tempfile.mkdtemp()
Qwen2ForCausalLM(cfg).save_pretrained(d, safe_serialization=True)
e = TorchEngine("cuda")
e.load(d)
rng = np.random.default_rng(0)
B, T = 8, 1024
seqs = [rng.integers(0, cfg.vocab_size, T).astype(np.int32) for _ in range(B)]
adv = rng.standard_normal(B).astype(np.float32)
torch.cuda.synchronize(); t0 = time.perf_counter()
old = e.logprobs(seqs, None)  # the behaviour policy's log-probs
h, lp = e.forward(seqs, None)
ratio = np.exp(lp - old)
d_lp = np.concatenate([np.full(T - 1, -a / (B * (T - 1)), np.float32) for a in adv]) * ratio  # clipped-ratio PG at ratio 1
e.backward(h, d_lp.astype(np.float32))
norm = e.optim_step({"lr": 1e-6, "maxGradNorm": 1.0})
torch.cuda.synchronize(); ms = (time.perf_counter() - t0) * 1000
json.dump({"model": "Qwen2.5-0.5B shape", "batch": B, "seq": T, "ms": ms, "tokensPerSec": B * T / (ms / 1000), "gradNorm": norm,
           "peakMemGiB": torch.cuda.max_memory_allocated() / 2**30}, open(sys.argv[1], "w"), indent=2)
print(f"GRPO step: {ms:.0f} ms, grad norm {norm:.3f}, peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
PY

# 3. The backend benchmark (the torch rows on the CPU, as in CI, for the same-machine comparison).
npm run bench:backends -- --json "$OUT/backends.json"
echo "gpu-check: results in $OUT/"
