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
#      (vllm-loop.json); then the routes alone against transformers, full weights and a PEFT adapter on a
#      third replica with LoRA on (vllm-routes.json); vllm in its own virtual environment .venv-vllm,
#      skipped with SKIP_VLLM=1;
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
  # Replicas one after another (each sizes its memory from what is free): two for the loop (weight
  # transfer with the disk backend, dev mode), a third with LoRA on for the adapter route.
  PIDS=""
  start_vllm() {  # port, then the environment and arguments of that replica
    local port=$1; shift
    env "${@:1:1}" "$VLLM_VENV/bin/vllm" serve "$CKPT" --served-model-name policy --port "$port" --host 127.0.0.1 \
      --dtype bfloat16 --gpu-memory-utilization 0.25 --max-model-len 4096 --enable-prefix-caching \
      --logprobs-mode processed_logprobs "${@:2}" > "$OUT/vllm-$port.log" 2>&1 &
    PIDS="$PIDS $!"
    for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0; sleep 5; done
    echo "gpu-check: vLLM on port $port did not start (see $OUT/vllm-$port.log)" >&2
    return 1
  }
  trap 'kill $PIDS 2>/dev/null || true' EXIT
  PORTS="8101 8102"
  for port in $PORTS; do start_vllm "$port" VLLM_SERVER_DEV_MODE=1 --weight-transfer-config '{"backend": "disk"}' || exit 1; done
  start_vllm 8103 VLLM_ALLOW_RUNTIME_LORA_UPDATING=True --enable-lora --max-lora-rank 8 --max-loras 2 || exit 1
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

  # The routes alone, against transformers: both loop replicas reload a perturbed copy of the checkpoint
  # and the third loads a PEFT adapter; each one's prompt log-probs must then be the new weights' (bf16:
  # closer to them than a quarter of the distance to the old ones). Writes vllm-routes.json.
  "$VENV/bin/python" -m pip install -q peft
  "$VENV/bin/python" - "$CKPT" "$WORK" "$WORK/expected.json" <<'PY'
# The expected log-probs: a perturbed copy of the checkpoint and a PEFT adapter on it, scored teacher-forced.
import json, shutil, sys, torch
from pathlib import Path
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM
ckpt, work, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
dev = "cuda" if torch.cuda.is_available() else "cpu"
ids = list(range(1000, 1064))
def logprobs(model):
    x = torch.tensor([ids], device=dev)
    with torch.no_grad():
        logits = model(x).logits.float()
    return torch.log_softmax(logits[0, :-1], -1).gather(-1, x[0, 1:, None])[:, 0].tolist()
def tokenizer_files(dst):
    for f in ckpt.iterdir():
        if f.is_file() and f.suffix in (".json", ".jinja", ".txt") and f.name not in ("config.json", "generation_config.json"):
            shutil.copy(f, dst / f.name)
load = lambda: AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).to(dev)
torch.manual_seed(1)
m = load()
before = logprobs(m)
with torch.no_grad():
    for p in m.parameters():
        p.add_(torch.randn_like(p) * 0.05)
m.save_pretrained(work / "perturbed", safe_serialization=True)
tokenizer_files(work / "perturbed")
full = logprobs(m)
del m
pm = get_peft_model(load(), LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
with torch.no_grad():
    for n, p in pm.named_parameters():
        if "lora_B" in n:
            p.copy_(torch.randn_like(p) * 0.2)
pm.save_pretrained(work / "adapter")
json.dump({"ids": ids, "base": before, "full": full, "lora": logprobs(pm)}, open(out, "w"))
PY
  cat > "$WORK/route-check.mts" <<'TS'
// The weight-update routes on running servers: the replica pool reloads full weights on `reload` URLs
// and loads a PEFT adapter on the `lora` URL; each server's prompt log-probs before and after, against
// the expected ones (expected.json), as the largest absolute difference.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

// Run from the checkout's root.
const { ReplicaPool } = await import(pathToFileURL(join(process.cwd(), "src/rollout/index.ts")).href);

const [expectedFile, out, work, loraURL, ...reloadURLs] = process.argv.slice(2);
const want = JSON.parse(readFileSync(expectedFile!, "utf8")) as { ids: number[]; base: number[]; full: number[]; lora: number[] };
async function scored(url: string, model: string): Promise<number[]> {
  const res = await fetch(`${url}/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model, prompt: want.ids, max_tokens: 0, echo: true, logprobs: 0 }) });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  const lp = ((await res.json()) as { choices: { logprobs: { token_logprobs: (number | null)[] } }[] }).choices[0]!.logprobs.token_logprobs;
  return lp.slice(1, want.ids.length) as number[];
}
const gap = (a: number[], b: number[]) => Math.max(...a.map((x, i) => Math.abs(x - b[i]!)));
const against = async (url: string, model: string, wanted: number[]) => {
  const s = await scored(url, model);
  return { toBase: gap(s, want.base), toWanted: gap(s, wanted) };
};
const result: Record<string, unknown> = {};
const full = new ReplicaPool({ urls: reloadURLs, model: "policy", sync: "reload" });
result.reloadBefore = await Promise.all(reloadURLs.map((u) => against(u, "policy", want.full)));
result.reloadSync = await full.syncWeights(`${work}/perturbed`, 1_000_000);
result.reloadAfter = await Promise.all(reloadURLs.map((u) => against(u, "policy", want.full)));
const lora = new ReplicaPool({ urls: [loraURL!], model: "policy", sync: "lora" });
result.loraBefore = await against(loraURL!, "policy", want.lora);
result.loraSync = await lora.syncWeights(`${work}/adapter`, 1);
result.loraAfter = await against(loraURL!, "policy-v1", want.lora);
// Passed: each server now answers with the new weights' log-probs, closer to them than to the old ones.
const after = [...(result.reloadAfter as { toBase: number; toWanted: number }[]), result.loraAfter as { toBase: number; toWanted: number }];
result.passed = after.every((a) => a.toWanted < a.toBase / 4);
writeFileSync(out!, JSON.stringify(result, null, 2));
console.log(JSON.stringify(result));
TS
  npx tsx "$WORK/route-check.mts" "$WORK/expected.json" "$OUT/vllm-routes.json" "$WORK" http://127.0.0.1:8103/v1 $(for p in $PORTS; do echo "http://127.0.0.1:$p/v1"; done) \
    || echo "gpu-check: the vLLM route check failed" >&2
  kill $PIDS 2>/dev/null || true
fi
echo "gpu-check: results in $OUT/"
