#!/bin/bash
# Record tests/data/ddp_nccl/: both ranks of examples/train_ddp.py under
# `torch-nsight profile --ranks 0,1 --metric-set duration` (one pass: NCCL kernels kept),
# then compress the reports. Run from the repository root on a host with two GPUs, with
# nvtx and ncu_report importable (see ../shared/GPU.md); writes under $OUT (default ./out).
set -euo pipefail
OUT=${OUT:-out}
start=$(date +%s%N)
torchrun --nproc-per-node 2 --no-python python3 -m torch_nsight profile --ranks 0,1 \
    --steps 2:3 --metric-set duration --out "$OUT/ddp_nccl" --force --by rank \
    -- python3 examples/train_ddp.py > "$OUT/ddp_nccl.log" 2>&1
echo "recorded in $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$OUT/ddp_nccl.log"
rm -f "$OUT"/ddp_nccl/*.tn-cache.parquet
xz -9 -f "$OUT"/ddp_nccl/*.ncu-rep
