#!/usr/bin/env bash
# Issue 8's GPU measurements in one command, for a session lent a GPU machine (device tool), whose time is
# short (15 minutes, start included): the model benchmark in fp32 and bf16, then the final notebook's
# training on Multi30k and its test BLEU. Every log goes to $OUT (the device tool brings that folder back).
#
#   here:   mkdir -p data && cp -r ../shared/data/multi30k data/     # data/ is git-ignored
#   device: run(command="bash benchmarks/gpu.sh", carry=["data/multi30k"], timeout_s=540)
#
# Then copy the numbers into benchmarks/README.md (and results/translate_gpu.json). Knobs, as environment
# variables: DEVICE (cuda), DATA (data/multi30k: a mirror folder or URL), MINUTES of training (5),
# STEPS of the model benchmark (20), MAX_TEST test sentences scored (0: all 1,000).
set -uo pipefail
OUT=${OUT:-runs/gpu}
DEVICE=${DEVICE:-cuda}
DATA=${DATA:-data/multi30k}
MINUTES=${MINUTES:-5}
STEPS=${STEPS:-20}
MAX_TEST=${MAX_TEST:-0}
export PYTHONUNBUFFERED=1
PY=$(command -v python3 || command -v python)
mkdir -p "$OUT"
{
  date -u
  "$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, \
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  nproc
} 2>&1 | tee "$OUT/machine.txt"

for dtype in fp32 bf16; do
  "$PY" benchmarks/model.py --device "$DEVICE" --dtype "$dtype" --steps "$STEPS" 2>&1 | tee "$OUT/model_$dtype.txt"
done

# the final notebook's training: config_for(DEVICE), MINUTES of training, then greedy and beam test BLEU;
# results.json holds tokens per second, steps, BLEU and peak memory (model.pt is too big to come back)
start=$(date +%s)
"$PY" -m solutions.translate train --device "$DEVICE" --data "$DATA" --minutes "$MINUTES" --max-test "$MAX_TEST" \
  --out "$OUT/translate" --quiet 2>&1 | tee "$OUT/translate.txt"
rc=${PIPESTATUS[0]}
echo "translate: exit $rc, $(( $(date +%s) - start )) s wall" | tee -a "$OUT/translate.txt"
rm -f "$OUT/translate/model.pt"
exit "$rc"
