#!/usr/bin/env bash
# One batch of the zoo on the GPU machine, its fast reports kept with their code modules
# dropped (tests/data/strip_code_modules.py) and packed in one file:
#     bash bench/run_zoo_batch.sh MODELS PHASES     (OUT: the folder that comes back)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 bench/zoo.py --out "$OUT/zoo" --models "$1" --phases "$2" --keep-reports 2>&1 \
    | grep '^\[zoo\]' | cut -c1-700
cd "$OUT/zoo" || exit 1
for xz in *.ncu-rep.xz; do
    [ -e "$xz" ] || continue
    raw=${xz%.xz}
    unxz -f "$xz" && python3 "$OLDPWD/tests/data/strip_code_modules.py" "$raw" "stripped_$raw" \
        && xz -T4 -f "stripped_$raw" && rm -f "$raw"
done
tar cf ../reports.tar stripped_*.xz *_profile.txt 2>/dev/null
cp zoo.json ../zoo.json
cd .. && rm -rf zoo && ls -la "$OUT"
