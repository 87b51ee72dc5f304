#!/usr/bin/env bash
# Part IV on one H200, as recorded in data/runs/world/ and bench/results/*-h200.json.
# Usage: scripts/part4_h200.sh OUTDIR [benches|world] [seconds]
# Runs are resumable: a second call continues where the first stopped (same OUTDIR).
set -u
out=${1:-runs/world-h200}; what=${2:-world}; budget=${3:-540}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if [ "$what" = benches ]; then
  python3 bench/sampling.py --prompts 128 --n 8 --max-tokens 128 --batch-size 256 --rounds 3 \
    --out bench/results/sampling-h200.json 2>&1 | grep -v Warning | tail -25
  python3 bench/rl_step.py --rounds 3 --steps-per-round 3 --out bench/results/rl-h200.json 2>&1 \
    | grep -v -i warning | tail -40
else
  timeout "$budget" python3 -m polyvox.cli world run --out "$out" --scale h200 2>&1 \
    | grep -v -E "it/s\]|s/it\]|Loading weights|sample/s|Warning|warn" | tail -30
  echo "world run exit: ${PIPESTATUS[0]}"
fi
