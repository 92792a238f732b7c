#!/usr/bin/env bash
# Issue 18: the paper's Table 3 at a larger scale than benchmarks/table3_cpu.md, on one GPU, in one command:
# every row of `python -m solutions.experiments list`, 2 seeds each, the same number of steps for every row,
# one JSON per run in $OUT (a run whose JSON exists is skipped: rerun the command to resume), then the table.
#
#   here:   mkdir -p data && cp -r ../shared/data/multi30k data/     # data/ is git-ignored
#   device: run(command="bash benchmarks/table3_gpu.sh", carry=["data/multi30k"], timeout_s=600)
#           (a 15-minute device budget holds a few rows: ROWS="base A" STEPS=1000; the whole table is hours)
#
# The base is the final notebook's GPU model (config_for("cuda")): d_model 512, h 8 (d_k 64, the paper's), 3+3
# layers, d_ff 2048, batches of 4,096 tokens, mixed precision; rows change it relative to that (h 8 -> 1, 4, 16;
# d_k 64 -> 32, 16; N 3 -> 1, 6; d_model 256, 1024; d_ff 1024, 4096), as the paper's rows change its base.
# Not measured yet (no GPU was lent while it was written). Knobs, as environment variables: OUT, DATA, STEPS
# (2000 per run, about 18 epochs of Multi30k), SEEDS ("0 1"), ROWS (all; or names and groups: "base A D").
set -euo pipefail
OUT=${OUT:-runs/table3_gpu}
DATA=${DATA:-data/multi30k}
STEPS=${STEPS:-2000}
SEEDS=${SEEDS:-0 1}
ROWS=${ROWS:-all}
BASE='{"d_model": 512, "n_heads": 8, "n_layers": 3, "d_ff": 2048, "bpe_merges": 8000, "max_tokens": 4096,
       "warmup_steps": 400, "lr_peak": 1e-3, "eval_batch_tokens": 20000}'
export PYTHONUNBUFFERED=1
PY=$(command -v python3 || command -v python)
mkdir -p "$OUT"
"$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')" \
  | tee "$OUT/machine.txt"
start=$(date +%s)
# shellcheck disable=SC2086
"$PY" -m solutions.experiments run --device cuda --data "$DATA" --steps "$STEPS" --seeds $SEEDS --rows $ROWS \
  --jobs 1 --threads 4 --base "$BASE" --out "$OUT" 2>&1 | tee "$OUT/log.txt"
echo "table3_gpu: $(( $(date +%s) - start )) s wall" | tee -a "$OUT/log.txt"
"$PY" -m solutions.experiments table --out "$OUT" > "$OUT/table3_gpu.md"
