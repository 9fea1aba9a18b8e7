#!/usr/bin/env bash
# The GPU smoke test of the NCCL weight sync (weight_transfer: nccl), for a machine with two GPUs
# and, installed beforehand, the project (`pip install -e .`), a CUDA torch and a vLLM release
# with the weight-transfer endpoints (0.28 or later). Under ten minutes:
#   1. a vLLM server for the embedded model on GPU 1, started with VLLM_SERVER_DEV_MODE=1 and
#      --weight-transfer-config '{"backend":"nccl"}';
#   2. the server's log-probabilities of a fixed reply, read before training;
#   3. two RL steps on GPU 0 (train rl --weight-transfer nccl), the weights streamed to the server
#      over NCCL before each batch; a learning rate of 1e-2 with weight decay 0.1 moves every
#      weight whatever the rewards (the tiny questions may give no reward spread);
#   4. the same log-probabilities read again: they must have moved, and the second step's engine
#      mismatch must be small (the server holds the trainer's weights): exit 1 otherwise.
# NCCL cannot join two ranks on one GPU, so one GPU is refused (exit 2). Not yet run on a GPU.
#   bash benchmarks/gpu_smoke.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-runs/gpu_smoke}
PORT=${PORT:-8765}
PY=${PYTHON:-python}
mkdir -p "$WORK"

gpus=$($PY -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>/dev/null) || {
	echo "gpu_smoke: $PY cannot import torch: install the project and a CUDA torch first (or set PYTHON)" >&2
	exit 2
}
if [ "$gpus" -lt 2 ]; then
	echo "gpu_smoke: $gpus GPU(s): the NCCL sync needs the server and the trainer on different GPUs (2 or more)" >&2
	exit 2
fi
$PY -c "import vllm" 2>/dev/null || { echo "gpu_smoke: vLLM is not installed (pip install vllm)" >&2; exit 2; }

MODEL=$($PY -c "from websailor.train.common import resolve_model_dir; print(resolve_model_dir('smollm2'))")
echo "gpu_smoke: serving $MODEL on GPU 1, port $PORT"
CUDA_VISIBLE_DEVICES=1 VLLM_SERVER_DEV_MODE=1 $PY -m vllm.entrypoints.openai.api_server --model "$MODEL" \
	--served-model-name policy --port "$PORT" --dtype bfloat16 --max-model-len 8192 \
	--logprobs-mode processed_logprobs --weight-transfer-config '{"backend":"nccl"}' >"$WORK/vllm.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
	curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && break
	kill -0 $SERVER 2>/dev/null || { echo "gpu_smoke: the server exited; see $WORK/vllm.log" >&2; exit 1; }
	sleep 2
done

logprobs() {
	$PY - "$PORT" <<'EOF'
import json, sys, httpx
body = {"model": "policy", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0.0, "logprobs": 1}
r = httpx.post(f"http://127.0.0.1:{sys.argv[1]}/v1/completions", json=body, timeout=60).json()
print(json.dumps(r["choices"][0]["logprobs"]["token_logprobs"]))
EOF
}
BEFORE=$(logprobs)

$PY - "$WORK/qa.jsonl" <<'EOF'
import json, sys
rows = [("a", "Which city is the capital of France?", "Paris"), ("b", "Which river flows through Paris?", "Seine"),
        ("c", "Which city is the capital of Italy?", "Rome"), ("d", "Which city is the capital of Spain?", "Madrid")]
open(sys.argv[1], "w").write("".join(json.dumps({"id": i, "question": q, "answer": a}) + "\n" for i, q, a in rows))
EOF
printf 'learning_rate: 0.01\nweight_decay: 0.1\n' >"$WORK/rl.yaml"
START=$(date +%s)
CUDA_VISIBLE_DEVICES=0 $PY -m websailor.cli train rl --data "$WORK/qa.jsonl" --model "hf:$MODEL" --out "$WORK/rl" \
	--rollout-server "vllm:policy@http://127.0.0.1:$PORT/v1" --weight-transfer nccl \
	--config "$WORK/rl.yaml" --group-size 4 --batch 8 --max-steps 2 --max-calls 2
AFTER=$(logprobs)

$PY - "$BEFORE" "$AFTER" "$WORK/rl/rl_log.jsonl" "$(($(date +%s) - START))" <<'EOF'
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
log = [json.loads(line) for line in open(sys.argv[3])]
moved = max(abs(a - b) for a, b in zip(before, after))
print(f"gpu_smoke: {len(log)} RL steps in {sys.argv[4]} s; sync seconds {[r.get('sync/seconds') for r in log]}; "
      f"engine mismatch {[r.get('sampling/sampling_logp_difference/mean') for r in log]}; "
      f"the server's log-probabilities of a fixed reply moved by up to {moved:.4f}")
mismatch = log[-1].get("sampling/sampling_logp_difference/mean")
sys.exit(0 if len(log) == 2 and moved > 1e-3 and mismatch is not None and mismatch < 0.1 else 1)
EOF
