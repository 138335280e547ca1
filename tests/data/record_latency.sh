#!/bin/sh
# Record tests/data/latency/ on a CUDA GPU with ncu (see tests/data/README.md):
#     sh tests/data/record_latency.sh OUT [MODELS]
# step 12 of bench/zoo_app.py's training loop under `torch-nsight profile`, the fast default
# plus Nsight Compute's Occupancy, LaunchStats, WarpStateStats and SchedulerStats sections
# (achieved occupancy, eligible warps, stall reasons: what a latency-bound kernel waits on);
# the reports' code modules dropped, then compressed.
set -e
OUT=$1
MODELS=${2:-"vit_s resnet50"}
mkdir -p "$OUT"
for model in $MODELS; do
  start=$(date +%s.%N)
  python3 -m torch_nsight profile --steps 12:13 --out "$OUT/raw_$model" --force \
    --ncu-arg=--section=Occupancy --ncu-arg=--section=LaunchStats \
    --ncu-arg=--section=WarpStateStats --ncu-arg=--section=SchedulerStats \
    -- python3 bench/zoo_app.py "$model" --steps 14 > "$OUT/$model.log" 2>&1
  end=$(date +%s.%N)
  echo "$model: $(awk "BEGIN{print $end - $start}") s" >> "$OUT/timing.txt"
  report=$(ls "$OUT/raw_$model"/*.ncu-rep | head -1)
  python3 tests/data/strip_code_modules.py "$report" "$OUT/$model.ncu-rep"
  xz -9 -k -T4 "$OUT/$model.ncu-rep"
  rm -rf "$OUT/raw_$model" "$OUT/$model.ncu-rep"
done
