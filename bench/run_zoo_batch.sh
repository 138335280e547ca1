set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git log -1 --format=%h 2>/dev/null
python3 bench/zoo.py --out $OUT/zoo --models "$1" --phases "$2" --keep-reports 2>&1 | grep '^\[zoo\]' | cut -c1-600
cd $OUT/zoo && tar cf ../reports.tar *.ncu-rep.xz 2>/dev/null; cp zoo.json ../zoo.json; cd .. && rm -rf zoo; ls -la $OUT
