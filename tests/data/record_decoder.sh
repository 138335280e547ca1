#!/bin/sh
# Record tests/data/decoder_train/ on a CUDA GPU with ncu (see tests/data/README.md):
#     sh tests/data/record_decoder.sh OUT
# step 3 of tests/data/decoder_train.py under `torch-nsight profile`, with the fast default
# and with durations only; the reports' code modules dropped, then compressed.
set -e
OUT=$1
mkdir -p "$OUT"
for set in fast duration; do
  start=$(date +%s.%N)
  python3 -m torch_nsight profile --steps 3:4 --metric-set $set --out "$OUT/raw_$set" --force \
    -- python3 tests/data/decoder_train.py --steps 5
  end=$(date +%s.%N)
  echo "$set: $(awk "BEGIN{print $end - $start}") s" >> "$OUT/timing.txt"
  report=$(ls "$OUT/raw_$set"/*.ncu-rep | head -1)
  python3 tests/data/strip_code_modules.py "$report" "$OUT/$set.ncu-rep"
  xz -9 -k "$OUT/$set.ncu-rep"
  ls "$OUT/raw_$set" >> "$OUT/timing.txt"
done
