#!/usr/bin/env bash
# The torch engine on a CUDA machine: installs what it needs (a virtual environment .venv-worker with
# PyPI's CUDA build of torch, transformers, safetensors, pytest and the worker package; npm ci), then
#   1. the engine contract suite and the torch parity tests on CUDA (test/engine/torch-*.test.ts, with
#      SINKFLEX_TORCH_DEVICE=cuda and SINKFLEX_REQUIRE_TORCH=1);
#   2. one GRPO step of a Qwen2.5-0.5B-shaped model (random weights, bf16 autocast) on the GPU;
#   3. the backend benchmark (bench/backends.bench.ts);
#   4. GRPO sampled by two vLLM replicas on the same GPU while the torch engine trains (config `sampler`,
#      sync "reload": vLLM's weight-transfer routes with the disk backend), on a Qwen2.5-0.5B-shaped random
#      checkpoint: each step's sampler/trainer log-prob gap and the replicas' weight_version after it
#      (vllm in its own virtual environment .venv-vllm; skipped with SKIP_VLLM=1);
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

# 4. vLLM as the sampler: two replicas serve a Qwen2.5-0.5B-shaped random checkpoint (bf16, prefix
#    caching, processed log-probs so that they are those of the sampling distribution) and take every
#    update from the folder the trainer saves; the torch engine trains on CUDA.
if [ "${SKIP_VLLM:-0}" != 1 ]; then
  VLLM_VENV=.venv-vllm
  [ -x "$VLLM_VENV/bin/python" ] || python3 -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/python" -m pip install -q --upgrade pip
  "$VLLM_VENV/bin/python" -m pip install -q vllm
  "$VLLM_VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__)" | tee "$OUT/vllm-version.txt"
  WORK=$(mktemp -d)
  CKPT="$WORK/qwen2.5-0.5b-random"
  TOKENIZER_DIR=$(npx tsx -e 'import { qwen3TokenizerDir } from "./src/model/index.ts"; console.log(qwen3TokenizerDir())')
  "$VENV/bin/python" - "$CKPT" "$TOKENIZER_DIR" <<'PY'
import shutil, sys, torch
from pathlib import Path
from transformers import Qwen2Config, Qwen2ForCausalLM
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, max_position_embeddings=32768, tie_word_embeddings=True, rope_theta=1e6)
Qwen2ForCausalLM(cfg).save_pretrained(sys.argv[1], safe_serialization=True)
for f in Path(sys.argv[2]).iterdir():
    if f.is_file() and f.suffix in (".json", ".jinja", ".txt"):
        shutil.copy(f, Path(sys.argv[1]) / f.name)
PY
  PORTS="8101 8102"
  PIDS=""
  for port in $PORTS; do
    VLLM_SERVER_DEV_MODE=1 "$VLLM_VENV/bin/vllm" serve "$CKPT" --served-model-name policy --port "$port" --host 127.0.0.1 \
      --dtype bfloat16 --gpu-memory-utilization 0.3 --max-model-len 4096 --enable-prefix-caching \
      --logprobs-mode processed_logprobs --weight-transfer-config '{"backend": "disk"}' > "$OUT/vllm-$port.log" 2>&1 &
    PIDS="$PIDS $!"
  done
  trap 'kill $PIDS 2>/dev/null || true' EXIT
  for port in $PORTS; do
    for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 5; done
    curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "gpu-check: vLLM on port $port did not start (see $OUT/vllm-$port.log)" >&2; exit 1; }
  done
  cat > "$WORK/vllm-loop.json" <<JSON
{
  "name": "vllm-loop", "runsDir": "$WORK/runs", "seed": 0,
  "suites": [{ "env": "sinkflex/arith-v0" }],
  "model": { "checkpoint": "$CKPT" },
  "engine": { "backend": "torch", "device": "cuda" },
  "sft": { "enabled": false },
  "grpo": { "steps": 3, "batchTasks": 4, "groupSize": 4, "epochs": 1, "lr": 1e-5, "klCoef": 0, "maxTurns": 2,
            "maxTokensPerTurn": 32, "maxContextTokens": 2048, "concurrency": 16, "filterDegenerateGroups": false },
  "eval": { "tasksPerSuite": 2 },
  "sampler": { "kind": "openai", "urls": ["http://127.0.0.1:8101/v1", "http://127.0.0.1:8102/v1"], "model": "policy", "sync": "reload",
               "weightsDir": "$WORK/sampler-weights" }
}
JSON
  node bin/sinkflex.mjs train --config "$WORK/vllm-loop.json" --quiet --no-dashboard 2>&1 | tee "$OUT/vllm-loop.log" || echo "gpu-check: the vLLM sampling loop failed (see $OUT/vllm-loop.log)" >&2
  python3 - "$WORK/runs/vllm-loop/metrics.jsonl" "$OUT/vllm-loop.json" $PORTS <<'PY'
import json, sys, urllib.request
metrics, out, ports = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    steps = [r for r in map(json.loads, open(metrics)) if r.get("stage") == "grpo"]
except FileNotFoundError:
    steps = []
keep = ("step", "policyVersion", "logprobGap", "sampler", "gradNorm", "rewardMean", "staleness", "tokens", "phaseMs")
info = {p: json.load(urllib.request.urlopen(f"http://127.0.0.1:{p}/weight_info")) for p in ports}
result = {"steps": [{k: r.get(k) for k in keep} for r in steps], "replicaWeightInfo": info,
          "synced": bool(steps) and all(i.get("weight_version") == str(steps[-1]["policyVersion"]) for i in info.values())}
json.dump(result, open(out, "w"), indent=2)
print(json.dumps(result["steps"][-1] if steps else {"error": "no GRPO step ran"}), "synced:", result["synced"])
PY
  kill $PIDS 2>/dev/null || true
fi
echo "gpu-check: results in $OUT/"
